"""The LDAP adapter against the stack's real OpenLDAP: people as inetOrgPerson (+
posixAccount), Unix groups and memberships; updates, renames, deletes and a repeated
delivery, read back with ldap3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ldap3 import BASE, LEVEL, Connection, Server

from consumers.adapter import make_adapter
from consumers.runtime.topics import ListenerTopics
from mcq.change import Change
from mcq.config import Settings
from mcq.contract import register_topic, registry_client
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.topics.plan import apply_topics, plan_topics
from tests.integration.listeners import World, running, wait_for
from tests.integration.test_adapters import ch, send_changes
from tests.integration.worlds import CAMPUS


def ldap(settings: Settings) -> Connection:
    s = settings.ldap
    return Connection(Server(s.url), user=s.bind_dn, password=s.password.get_secret_value(), auto_bind=True)


@pytest.fixture
def world(stack: Stack, settings: Settings, token: str, tmp_path: Path) -> Iterator[World]:
    base = f"ou=t{token},{settings.ldap.base_dn}"
    conn = ldap(settings)
    conn.add(base, ["organizationalUnit"], {"ou": f"t{token}"})
    for ou in ("people", "groups"):
        conn.add(f"ou={ou},{base}", ["organizationalUnit"], {"ou": ou})
    text = CAMPUS.read_text().replace(
        "adapter: {type: ldap, settings: {directory: openldap}}",
        f'adapter: {{type: ldap, settings: {{directory: openldap, people_dn: "ou=people,{base}", '
        f'groups_dn: "ou=groups,{base}"}}}}',
    )
    prefix = f"tq{token}"
    s = settings.model_copy(update={"topic_prefix": prefix})
    path = tmp_path / "campus.yaml"
    path.write_text(text)
    registry = parse_registry(text, str(path))
    apply_topics(s, plan_topics(registry, prefix))
    client = registry_client(s)
    for t in registry.tables:
        register_topic(client, t.topic(prefix))
    yield World(s, "LDAP", base, registry, path, ListenerTopics(prefix, "LDAP"))
    # remove the test's subtree, leaves first
    conn.search(base, "(objectClass=*)", attributes=["1.1"])
    entries = sorted((e.entry_dn for e in conn.entries), key=lambda dn: -dn.count(","))
    for dn in entries:
        conn.delete(dn)
    conn.unbind()


def entry(settings: Settings, dn: str) -> dict[str, Any] | None:
    conn = ldap(settings)
    try:
        if not conn.search(dn, "(objectClass=*)", BASE, attributes=["*"]):
            return None
        attrs = conn.entries[0].entry_attributes_as_dict
        return {k: sorted(str(v) for v in vals) for k, vals in attrs.items()}
    except Exception as exc:  # noSuchObject
        if "noSuchObject" in type(exc).__name__ or "no such object" in str(exc).lower():
            return None
        raise
    finally:
        conn.unbind()


def snapshot(settings: Settings, base: str) -> dict[str, dict[str, Any]]:
    conn = ldap(settings)
    out = {}
    for ou in ("people", "groups"):
        conn.search(f"ou={ou},{base}", "(objectClass=*)", LEVEL, attributes=["*"])
        for e in conn.entries:
            out[e.entry_dn] = {k: sorted(map(str, v)) for k, v in e.entry_attributes_as_dict.items()}
    conn.unbind()
    return out


ADA = {"person_id": "1", "first_name": "Ada", "last_name": "Lovelace", "id_number": "660001"}


def test_people_accounts_groups_and_memberships_reach_the_directory(world: World) -> None:
    base = world.table
    ada_dn, staff_dn = f"employeeNumber=1,ou=people,{base}", f"cn=staff,ou=groups,{base}"
    sent: list[Change] = []

    def send(*changes: Change) -> None:
        sent.extend(changes)
        send_changes(world, *changes)

    send(
        ch("DEPARTMENT", "INSERT", {"dept_id": "7", "name": "Mathematics"}, pkey_number=7),
        ch("PERSON/PEOPLE", "INSERT", ADA, person_id=1),
        ch("PERSON/Telephone", "INSERT", {"person_id": "1", "tele_type": "campus", "phone_number": "+1 518 276 0001"},
           person_id=1, aux_string="campus"),
        ch("PERSON/Telephone", "INSERT", {"person_id": "1", "tele_type": "mobile", "phone_number": "+1 518 555 0101"},
           person_id=1, aux_string="mobile"),
        ch("PERSON/Status", "INSERT", {"person_id": "1", "status": "Faculty"}, person_id=1),
        ch("PERSON/UDI", "INSERT", {"person_id": "1", "email": "ada@campus.example"}, person_id=1),
        ch("PERSON/Dir_Orgn", "INSERT", {"person_id": "1", "dept_id": "7", "title": "Professor"},
           person_id=1, pkey_number=7),
        ch("LOGINS", "INSERT", {"username": "ada", "owner": "1", "unixuid": "5001", "shell": "/bin/zsh"},
           person_id=1, pkey_string="ada", pkey_number=5001),
        ch("GROUPS", "INSERT", {"group_name": "staff", "gid": "500", "description": "All staff"}, pkey_string="staff"),
        ch("GROUP_MEM", "INSERT", {"group_name": "staff", "username": "ada"}, pkey_string="staff", aux_string="ada"),
    )  # fmt: skip
    with running(world) as rt:
        wait_for("Ada's entry", lambda: (entry(world.settings, ada_dn) or {}).get("uid") == ["ada"], 60)
        ada = entry(world.settings, ada_dn)
        assert ada is not None
        assert ada["cn"] == ["Ada Lovelace"] and ada["sn"] == ["Lovelace"] and ada["givenName"] == ["Ada"]
        assert ada["telephoneNumber"] == ["+1 518 276 0001"] and ada["mobile"] == ["+1 518 555 0101"]
        assert ada["mail"] == ["ada@campus.example"] and ada["employeeType"] == ["Faculty"]
        assert ada["ou"] == ["Mathematics"] and ada["title"] == ["Professor"]
        assert ada["uidNumber"] == ["5001"] and ada["loginShell"] == ["/bin/zsh"]
        assert "posixAccount" in ada["objectClass"]
        wait_for("the group", lambda: (entry(world.settings, staff_dn) or {}).get("memberUid") == ["ada"], 30)

        # updates and renames: a new number, a new name, a renamed login, a membership ended
        send(
            ch("PERSON/Telephone", "UPDATE",
               {"person_id": "1", "tele_type": "campus", "phone_number": "+1 518 276 0002"},
               person_id=1, aux_string="campus"),
            ch("PERSON/PEOPLE", "UPDATE", {**ADA, "last_name": "King"}, ADA, person_id=1),
            ch("GROUP_MEM", "DELETE", None, {"group_name": "staff", "username": "ada"}, pkey_string="staff",
               aux_string="ada"),
            ch("LOGINS", "DELETE", None, {"username": "ada", "owner": "1", "unixuid": "5001"},
               person_id=1, pkey_string="ada", pkey_number=5001),
            ch("LOGINS", "INSERT", {"username": "aking", "owner": "1", "unixuid": "5001", "shell": "/bin/zsh"},
               person_id=1, pkey_string="aking", pkey_number=5001),
            ch("PERSON/Telephone", "DELETE", None, {"person_id": "1", "tele_type": "mobile"},
               person_id=1, aux_string="mobile"),
        )  # fmt: skip
        wait_for("the updates", lambda: (entry(world.settings, ada_dn) or {}).get("uid") == ["aking"], 60)
        ada = entry(world.settings, ada_dn)
        assert ada is not None
        assert ada["cn"] == ["Ada King"] and ada["telephoneNumber"] == ["+1 518 276 0002"]
        assert "mobile" not in ada and ada["homeDirectory"] == ["/home/aking"]
        wait_for("the membership to end", lambda: "memberUid" not in (entry(world.settings, staff_dn) or {"x": 1}))
        before_repeat = snapshot(world.settings, base)
        assert rt.counters.failed == 0, rt.summary()

    # a repeated delivery of every change, in order, leaves the directory as it was
    adapter = make_adapter(world.registry.listener("LDAP"), world.settings)  # type: ignore[arg-type]
    adapter.bind(world.registry)
    try:
        assert adapter.apply_batch(sent) == [None] * len(sent)
    finally:
        adapter.close()
    assert snapshot(world.settings, base) == before_repeat

    # deletes: the person and the group go
    send(
        ch("PERSON/PEOPLE", "DELETE", None, {**ADA, "last_name": "King"}, person_id=1),
        ch("GROUPS", "DELETE", None, {"group_name": "staff", "gid": "500"}, pkey_string="staff"),
    )
    with running(world):
        wait_for(
            "the deletes", lambda: entry(world.settings, ada_dn) is None and entry(world.settings, staff_dn) is None
        )


def test_an_entry_is_made_exactly_whichever_write_the_adapter_tries_first(world: World) -> None:
    """``make`` writes without reading first and guesses which write to try from the
    last entry it wrote (modify while entries exist, add once one was missing): every
    order of new and existing entries must still end with exactly the entry asked for."""
    from consumers.ldap.adapter import LdapAdapter
    from consumers.ldap.entries import Entry

    adapter = make_adapter(world.registry.listener("LDAP"), world.settings)
    assert isinstance(adapter, LdapAdapter)
    people = f"ou=people,{world.table}"  # the fixture passes the test's OU as the "table"
    classes = ("top", "person", "organizationalPerson", "inetOrgPerson")

    def person(uid: str, sn: str, phone: list[str]) -> Entry:
        dn = f"uid={uid},{people}"
        return Entry(dn, classes, {"cn": [uid], "sn": [sn], "telephoneNumber": phone})

    conn = ldap(world.settings)
    conn.add(f"uid=old1,{people}", list(classes), {"cn": "old1", "sn": "Before", "telephoneNumber": "1"})
    conn.add(f"uid=old2,{people}", list(classes), {"cn": "old2", "sn": "Before", "telephoneNumber": "2"})
    conn.unbind()
    wanted = [
        person("old1", "After", []),  # exists, modify first: one write
        person("new1", "New", ["11"]),  # missing: the modify is refused, then an add
        person("new2", "New", ["12"]),  # missing, add first now
        person("old2", "After", ["22"]),  # exists while adding first: the add is refused, then a modify
        person("new3", "New", []),  # missing while modifying first again
    ]
    try:
        for e in wanted:
            adapter.make(e.dn, e)  # type: ignore[attr-defined]
        adapter.make(f"uid=gone,{people}", None)  # type: ignore[attr-defined]  # a delete of what is not there
    finally:
        adapter.close()
    for e in wanted:
        got = entry(world.settings, e.dn)
        assert got is not None, e.dn
        assert got["sn"] == e.attributes["sn"] and got.get("telephoneNumber", []) == e.attributes["telephoneNumber"]
    assert entry(world.settings, f"uid=gone,{people}") is None
