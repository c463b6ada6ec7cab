"""Pure logic of the adapters: what a directory entry, a file and a webhook body say."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from consumers.file.adapter import to_jsonl, to_xml
from consumers.ldap.entries import group_entry, person_entry
from consumers.projection import IndexedState, WrittenFrom
from consumers.webhook.settings import WebhookSettings
from mcq.change import Change, ChangeKey, Position


def state() -> IndexedState:
    s = IndexedState()
    s.put(
        "PERSON/PEOPLE", ChangeKey("PERSON", "PEOPLE", 1), {"person_id": "1", "first_name": "Ada", "last_name": "King"}
    )
    s.put(
        "PERSON/Telephone",
        ChangeKey("PERSON", "Telephone", 1, aux_string="campus"),
        {"tele_type": "campus", "phone_number": "+1 518 276 0001"},
    )
    s.put(
        "PERSON/Telephone",
        ChangeKey("PERSON", "Telephone", 1, aux_string="home"),
        {"tele_type": "home", "phone_number": "+1 518 555 0000"},
    )
    s.put(
        "PERSON/Address",
        ChangeKey("PERSON", "Address", 1, aux_string="campus"),
        {
            "addr_type": "campus",
            "street": "110 8th St",
            "city": "Troy",
            "state": "NY",
            "postal_code": "12180",
            "country": "US",
        },
    )
    s.put("LOGINS", ChangeKey("LOGINS", None, 1, "aking", 5001), {"username": "aking", "unixuid": "5001"})
    s.put("GROUPS", ChangeKey("GROUPS", None, pkey_string="staff"), {"group_name": "staff", "gid": "500"})
    for user in ("aking", "bob"):
        s.put(
            "GROUP_MEM",
            ChangeKey("GROUP_MEM", None, pkey_string="staff", aux_string=user),
            {"group_name": "staff", "username": user},
        )
    return s


def test_a_person_entry_gathers_every_aspect_and_says_what_must_be_absent() -> None:
    entry = person_entry(state(), 1, "ou=people,dc=x", 100)
    assert entry is not None and entry.dn == "employeeNumber=1,ou=people,dc=x"
    a = entry.attributes
    assert (
        a["cn"] == ["Ada King"]
        and a["telephoneNumber"] == ["+1 518 276 0001"]
        and a["homePhone"] == ["+1 518 555 0000"]
    )
    assert a["postalAddress"] == ["110 8th St$Troy, NY 12180$US"]
    assert a["uid"] == ["aking"] and a["uidNumber"] == ["5001"] and "posixAccount" in entry.object_classes
    assert a["mobile"] == [] and a["mail"] == []  # REPLACE with nothing: removed if present


def test_a_deleted_person_has_no_entry_and_a_key_removal_unindexes_it() -> None:
    s = state()
    s.put("PERSON/PEOPLE", ChangeKey("PERSON", "PEOPLE", 1), None)
    assert person_entry(s, 1, "ou=people,dc=x", 100) is None
    s.put("GROUP_MEM", ChangeKey("GROUP_MEM", None, pkey_string="staff", aux_string="bob"), None)
    group = group_entry(s, "staff", "ou=groups,dc=x")
    assert group is not None and group.attributes["memberUid"] == ["aking"]


def change(kind: str, after: dict[str, str | None] | None) -> Change:
    return Change(
        ChangeKey("PERSON", "PEOPLE", 1),
        kind,
        Position(7, 8),
        datetime(2026, 1, 1, tzinfo=UTC),  # type: ignore[arg-type]
        "campus.people",
        after,
    )


def test_files_carry_the_idempotency_key_and_xml_marks_nulls() -> None:
    changes = [change("INSERT", {"last_name": "King", "title": None}), change("DELETE", None)]
    lines = [json.loads(x) for x in to_jsonl(changes).decode().splitlines()]
    assert lines[0]["idempotency_key"] == changes[0].idempotency_key and lines[1]["after"] is None
    root = ET.fromstring(to_xml("CMMS", changes))
    first = root.findall("change")[0]
    assert first.get("type") == "INSERT" and first.find("key/person_id").text == "1"  # type: ignore[union-attr]
    assert first.find("after/column[@name='title']").get("null") == "true"  # type: ignore[union-attr]


def test_a_webhook_token_never_prints() -> None:
    settings = WebhookSettings.model_validate({"url": "https://x.example/hook", "bearer_token": "s3cret"})
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings.model_dump())


def _at(topic: str, partition: int, offset: int | None) -> Change:
    return Change(
        key=ChangeKey("PERSON", "Status", 1),
        change_type="UPDATE",
        position=Position(1, 1),
        entry_time=datetime(2026, 1, 1, tzinfo=UTC),
        source_table="campus.person_status",
        after={"person_id": "1", "status": "Staff"},
        topic=topic,
        partition=partition,
        offset=offset,
    )


def test_a_change_the_last_write_was_computed_from_needs_no_write_again() -> None:
    written = WrittenFrom()
    assert not written.reflected("uid=1", _at("status", 0, 5))  # never written
    written.wrote("uid=1", {("status", 0): 10, ("people", 0): 3})
    assert written.reflected("uid=1", _at("status", 0, 9))  # the store had read it
    assert not written.reflected("uid=1", _at("status", 0, 10))  # not read yet when written
    assert not written.reflected("uid=1", _at("status", 1, 0))  # a partition the store had not read
    assert not written.reflected("uid=1", _at("_refresh", 0, 0))  # a refresh always writes
    assert not written.reflected("uid=1", _at("status", 0, None))  # a change from no record
    assert not written.reflected("uid=2", _at("status", 0, 9))  # another object
    written.wrote("uid=3", None)  # a store that reads the source: nothing is ever skipped
    assert not written.reflected("uid=3", _at("status", 0, 0))
    written.forget()  # the view changed
    assert not written.reflected("uid=1", _at("status", 0, 9))
