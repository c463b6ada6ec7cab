"""Entities as the registry declares them and as the index assembles them, on plain
objects: a join checked against the tables' keys, an expression naming an unknown field,
a cyclic join; the fan-out of a related row's change; the row a listener sees."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from consumers.exceptions import ChangeRejected
from consumers.payload import Payload
from mcq.change import Change, ChangeKey, Position
from mcq.registry import RegistryInvalid, parse_registry
from mcq.registry.entities import unflatten
from streams.entities.index import EntityIndex
from tests.unit.entity_registry import ACTIVE, EAST, SHOP

BASE = {"src": "shop", "schema": "shop", "slot": "mcq_shop"}


def shop(listeners: str = "", **changes: str) -> str:
    text = SHOP.format(listeners=listeners, **BASE)
    for old, new in changes.items():
        text = text.replace(old.replace("__", " "), new)
    return text


LISTENERS = f"""listeners:
  - {{name: East, owner: t@example, adapter: {{type: table, settings: {{table: x.east}}}}}}
  - {{name: Active, owner: t@example, adapter: {{type: table, settings: {{table: x.active}}}}}}
interests:
  - {{listener: East, tname: ORDER_VIEW, rule: "{EAST}"}}
  - {{listener: Active, tname: PERSON_VIEW, rule: "{ACTIVE}"}}
"""


def test_aqs_east_rule_over_the_orders_customer_is_accepted_as_written() -> None:
    registry = parse_registry(shop(LISTENERS), "shop.yaml")
    table = registry.table("ORDER_VIEW", None)
    assert table is not None
    assert {"customer.country", "customer.name", "items", "orderregion"} <= registry.columns_of(table)


def test_a_join_on_fields_that_are_not_keys_names_its_line_and_field() -> None:
    text = shop(LISTENERS).replace("match: {pkey_number: customer_id}", "match: {country: orderregion}")
    with pytest.raises(RegistryInvalid) as err:
        parse_registry(text, "shop.yaml")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "name: customer" in t)
    problems = str(err.value)
    assert f"shop.yaml:{line}:" in problems
    assert "must name every key field of CUSTOMER (pkey_number)" in problems


def test_a_one_to_many_join_must_hang_from_the_parents_key() -> None:
    text = shop().replace("match: {order_id: pkey_number}", "match: {order_id: customer_id}")
    with pytest.raises(RegistryInvalid, match="every key field of ORDERS"):
        parse_registry(text, "shop.yaml")


def test_a_join_field_that_does_not_exist_is_named() -> None:
    text = shop().replace("match: {uname: pkey_string}", "match: {user_name: pkey_string}")
    with pytest.raises(RegistryInvalid, match="'user_name' is neither a key field nor a column of EMAIL"):
        parse_registry(text, "shop.yaml")


def test_a_rule_naming_an_unknown_entity_field_is_refused_at_its_line() -> None:
    text = shop(LISTENERS.replace("customer.country = 'USA'", "customer.region = 'USA'"))
    with pytest.raises(RegistryInvalid) as err:
        parse_registry(text, "shop.yaml")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "listener: East" in t)
    assert f"shop.yaml:{line}:" in str(err.value)
    assert "rule reads customer.region, which no covered table has" in str(err.value)


def test_a_cyclic_join_is_refused() -> None:
    text = shop().replace(
        "kind: many-to-one, match: {person_id: owner_id}}",
        "kind: many-to-one, match: {person_id: owner_id}, via: status}",
    )
    with pytest.raises(RegistryInvalid, match="cyclic join: owner -> status -> owner"):
        parse_registry(text, "shop.yaml")


def test_a_rule_over_a_related_column_its_feed_does_not_watch_is_refused() -> None:
    text = shop(LISTENERS).replace("columns: [id, name, country]}", "columns: [id, name, country], watch: [name]}")
    with pytest.raises(RegistryInvalid, match=r"rule reads customer\.country, which shop\.customers does not watch"):
        parse_registry(text, "shop.yaml")


def _index(name: str) -> EntityIndex:
    registry = parse_registry(shop(), "shop.yaml")
    table = registry.table(name, None)
    assert table is not None
    return EntityIndex(registry, table)


def _put(index: EntityIndex, ref: str, key: ChangeKey, row: dict[str, str | None] | None, at: int) -> None:
    index.put(ref, key, row, Position(at, at))


def test_a_customers_country_change_makes_all_of_its_orders_dirty_and_no_other() -> None:
    index = _index("ORDER_VIEW")
    _put(index, "CUSTOMER", ChangeKey("CUSTOMER", pkey_number=1), {"id": "1", "name": "a", "country": "USA"}, 1)
    _put(index, "CUSTOMER", ChangeKey("CUSTOMER", pkey_number=2), {"id": "2", "name": "b", "country": "UK"}, 2)
    for i in range(1000):
        row = {"id": str(i), "customer_id": str(1 + i % 2), "orderregion": "EASTERN", "ordertype": "RUSH", "total": "1"}
        _put(index, "ORDERS", ChangeKey("ORDERS", pkey_number=i), row, 10 + i)
    index.dirty.clear()
    _put(index, "CUSTOMER", ChangeKey("CUSTOMER", pkey_number=1), {"id": "1", "name": "a", "country": "UK"}, 5000)
    assert index.fanout_last == 500
    roots = {ChangeKey.from_text(t).pkey_number for t in index.dirty}
    assert roots == set(range(0, 1000, 2))
    doc = index.document(ChangeKey("ORDERS", pkey_number=0).text())
    assert doc is not None
    assert doc[0]["customer"]["country"] == "UK"
    assert doc[1] == Position(5000, 5000)  # the newest row it is made of


def test_an_item_moved_to_another_order_touches_both_orders() -> None:
    index = _index("ORDER_VIEW")
    for o in (1, 2):
        row = {"id": str(o), "customer_id": None, "orderregion": "X", "ordertype": "N", "total": "0"}
        _put(index, "ORDERS", ChangeKey("ORDERS", pkey_number=o), row, o)
    _put(index, "ITEM", ChangeKey("ITEM", pkey_number=7), {"id": "7", "order_id": "1", "sku": "s", "qty": "2"}, 3)
    index.dirty.clear()
    _put(index, "ITEM", ChangeKey("ITEM", pkey_number=7), {"id": "7", "order_id": "2", "sku": "s", "qty": "2"}, 4)
    assert {ChangeKey.from_text(t).pkey_number for t in index.dirty} == {1, 2}
    one, two = (index.document(ChangeKey("ORDERS", pkey_number=o).text()) for o in (1, 2))
    assert one is not None and two is not None
    assert one[0]["items"] == [] and two[0]["items"] == [{"sku": "s", "qty": "2"}]  # only the columns it carries
    assert one[0]["customer"] is None  # a NULL joins nothing


def test_a_status_flip_reaches_the_mailbox_through_its_owner() -> None:
    index = _index("MAILBOX")
    _put(index, "PERSON", ChangeKey("PERSON", person_id=5), {"id": "5", "name": "Ola", "kind": "employee"}, 1)
    _put(index, "PERSON/Status", ChangeKey("PERSON", "Status", person_id=5), {"person_id": "5", "status": "on"}, 2)
    _put(index, "ACCOUNT", ChangeKey("ACCOUNT", pkey_string="ola"), {"uname": "ola", "owner_id": "5", "quota": "1"}, 3)
    _put(index, "EMAIL", ChangeKey("EMAIL", pkey_string="o@x"), {"address": "o@x", "uname": "ola", "kind": "main"}, 4)
    _put(index, "EMAIL", ChangeKey("EMAIL", pkey_string="n@x"), {"address": "n@x", "uname": "ola", "kind": "alias"}, 5)
    index.dirty.clear()
    _put(index, "PERSON/Status", ChangeKey("PERSON", "Status", person_id=5), {"person_id": "5", "status": "off"}, 6)
    assert list(index.dirty) == [ChangeKey("ACCOUNT", pkey_string="ola").text()]
    found = index.document(ChangeKey("ACCOUNT", pkey_string="ola").text())
    assert found is not None
    row = index.flat(found[0])
    assert row["owner.name"] == "Ola" and row["owner.status.status"] == "off"
    assert [a["address"] for a in json.loads(row["addresses"] or "")] == ["n@x", "o@x"]
    doc = unflatten(row, ["addresses"])
    assert doc["owner"]["status"]["status"] == "off" and len(doc["addresses"]) == 2
    # the e-mail address removed: the mailbox is dirty again, without it
    index.dirty.clear()
    _put(index, "EMAIL", ChangeKey("EMAIL", pkey_string="n@x"), None, 7)
    assert len(index.dirty) == 1
    found = index.document(ChangeKey("ACCOUNT", pkey_string="ola").text())
    assert found is not None and [a["address"] for a in found[0]["addresses"]] == ["o@x"]


def test_the_root_rows_delete_leaves_no_document_and_its_key_dirty() -> None:
    index = _index("PERSON_VIEW")
    _put(index, "PERSON", ChangeKey("PERSON", person_id=5), {"id": "5", "name": "Ola", "kind": "x"}, 1)
    index.dirty.clear()
    _put(index, "PERSON", ChangeKey("PERSON", person_id=5), None, 2)
    text = ChangeKey("PERSON", person_id=5).text()
    assert text in index.dirty and index.document(text) is None
    assert index.key_of(index.dirty[text][0]) == ChangeKey("PERSON_VIEW", person_id=5)


def test_indexes_rebuilt_from_restored_rows_answer_as_before() -> None:
    index = _index("ORDER_VIEW")
    _put(index, "CUSTOMER", ChangeKey("CUSTOMER", pkey_number=1), {"id": "1", "name": "a", "country": "USA"}, 1)
    row = {"id": "3", "customer_id": "1", "orderregion": "X", "ordertype": "N", "total": "0"}
    _put(index, "ORDERS", ChangeKey("ORDERS", pkey_number=3), row, 2)
    index.rebuild_indexes()
    index.dirty.clear()
    _put(index, "CUSTOMER", ChangeKey("CUSTOMER", pkey_number=1), {"id": "1", "name": "a", "country": "UK"}, 3)
    assert len(index.dirty) == 1


def test_a_payload_template_that_does_not_compile_is_refused_at_its_line() -> None:
    listeners = """listeners:
  - name: Mail
    owner: t@example
    adapter: {type: webhook, settings: {url: "http://127.0.0.1:9/", template: "{{ entity.uname "}}
interests:
  - {listener: Mail, tname: MAILBOX}
"""
    text = shop(listeners)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "template:" in t)
    with pytest.raises(RegistryInvalid, match=f"shop.yaml:{line}: listeners.Mail.*template line 1: unexpected end"):
        parse_registry(text, "shop.yaml")


def test_a_payload_that_fails_for_one_entity_rejects_that_change_with_the_reason() -> None:
    registry = parse_registry(shop(), "shop.yaml")
    payload = Payload('{"primary": {{ entity.addresses[0].address | tojson }}}', as_json=True)
    at = Position(1, 1)
    ok = Change(ChangeKey("MAILBOX", pkey_string="a"), "INSERT", at, datetime.now(UTC), "x",
                after={"uname": "a", "addresses": '[{"address": "a@x"}]'})  # fmt: skip
    assert json.loads(payload.render("Mail", registry, ok)) == {"primary": "a@x"}
    empty = dataclasses.replace(ok, after={"uname": "b", "addresses": "[]"})
    with pytest.raises(ChangeRejected, match=r"payload template for MAILBOX.*UndefinedError"):
        payload.render("Mail", registry, empty)


def test_a_join_on_a_column_named_like_a_key_field_its_table_is_not_keyed_by_reads_the_column() -> None:
    """An account keyed by its login has a ``person_id`` column: its owner is the person of
    that column (found by a new user's schema: read as the account's key's person_id, which
    it has none of, the owner joined nothing)."""
    from tests.unit.people_registry import PEOPLE

    registry = parse_registry(PEOPLE.format(src="hr", schema="hr", slot="mcq_hr", listeners=""), "people.yaml")
    table = registry.table("ACCOUNT_ENTRY", None)
    assert table is not None
    index = EntityIndex(registry, table)
    _put(index, "PERS", ChangeKey("PERS", person_id=7), {"id": "7", "given": "Ana", "family": "Ruiz"}, 1)
    _put(index, "PHONE", ChangeKey("PHONE", pkey_number=1), {"id": "1", "person_id": "7", "kind": "office",
                                                             "number": "+1 555"}, 2)  # fmt: skip
    _put(index, "ACCT", ChangeKey("ACCT", pkey_string="ana"), {"login": "ana", "person_id": "7", "uid_number": "1"}, 3)
    doc = index.document(ChangeKey("ACCT", pkey_string="ana").text())
    assert doc is not None
    assert doc[0]["owner"]["given"] == "Ana" and [p["number"] for p in doc[0]["owner"]["phones"]] == ["+1 555"]
    index.dirty.clear()
    _put(index, "PERS", ChangeKey("PERS", person_id=7), {"id": "7", "given": "Ana", "family": "Gil"}, 4)
    assert set(index.dirty) == {ChangeKey("ACCT", pkey_string="ana").text()}  # the owner's change reaches the account


def test_an_entity_is_keyed_as_its_root_so_a_refresh_of_a_gone_key_is_a_delete() -> None:
    from mcq.registry import load_registry
    from tests import PROJECT_ROOT

    campus = load_registry(PROJECT_ROOT / "examples" / "campus.yaml")
    for entity, root in (("PERSON_ENTRY", ("PERSON", "PEOPLE")), ("ACCOUNT_ENTRY", ("LOGINS", None)),
                         ("GROUP_ENTRY", ("GROUPS", None))):  # fmt: skip
        table, root_table = campus.table(entity, None), campus.table(*root)
        assert table is not None and root_table is not None
        assert campus.key_fields(table) == campus.key_fields(root_table) != frozenset()
    assert campus.key_fields(campus.table("LOGINS", None)) == {"pkey_string", "person_id", "pkey_number"}  # type: ignore[arg-type]


def test_a_preview_finds_the_listeners_table_by_the_key_fields_given() -> None:
    from mcq.registry import load_registry
    from streams.entities.preview import PreviewError, choose_table
    from tests import PROJECT_ROOT

    campus = load_registry(PROJECT_ROOT / "examples" / "campus.yaml")
    assert choose_table(campus, "LDAP", None, ("person_id=7",)).tname == "PERSON_ENTRY"
    assert choose_table(campus, "LDAP", None, ("pkey_string=wheel",)).tname == "GROUP_ENTRY"
    assert choose_table(campus, "LDAP", "GROUP_ENTRY", ("person_id=7",)).tname == "GROUP_ENTRY"  # as told
    with pytest.raises(PreviewError, match="name one with --tname"):
        choose_table(campus, "LDAP", None, ("aux_string=x",))
