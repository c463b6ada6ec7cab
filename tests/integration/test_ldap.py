"""The LDAP adapter against the stack's real OpenLDAP: people as inetOrgPerson (+
posixAccount), Unix groups and memberships; updates, renames, deletes and a repeated
delivery, read back with ldap3."""

from __future__ import annotations

import threading

import pytest
from ldap3 import LEVEL

from consumers.adapter import make_adapter
from mcq.change import Change
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import World, running, wait_for
from tests.support.changes import ch, entity_records, send_changes
from tests.support.ldap_world import ADA, entry, ldap, snapshot, world  # noqa: F401 - the LDAP world fixture


def test_people_accounts_groups_and_memberships_reach_the_directory(world: World) -> None:
    base = world.table
    ada_dn, staff_dn = f"employeeNumber=1,ou=people,{base}", f"cn=staff,ou=groups,{base}"

    def send(*changes: Change) -> None:
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

    # a repeated delivery of every record the listener read, in order, leaves the directory as it was
    records = entity_records(world, "PERSON_ENTRY") + entity_records(world, "GROUP_ENTRY")
    assert len(records) >= 4  # Ada and the group, made and changed
    adapter = make_adapter(world.registry.listener("LDAP"), world.settings)  # type: ignore[arg-type]
    adapter.bind(world.registry)
    try:
        assert adapter.apply_batch(records) == [None] * len(records)
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
    """The adapter's writes (``Pipeline.make_all``) go without reading first and try the
    write it believes right (what it holds), or guess it from the last batch (modify while
    entries exist, add once most were missing): every belief and every order of new and
    existing entries must still end with exactly the entries asked for."""
    from consumers.ldap.adapter import LdapAdapter
    from consumers.ldap.entry import Entry

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
        for e in wanted:  # one entry a call: each call learns from the one before
            assert adapter._pipeline().make_all({e.dn: e}) == {}
        assert adapter._pipeline().make_all({f"uid=gone,{people}": None}) == {}  # a delete of what is not there
        # one pipelined call, more entries than are in flight at once: existing and missing
        # entries interleaved, deletes of entries there and not there, in both first-write
        # modes, and with a belief of what is there that is right for some and wrong for others
        believed = {f"uid=b{i},{people}" for i in range(0, 300, 3)} | {f"uid=never{i},{people}" for i in range(5)}
        for mode, sn, there in ((False, "Batch", None), (True, "Again", None), (False, "Third", believed)):
            assert adapter._writer is not None
            adapter._writer.adding = mode
            batch: dict[str, Entry | None] = {}
            for i in range(300):
                e = person(f"b{i}", sn, [str(i)])
                batch[e.dn] = e
            batch |= {f"uid=b{i},{people}": None for i in range(0, 300, 7)}  # deleted again
            batch |= {f"uid=never{i},{people}": None for i in range(5)}
            if mode:
                batch |= {f"uid=b{i},{people}": person(f"b{i}", sn, [str(i)]) for i in range(0, 300, 14)}
            assert adapter._writer.make_all(batch, there=there) == {}
            held = _held(world.settings, people)
            assert {
                dn.lower(): (e.attributes["sn"], e.attributes["telephoneNumber"]) for dn, e in batch.items() if e
            } == {dn: held[dn] for dn in held if dn.startswith("uid=b") or dn.startswith("uid=never")}
        refused = adapter._writer.make_all(
            {f"uid=bad,{people}": Entry(f"uid=bad,{people}", ("top", "person"), {"sn": ["x"]})}
        )
        assert list(refused) == [f"uid=bad,{people}"] and "objectClassViolation" in refused[f"uid=bad,{people}"][1]
    finally:
        adapter.close()
    from ldap3.strategy.asynchronous import AsyncStrategy

    receivers = [t for t in threading.enumerate() if isinstance(t, AsyncStrategy.ReceiverSocketThread)]
    assert receivers == [], "a closed pipelined connection leaves no receiving thread behind (it would spin)"
    for e in wanted:
        got = entry(world.settings, e.dn)
        assert got is not None, e.dn
        assert got["sn"] == e.attributes["sn"] and got.get("telephoneNumber", []) == e.attributes["telephoneNumber"]
    assert entry(world.settings, f"uid=gone,{people}") is None


def _held(settings: Settings, people: str) -> dict[str, tuple[list[str], list[str]]]:
    """Every entry under ``people``: dn (lower case) -> (sn, telephoneNumber)."""
    conn = ldap(settings)
    try:
        found = conn.extend.standard.paged_search(
            people, "(objectClass=*)", LEVEL, attributes=["sn", "telephoneNumber"], paged_size=1000, generator=False
        )
        return {
            str(e["dn"]).lower(): (list(e["attributes"]["sn"]), list(e["attributes"].get("telephoneNumber", [])))
            for e in found
            if e.get("type") == "searchResEntry"
        }
    finally:
        conn.unbind()


def _people(settings: Settings, base: str) -> dict[str, tuple[str, str]]:
    """Every person entry under the test's OU: employeeNumber -> (cn, sn)."""
    conn = ldap(settings)
    try:
        found = conn.extend.standard.paged_search(
            f"ou=people,{base}", "(objectClass=inetOrgPerson)", LEVEL, attributes=["employeeNumber", "cn", "sn"],
            paged_size=1000, generator=False,
        )  # fmt: skip
        return {
            str(e["attributes"]["employeeNumber"]): (str(e["attributes"]["cn"][0]), str(e["attributes"]["sn"][0]))
            for e in found
            if e.get("type") == "searchResEntry"
        }
    finally:
        conn.unbind()


@pytest.mark.faults
@pytest.mark.timeout(600)
def test_an_ldap_server_killed_mid_batch_is_waited_for_and_the_directory_ends_as_the_source(
    world: World, stack: Stack
) -> None:
    """Issue 16, scenario 12: slapd SIGKILLed while the listener writes a large load, started
    again by the stack; the listener waits (one line, WAITING in ``mcq status``), loses
    nothing, and the people in the directory are the source's last states."""
    import random
    import signal

    from consumers.runtime.status import status_report

    rng = random.Random(1216)
    people: dict[int, dict[str, str] | None] = {}
    changes: list[Change] = []
    for pid in range(1, 4001):
        people[pid] = {"person_id": str(pid), "first_name": f"F{pid}", "last_name": f"L{pid}"}
        changes.append(ch("PERSON/PEOPLE", "INSERT", people[pid], person_id=pid))
    for _ in range(2000):  # renames and deletes, some of people renamed before
        pid = rng.randint(1, 4000)
        old = people[pid]
        if old is None:
            continue
        if rng.random() < 0.2:
            people[pid] = None
            changes.append(ch("PERSON/PEOPLE", "DELETE", None, old, person_id=pid))
        else:
            people[pid] = {**old, "last_name": f"R{rng.randint(0, 10**6)}"}
            changes.append(ch("PERSON/PEOPLE", "UPDATE", people[pid], old, person_id=pid))
    expected = {str(p): (f"{v['first_name']} {v['last_name']}", v["last_name"]) for p, v in people.items() if v}
    send_changes(world, *changes)
    slapd = stack.service("ldap")
    with running(world) as rt:
        wait_for("the listener to be writing", lambda: rt.counters.applied >= 300, 120, 0.05)
        assert rt.counters.applied < len(changes), "the load was written before slapd could be killed"
        slapd.handle.stop(signal.SIGKILL)
        wait_for("the listener to notice", lambda: not rt.ready(), 60, 0.2)
        wait_for(
            "mcq status to say it waits",
            lambda: status_report(world.settings, world.registry, ["LDAP"])[0].verdict == "WAITING",
            60,
            1,
        )
        [status] = status_report(world.settings, world.registry, ["LDAP"])
        assert "ldap" in status.reason, status.reason
        stack.up()
        wait_for("the directory to hold the source's people", lambda: _people(world.settings, world.table) == expected,
                 240, 2)  # fmt: skip
        assert rt.counters.dead_lettered == 0 and rt.counters.parked == 0, rt.summary()
        lines = rt.lines  # type: ignore[attr-defined]
    assert sum("target unavailable, waiting" in line for line in lines) == 1, lines
    assert any("target available again" in line for line in lines), lines
