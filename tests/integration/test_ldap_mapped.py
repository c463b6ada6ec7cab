"""The ``ldap`` adapter with a declared mapping, against the stack's real OpenLDAP: a new
user's accounts and groups (tests/unit/people_registry.py) become entries with their own
DN layout and object classes; mcq changes and deletes only the entries it made (its
marker), so a hand-made entry in the same container survives everything and a row whose
name collides with one is dead-lettered with the collision named; a DN that follows a
changed name is renamed; what is read back is exactly what the rows say."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import pytest
from click.testing import CliRunner
from ldap3 import LEVEL, Connection, Server

from consumers.adapter import make_adapter
from consumers.exceptions import ChangeFailed, ChangeRejected
from consumers.ldap.adapter import LdapAdapter
from consumers.runtime.view import ListenerView
from mcq.change import Change, ChangeKey, Position
from mcq.cli import main
from mcq.config import Settings
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from tests.unit.people_registry import LDAP_LISTENER, PEOPLE

_lsn = count(100, 10)


def ldap(settings: Settings) -> Connection:
    s = settings.ldap
    return Connection(Server(s.url), user=s.bind_dn, password=s.password.get_secret_value(), auto_bind=True)


@pytest.fixture
def base(stack: Stack, settings: Settings, token: str) -> Iterator[str]:
    base = f"ou=m{token},{settings.ldap.base_dn}"
    conn = ldap(settings)
    conn.add(base, ["organizationalUnit"], {"ou": f"m{token}"})
    for ou in ("staff", "teams"):
        conn.add(f"ou={ou},{base}", ["organizationalUnit"], {"ou": ou})
    # made by hand, in the containers mcq writes to: never mcq's
    conn.add(f"uid=hand,ou=staff,{base}", ["inetOrgPerson"], {"cn": "Hand Made", "sn": "Made"})
    conn.add(f"cn=wheel,ou=teams,{base}", ["posixGroup"], {"gidNumber": "10", "memberUid": ["root"]})
    conn.unbind()
    yield base
    conn = ldap(settings)
    found = conn.extend.standard.paged_search(base, "(objectClass=*)", attributes=["1.1"], paged_size=1000,
                                              generator=False)  # fmt: skip
    for dn in sorted((e["dn"] for e in found if e.get("type") == "searchResEntry"), key=lambda d: -d.count(",")):
        conn.delete(dn)
    conn.unbind()


def registry_of(base: str, listener: str = LDAP_LISTENER, tables: tuple[str, ...] = ("ACCOUNT_ENTRY", "GROUP_ENTRY")
                ) -> Registry:  # fmt: skip
    listeners = "listeners:" + listener.format(name="Dir", base=base)
    listeners += "interests:\n" + "".join(f"  - {{listener: Dir, tname: {t}}}\n" for t in tables)
    return parse_registry(PEOPLE.format(src="hr", schema="hr", slot="mcq_hr", listeners=listeners), "people.yaml")


def adapter_of(registry: Registry, settings: Settings) -> LdapAdapter:
    listener = registry.listener("Dir")
    assert listener is not None
    adapter = make_adapter(listener, settings)
    assert isinstance(adapter, LdapAdapter)
    adapter.bind(registry)
    return adapter


def account(login: str, given: str | None, family: str | None, status: str = "A", phones: int = 1) -> Change:
    person = abs(hash(login)) % 100_000
    numbers = [{"id": i, "kind": "office", "number": f"+1 555 {person % 10_000:04d} x{i}", "person_id": str(person)}
               for i in range(phones)]  # fmt: skip
    row = {"login": login, "person_id": str(person), "uid_number": str(1000 + person), "owner.id": str(person),
           "owner.given": given, "owner.family": family, "owner.status": status, "owner.born": None,
           "owner.phones": json.dumps(numbers)}  # fmt: skip
    return _change(ChangeKey("ACCOUNT_ENTRY", pkey_string=login), row)


def group(name: str, gid: int, logins: list[str]) -> Change:
    members = [{"group_name": name, "login": x, "account": {"login": x}} for x in logins]
    return _change(ChangeKey("GROUP_ENTRY", pkey_string=name), {"name": name, "gid": str(gid),
                                                                "members": json.dumps(members)})  # fmt: skip


def gone(key: ChangeKey) -> Change:
    return _change(key, None)


def _change(key: ChangeKey, row: dict[str, str | None] | None) -> Change:
    lsn = next(_lsn)
    kind = "DELETE" if row is None else "UPDATE"
    return Change(key, kind, Position(lsn, lsn), datetime.now(UTC), "hr.x", row)  # type: ignore[arg-type]


def held(settings: Settings, container: str) -> dict[str, dict[str, list[str]]]:
    conn = ldap(settings)
    conn.search(container, "(objectClass=*)", LEVEL, attributes=["*"])
    out = {e.entry_dn.split(",")[0]: {k: sorted(map(str, v)) for k, v in e.entry_attributes_as_dict.items()}
           for e in conn.entries}  # fmt: skip
    conn.unbind()
    return out


@pytest.mark.parametrize("asserts", [True, False], ids=["assertion-control", "no-assertion-control"])
def test_a_mapped_directory_holds_what_the_rows_say_and_never_touches_what_it_did_not_make(
    base: str, settings: Settings, asserts: bool
) -> None:
    """Both ways a server may be: with LDAP's assertion control (OpenLDAP), and without it
    (Samba's AD), where ownership rests on the marked entries found when the adapter opened."""
    registry = registry_of(base)
    adapter = adapter_of(registry, settings)
    adapter.open()
    assert adapter._asserts, "OpenLDAP has the assertion control"
    adapter._asserts = asserts
    staff, teams = f"ou=staff,{base}", f"ou=teams,{base}"
    hand_before, wheel_before = held(settings, staff)["uid=hand"], held(settings, teams)["cn=wheel"]
    try:
        batch = [account("ana", "Ana", "Ruiz", phones=2), account("bob", "Bob", None, status="S"),
                 group("ops", 500, ["ana", "bob"]), account("ana", "Ana", "Ruiz-Gil", phones=1)]  # fmt: skip
        assert adapter.apply_batch(batch) == [None] * 4
        people, groups = held(settings, staff), held(settings, teams)
        assert people["uid=ana"]["sn"] == ["Ruiz-Gil"] and people["uid=ana"]["cn"] == ["Ana Ruiz-Gil"]
        assert len(people["uid=ana"]["telephoneNumber"]) == 1
        assert people["uid=bob"]["sn"] == ["bob"] and people["uid=bob"]["loginShell"] == ["/usr/sbin/nologin"]
        assert people["uid=bob"]["employeeType"] == ["Suspended"]
        assert groups["cn=ops"]["memberUid"] == ["ana", "bob"] and groups["cn=ops"]["gidNumber"] == ["500"]

        # rows whose names are taken by entries made by hand: dead-lettered, the entries untouched
        outcomes = adapter.apply_batch([account("hand", "Mallory", "X"), group("wheel", 0, ["ana"]),
                                        account("cyd", "Cyd", "Poe")])  # fmt: skip
        assert isinstance(outcomes[0], ChangeRejected) and isinstance(outcomes[1], ChangeRejected)
        assert f"collision: uid=hand,{staff} exists and is not this listener's" in str(outcomes[0])
        assert f"collision: cn=wheel,{teams} exists" in str(outcomes[1])
        assert outcomes[2] is None
        # deletes of those keys delete nothing: the entries are not mcq's
        assert adapter.apply_batch([gone(ChangeKey("ACCOUNT_ENTRY", pkey_string="hand")),
                                    gone(ChangeKey("GROUP_ENTRY", pkey_string="wheel"))]) == [None, None]  # fmt: skip
        assert held(settings, staff)["uid=hand"] == hand_before and held(settings, teams)["cn=wheel"] == wheel_before

        # a row the server refuses (posixAccount needs a uidNumber) fails alone, with the server's reason
        broken = account("dee", "Dee", "Lu")
        assert broken.after is not None
        broken.after["uid_number"] = None
        bob_gone = gone(ChangeKey("ACCOUNT_ENTRY", pkey_string="bob"))
        outcomes = adapter.apply_batch([broken, account("eve", "Eve", "Ng"), bob_gone])
        assert isinstance(outcomes[0], ChangeFailed) and "uidNumber" in str(outcomes[0])
        assert outcomes[1:] == [None, None]
        people = held(settings, staff)
        assert set(people) == {"uid=ana", "uid=cyd", "uid=eve", "uid=hand"}

        # read back: only mcq's entries, equal to what the rows say; drift by hand is found
        states = [account("ana", "Ana", "Ruiz-Gil", phones=1), account("cyd", "Cyd", "Poe"),
                  account("eve", "Eve", "Ng"), group("ops", 500, ["ana", "bob"])]  # fmt: skip
        view = ListenerView(registry, "Dir")
        assert adapter.read_back() == adapter.expected(view, states)
        conn = ldap(settings)
        conn.modify(f"uid=cyd,{staff}", {"sn": [("MODIFY_REPLACE", ["Drifted"])]})
        conn.modify(f"uid=hand,{staff}", {"sn": [("MODIFY_REPLACE", ["Still mine"])]})
        conn.unbind()
        back, want = adapter.read_back(), adapter.expected(view, states)
        assert {k for k in want if back.get(k) != want[k]} == {str(ChangeKey("ACCOUNT_ENTRY", pkey_string="cyd"))}
        assert set(back) == set(want)  # the hand-made entry is not mcq's: never in what is read back

        # a new adapter (a restart) finds its entries by their marker and goes on
        adapter.close()
        again = adapter_of(registry, settings)
        again.open()
        again._asserts = asserts
        assert again.apply_batch([gone(ChangeKey("ACCOUNT_ENTRY", pkey_string="cyd"))]) == [None]
        assert set(held(settings, staff)) == {"uid=ana", "uid=eve", "uid=hand"}
        again.close()
    finally:
        adapter.close()


RENAMING = """
  - name: {name}
    owner: idm@example
    adapter:
      type: ldap
      settings:
        entries:
          ACCOUNT_ENTRY:
            dn: "cn={{default(trim(concat(owner.given, ' ', owner.family)), login)}},ou=staff,{base}"
            object_classes: [top, person, organizationalPerson, inetOrgPerson]
            attributes:
              sn: "default(owner.family, login)"
              uid: login
"""


def test_an_entry_whose_name_follows_a_changed_row_is_renamed_not_duplicated(base: str, settings: Settings) -> None:
    adapter = adapter_of(registry_of(base, RENAMING, ("ACCOUNT_ENTRY",)), settings)
    staff = f"ou=staff,{base}"
    conn = ldap(settings)
    conn.add(f"cn=Hand Made,{staff}", ["inetOrgPerson"], {"sn": "Made"})
    conn.unbind()
    try:
        assert adapter.apply_batch([account("ana", "Ana", "Ruiz"), account("bob", "Bob", "Li")]) == [None, None]
        assert {"cn=Ana Ruiz", "cn=Bob Li"} <= set(held(settings, staff))
        assert adapter.apply_batch([account("ana", "Ana", "Ruiz-Gil")]) == [None]
        people = held(settings, staff)
        assert "cn=Ana Ruiz" not in people and people["cn=Ana Ruiz-Gil"]["uid"] == ["ana"]
        # renamed onto a name someone else holds: dead-lettered, both entries as they were
        clash = adapter.apply_batch([account("bob", "Hand", "Made")])
        assert isinstance(clash[0], ChangeRejected) and "collision" in str(clash[0])
        # two rows of this listener onto one name: the second fails (retried: the first may be renamed or go)
        twin = adapter.apply_batch([account("cyd", "Bob", "Li")])
        assert isinstance(twin[0], ChangeFailed) and "has that name" in str(twin[0])  # retried: it may go
        # a restarted adapter renames too (it finds the entry by its marker, not its name)
        adapter.close()
        adapter = adapter_of(registry_of(base, RENAMING, ("ACCOUNT_ENTRY",)), settings)
        assert adapter.apply_batch([account("bob", "Robert", "Li")]) == [None]
        people = held(settings, staff)
        assert "cn=Bob Li" not in people and people["cn=Robert Li"]["uid"] == ["bob"]
        assert people["uid=hand"]["cn"] == ["Hand Made"] and "description" not in people["cn=Hand Made"]
    finally:
        adapter.close()


def test_an_attribute_no_object_class_allows_is_refused_online_at_its_line(
    base: str, settings: Settings, tmp_path: Path
) -> None:
    """``mcq registry validate --online`` reads the directory's own schema: an attribute
    the entry's classes do not allow, and a class the directory lacks, each at its line."""
    listener = LDAP_LISTENER.replace(
        "              givenName: owner.given\n",
        "              givenName: owner.given\n              sAMAccountName: login\n",
    )
    listener = listener.replace("[top, posixGroup]", "[top, posixGroup, mcqNoSuchClass]")
    listeners = "listeners:" + listener.format(name="Dir", base=base)
    listeners += "interests:\n  - {listener: Dir, tname: ACCOUNT_ENTRY}\n  - {listener: Dir, tname: GROUP_ENTRY}\n"
    text = PEOPLE.format(src="hr", schema="hr", slot="mcq_hr", listeners=listeners)
    path = tmp_path / "people.yaml"
    path.write_text(text)
    env = {"MCQ_HOME": str(settings.stack.home)}
    offline = CliRunner().invoke(main, ["registry", "validate", str(path)], env=env)
    assert offline.exit_code == 0, offline.output  # nothing the registry alone can tell
    online = CliRunner().invoke(main, ["registry", "validate", str(path), "--online"], env=env)
    assert online.exit_code == 1
    lines = text.splitlines()
    at = next(i for i, t in enumerate(lines, 1) if "sAMAccountName" in t)
    assert f"people.yaml:{at}:" in online.output and "sAMAccountName: no object class of the entry allows it" in (
        online.output)  # fmt: skip
    at = next(i for i, t in enumerate(lines, 1) if "mcqNoSuchClass" in t)
    assert f"people.yaml:{at}:" in online.output and "the directory has no object class mcqNoSuchClass" in online.output
    good = tmp_path / "good.yaml"
    good.write_text(PEOPLE.format(src="hr", schema="hr", slot="mcq_hr", listeners=listeners.replace(
        "              sAMAccountName: login\n", "").replace(", mcqNoSuchClass", "")))  # fmt: skip
    assert CliRunner().invoke(main, ["registry", "validate", str(good), "--online"], env=env).exit_code == 0
