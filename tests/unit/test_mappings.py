"""Target mappings on plain objects: value expressions and their functions, a mapping
checked against the entity's fields with each problem at its file:line, and the entry a
row of a new user's people schema makes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from consumers.adapter import make_adapter
from consumers.exceptions import ChangeRejected
from consumers.ldap.adapter import LdapAdapter
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings
from mcq.registry import RegistryInvalid, parse_registry
from mcq.registry.expressions import expression_problems, parse_expression
from mcq.registry.mappings import parse_dn_template
from tests.unit.people_registry import LDAP_LISTENER, PEOPLE

BASE = "ou=t1,dc=mcq,dc=example"


def people(listener: str = LDAP_LISTENER, **changes: str) -> str:
    listeners = "listeners:" + listener.format(name="Dir", base=BASE)
    listeners += "interests:\n  - {listener: Dir, tname: ACCOUNT_ENTRY}\n  - {listener: Dir, tname: GROUP_ENTRY}\n"
    text = PEOPLE.format(src="hr", schema="hr", slot="mcq_hr", listeners=listeners)
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def problems_of(text: str) -> str:
    with pytest.raises(RegistryInvalid) as err:
        parse_registry(text, "people.yaml")
    return str(err.value)


def line_of(text: str, fragment: str) -> int:
    return next(i for i, t in enumerate(text.splitlines(), 1) if fragment in t)


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("lower(given) || '.' || lower(family)", "ana.ruiz"),
        ("default(nick, given)", "Ana"),
        ("concat(nick, '-', given)", "-Ana"),
        ("nick || given", None),  # SQL: NULL || x is NULL
        ("CASE WHEN status = 'A' THEN 512 ELSE 514 END", 512),
        ("lookup('status', status, 'Unknown')", "Active"),
        ("lookup('status', 'Z', 'Unknown')", "Unknown"),
        ("format_date(born, '%Y%m%d')", "19900304"),
        ("format_date(19000, '%Y-%m-%d')", "2022-01-08"),  # Debezium's days since the epoch
        ("format_date(born, 'generalized')", "19900304000000Z"),
        ("dn('uid', 'a,b', 'ou=p,dc=x')", "uid=a\\,b,ou=p,dc=x"),
        ("substr(family, 2, 2)", "ui"),
        ("upper(left(given, 1)) || right(family, 2)", "Aiz"),
        ("replace(family, 'u', 'oo')", "Rooiz"),
        ("split_part('a@b.c', '@', 2)", "b.c"),
        ("ascii('Núñez')", "Nunez"),
        ("if(status IN ('A', 'S'), 'yes', 'no')", "yes"),
        ("status = 'A' AND NOT family LIKE 'X%'", True),
        ("nick IS NULL", True),
    ],
)
def test_an_expression_computes_its_value_from_the_rows_fields(expression: str, value: object) -> None:
    row = {"given": "Ana", "family": "Ruiz", "status": "A", "born": "1990-03-04", "nick": None}
    assert parse_expression(expression).value(row, {"status": {"A": "Active"}}) == value


def test_an_expressions_mistakes_are_each_named() -> None:
    assert "no function shout()" in expression_problems("shout(a)", {"a"}, {})[0]
    assert "lower() takes 1 arguments, not 2" in expression_problems("lower(a, a)", {"a"}, {})[0]
    assert (
        "lookup table 'titles' is not in the mapping's lookups"
        in expression_problems("lookup('titles', a)", {"a"}, {})[0]
    )
    assert expression_problems("owner.nick", {"a"}, {}) == ["'owner.nick': the entity has no field owner.nick"]
    assert "does not parse at column" in expression_problems("a ||", {"a"}, {})[0]


def test_the_people_mapping_is_accepted() -> None:
    registry = parse_registry(people(), "people.yaml")
    listener = registry.listener("Dir")
    assert listener is not None and "entries" in listener.adapter.settings


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        (
            'dn: "uid={{login}},',
            'dn: "uid=fixed,',
            "the RDN has no {expression}, so every entry would have the same name",
        ),
        ('dn: "uid={{login}},', 'dn: "uid={{owner.given}},', "the uid can be empty (owner.given may be NULL)"),
        ('dn: "uid={{login}},', 'dn: "uid={{login}}+uid={{uid_number}},', "a duplicate RDN attribute"),
        ('dn: "uid={{login}},', 'dn: "uid={{login}},ou={{login}},', "only the first RDN may hold {expressions}"),
        ("givenName: owner.given", "givenName: owner.nick", "the entity has no field owner.nick"),
        ("value: number,", "value: digits,", "the entity has no field digits"),
        (
            "{{each: owner.phones, value: number, when",
            "{{each: owner, value: number, when",
            "owner is not a to-many join",
        ),
        ("lookup('status'", "lookup('statuses'", "lookup table 'statuses' is not in the mapping's lookups"),
        ("gidNumber: \"'100'\"", "description: login", "description is the marker of mcq's entries"),
    ],
)
def test_a_bad_mapping_is_refused_at_its_line_with_the_reason(old: str, new: str, says: str) -> None:
    listener = LDAP_LISTENER.replace(old, new, 1)
    assert listener != LDAP_LISTENER, old
    text = people(listener)
    problems = problems_of(text)
    assert says in problems
    assert "people.yaml:" in problems and problems.count("people.yaml:") == 1, problems


def test_a_dn_template_that_can_be_empty_is_fine_with_a_default() -> None:
    text = people(LDAP_LISTENER.replace('dn: "uid={{login}},', 'dn: "uid={{default(owner.given, login)}},'))
    parse_registry(text, "people.yaml")
    template = parse_dn_template("cn={given} {family},ou=p,dc=x")
    assert template.render({"given": "A", "family": "B,C"}, {}) == "cn=A B\\,C,ou=p,dc=x"
    with pytest.raises(ValueError, match="the cn of this entry is empty"):
        template.render({}, {})


AD = """
  - name: {name}
    owner: idm@example
    adapter:
      type: ldap
      settings:
        directory: active-directory
        entries:
          ACCOUNT_ENTRY:
            dn: "cn={{login}},ou=staff,{base}"
            object_classes: [top, person, organizationalPerson, user]
            attributes:
              sAMAccountName: login
              userPrincipalName: "login || '@mcq.test'"
              userAccountControl: "CASE WHEN owner.status = 'A' THEN 512 ELSE 514 END"
          GROUP_ENTRY:
            dn: "cn={{pkey_string}},ou=teams,{base}"
            object_classes: [top, group]
            attributes:
              sAMAccountName: pkey_string
              member: {{each: members, value: "dn('cn', account.login, 'ou=staff,{base}')"}}
"""


def test_an_active_directory_mapping_needs_samaccountname_and_never_writes_passwords() -> None:
    parse_registry(people(AD), "people.yaml")
    text = people(AD.replace("              sAMAccountName: login\n", "              unicodePwd: login\n"))
    problems = problems_of(text)
    assert "an Active Directory user or group needs sAMAccountName" in problems
    assert "unicodePwd: mcq never writes passwords" in problems
    assert f"people.yaml:{line_of(text, 'unicodePwd')}:" in problems


def change(ref: str, key: dict[str, object], row: dict[str, str | None] | None) -> Change:
    tname, _, subtype = ref.partition("/")
    return Change(
        ChangeKey(tname, subtype or None, **key),  # type: ignore[arg-type]
        "UPDATE" if row is not None else "DELETE", Position(1, 1), datetime.now(UTC), "hr.accounts", row,
    )  # fmt: skip


def test_an_entitys_row_becomes_the_entry_the_mapping_declares() -> None:
    registry = parse_registry(people(), "people.yaml")
    listener = registry.listener("Dir")
    assert listener is not None
    adapter = make_adapter(listener, Settings())
    assert isinstance(adapter, LdapAdapter)
    phones = [{"id": 1, "kind": "office", "number": "+1 555 0100", "person_id": "7"},
              {"id": 2, "kind": "mobile", "number": "+1 555 0199", "person_id": "7"},
              {"id": 3, "kind": "office", "number": "+1 555 0100", "person_id": "7"}]  # fmt: skip
    row = {"login": "ana", "person_id": "7", "uid_number": "1007", "owner.id": "7", "owner.given": "Ana",
           "owner.family": "Ruiz", "owner.status": "S", "owner.phones": json.dumps(phones)}  # fmt: skip
    _, entry = adapter.entry_of(change("ACCOUNT_ENTRY", {"pkey_string": "ana"}, row))
    assert entry is not None
    assert entry.dn == f"uid=ana,ou=staff,{BASE}"
    assert entry.attributes["cn"] == ["Ana Ruiz"]
    assert entry.attributes["telephoneNumber"] == ["+1 555 0100"]  # one value, not two
    assert entry.attributes["mobile"] == ["+1 555 0199"]
    assert entry.attributes["employeeType"] == ["Suspended"]
    assert entry.attributes["loginShell"] == ["/usr/sbin/nologin"]
    assert entry.attributes["title"] == []  # owned, not mapped: kept empty
    assert entry.attributes["description"] == [f"mcq:Dir {ChangeKey('ACCOUNT_ENTRY', pkey_string='ana').text()}"]
    no_owner = {"login": "bob", "person_id": None, "uid_number": "1008"}
    _, entry = adapter.entry_of(change("ACCOUNT_ENTRY", {"pkey_string": "bob"}, no_owner))
    assert entry is not None and entry.attributes["cn"] == ["bob"] and entry.attributes["employeeType"] == ["Unknown"]
    members = [{"group_name": "ops", "login": "ana", "account": {"login": "ana"}},
               {"group_name": "ops", "login": "zed", "account": None}]  # fmt: skip
    _, group = adapter.entry_of(change("GROUP_ENTRY", {"pkey_string": "ops"},
                                       {"name": "ops", "gid": "500", "members": json.dumps(members)}))  # fmt: skip
    assert group is not None and group.attributes["memberUid"] == ["ana"] and group.attributes["gidNumber"] == ["500"]
    _, gone = adapter.entry_of(change("ACCOUNT_ENTRY", {"pkey_string": "ana"}, None))
    assert gone is None


def test_a_mapping_that_fails_for_one_row_rejects_that_row_with_the_reason() -> None:
    text = people(LDAP_LISTENER.replace("givenName: owner.given", "givenName: \"format_date(owner.given, '%Y')\""))
    listener = parse_registry(text, "people.yaml").listener("Dir")
    assert listener is not None
    adapter = make_adapter(listener, Settings())
    assert isinstance(adapter, LdapAdapter)
    row = {"login": "ana", "uid_number": "1", "owner.given": "Ana"}
    with pytest.raises(ChangeRejected, match="mapping: format_date: 'Ana' is not a date"):
        adapter.entry_of(change("ACCOUNT_ENTRY", {"pkey_string": "ana"}, row))


def test_an_ldap_listener_without_entries_or_with_an_interest_it_does_not_map_is_refused() -> None:
    bare = """
  - name: {name}
    owner: idm@example
    adapter: {{type: ldap, settings: {{directory: openldap}}}}
"""
    problems = problems_of(people(bare))
    assert "listeners[Dir].adapter.settings: an ldap listener declares its entries" in problems, problems
    text = people().replace("  - {listener: Dir, tname: GROUP_ENTRY}\n", "  - {listener: Dir, tname: GROUP_ENTRY}\n"
                            "  - {listener: Dir, tname: PHONE}\n")  # fmt: skip
    problems = problems_of(text)
    assert "listener Dir is interested in PHONE but maps nothing of it" in problems, problems


def test_base_in_an_attributes_expression_is_the_directorys_base_dn() -> None:
    from mcq.registry.mappings import Each, EntryMapping, attribute_values

    mapping = EntryMapping.model_validate({
        "dn": "cn={pkey_string},ou=g,{base}", "object_classes": ["group"],
        "attributes": {"member": {"each": "members", "value": "dn('CN', login, 'OU=staff,{base}')"},
                       "info": "'at {base}'", "seeAlso": ["'ou=a,{base}'", "login"]},
    }).with_base("DC=o'brien,DC=test")  # fmt: skip
    row = {"members": json.dumps([{"login": "ana"}]), "login": "ana"}
    assert isinstance(mapping.attributes["member"], Each)
    assert attribute_values(mapping.attributes["member"], row, {}) == ["CN=ana,OU=staff,DC=o'brien,DC=test"]
    assert attribute_values(mapping.attributes["info"], row, {}) == ["at DC=o'brien,DC=test"]
    assert attribute_values(mapping.attributes["seeAlso"], row, {}) == ["ou=a,DC=o'brien,DC=test", "ana"]
