"""The ``ldap`` adapter with an Active Directory mapping, against a real AD: Samba's domain
controller of the local stack (``mcq stack up --with ad``), over LDAPS with the stack's
CA. A new user's accounts become users (sAMAccountName, userPrincipalName, enabled or
disabled by the owner's status through userAccountControl; no password is ever written),
its groups AD groups with members by DN. A user's CN is the owner's name: a new name
renames the entry. Samba has no LDAP assertion control, so ownership rests on the
entries found marked (adminDescription) when the adapter opened: a hand-made user is
never taken over, even at the same name, and survives the deletes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import count
from typing import Any

import pytest
from ldap3 import LEVEL, MODIFY_REPLACE

from consumers.adapter import make_adapter
from consumers.exceptions import ChangeFailed, ChangeRejected
from consumers.ldap.adapter import LdapAdapter
from consumers.runtime.view import ListenerView
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from mcq.stack.services.ad import BASE_DN, ad_directory
from mcq.targets import LdapTarget
from tests.support.ad import ad
from tests.unit.people_registry import AD_LISTENER, PEOPLE

_lsn = count(100, 10)
DISABLED, ENABLED = "514", "512"


@pytest.fixture
def ou(active_directory: Stack, settings: Settings, token: str) -> Iterator[str]:
    base = f"OU=t{token},{BASE_DN}"
    conn = ad(settings)
    assert conn.add(base, ["organizationalUnit"])
    for name in ("staff", "teams"):
        conn.add(f"OU={name},{base}", ["organizationalUnit"])
    # made by hand, in the container mcq writes to: never mcq's
    assert conn.add(f"CN=Hand Made,OU=staff,{base}", ["top", "person", "organizationalPerson", "user"],
                    {"sAMAccountName": f"h{token}", "sn": "Made", "userAccountControl": "514"})  # fmt: skip
    conn.unbind()
    yield base
    conn = ad(settings)
    conn.delete(base, controls=[("1.2.840.113556.1.4.805", True, None)])  # the tree delete control
    conn.unbind()


def registry_of(base: str) -> Registry:
    listeners = "listeners:" + AD_LISTENER.format(name="AD", base=base)
    listeners += "interests:\n  - {listener: AD, tname: ACCOUNT_ENTRY}\n  - {listener: AD, tname: GROUP_ENTRY}\n"
    return parse_registry(PEOPLE.format(src="hr", schema="hr", slot="mcq_hr", listeners=listeners), "people.yaml")


def adapter_of(registry: Registry, settings: Settings) -> LdapAdapter:
    listener = registry.listener("AD")
    assert listener is not None
    s = settings.model_copy(update={"targets": {"ad": LdapTarget(**ad_directory(settings))}})
    adapter = make_adapter(listener, s)
    assert isinstance(adapter, LdapAdapter)
    adapter.bind(registry)
    return adapter


def account(login: str, given: str | None, family: str | None, status: str = "A", phones: int = 1) -> Change:
    numbers = [{"id": i, "kind": "office", "number": f"+1 555 01{i:02d}", "person_id": "1"} for i in range(phones)]
    row = {"login": login, "person_id": "1", "uid_number": "1", "owner.id": "1", "owner.given": given,
           "owner.family": family, "owner.status": status, "owner.phones": json.dumps(numbers)}  # fmt: skip
    return _change(ChangeKey("ACCOUNT_ENTRY", pkey_string=login), row)


def group(name: str, members: dict[str, tuple[str, str]]) -> Change:
    rows = [{"group_name": name, "login": x, "account": {"login": x, "holder": {"given": g, "family": f}}}
            for x, (g, f) in members.items()]  # fmt: skip
    return _change(ChangeKey("GROUP_ENTRY", pkey_string=name), {"name": name, "gid": "1", "members": json.dumps(rows)})


def _change(key: ChangeKey, row: dict[str, str | None] | None) -> Change:
    lsn = next(_lsn)
    return Change(key, "DELETE" if row is None else "UPDATE", Position(lsn, lsn), datetime.now(UTC), "hr.x", row)


def held(settings: Settings, container: str) -> dict[str, dict[str, Any]]:
    conn = ad(settings)
    conn.search(container, "(objectClass=*)", LEVEL, attributes=["*"])
    out = {e.entry_dn.split(",")[0]: e.entry_attributes_as_dict for e in conn.entries}
    conn.unbind()
    return out


def test_an_active_directory_gets_users_enabled_by_status_and_groups_and_nothing_of_its_own_is_taken(
    ou: str, settings: Settings
) -> None:
    registry = registry_of(ou)
    adapter = adapter_of(registry, settings)
    staff, teams = f"OU=staff,{ou}", f"OU=teams,{ou}"
    hand_before = held(settings, staff)["CN=Hand Made"]
    try:
        batch = [account("ana", "Ana", "Ruiz", phones=2), account("bob", "Bob", "Li", status="S"),
                 group("ops", {"ana": ("Ana", "Ruiz"), "bob": ("Bob", "Li")})]  # fmt: skip
        assert adapter.apply_batch(batch) == [None] * 3
        users = held(settings, staff)
        ana, bob = users["CN=Ana Ruiz"], users["CN=Bob Li"]
        assert ana["sAMAccountName"] == ["ana"] and ana["userPrincipalName"] == ["ana@mcq.test"]
        assert [str(v) for v in ana["userAccountControl"]] == [ENABLED]
        assert [str(v) for v in bob["userAccountControl"]] == [DISABLED]
        assert ana["telephoneNumber"] == ["+1 555 0100"]
        assert sorted(ana["otherTelephone"]) == ["+1 555 0100", "+1 555 0101"]
        assert str(ana["adminDescription"][0]).startswith("mcq:AD ")
        members = held(settings, teams)["CN=ops"]["member"]
        assert sorted(m.lower() for m in members) == sorted(f"cn={n},{staff}".lower() for n in ("Ana Ruiz", "Bob Li"))

        # status flips enable and disable; a new name renames the user (its group follows)
        assert adapter.apply_batch([account("ana", "Ana", "Ruiz-Gil", status="S"), account("bob", "Bob", "Li")]) == [
            None, None]  # fmt: skip
        users = held(settings, staff)
        assert "CN=Ana Ruiz" not in users and [str(v) for v in users["CN=Ana Ruiz-Gil"]["userAccountControl"]] == [
            DISABLED]  # fmt: skip
        assert [str(v) for v in users["CN=Bob Li"]["userAccountControl"]] == [ENABLED]
        assert f"cn=ana ruiz-gil,{staff}".lower() in {m.lower() for m in held(settings, teams)["CN=ops"]["member"]}

        # a name taken by a user made by hand: dead-lettered with the collision named; the user untouched
        # a value longer than AD's schema takes: that user fails alone, with the server's reason
        outcomes = adapter.apply_batch([account("mallory", "Hand", "Made"), account("long", "Lo", "x" * 65),
                                        account("cyd", "Cyd", "Poe")])  # fmt: skip
        assert isinstance(outcomes[0], ChangeRejected) and f"collision: CN=Hand Made,{staff}" in str(outcomes[0])
        assert isinstance(outcomes[1], ChangeFailed) and "invalid" in str(outcomes[1]).lower()
        assert outcomes[2] is None
        assert held(settings, staff)["CN=Hand Made"] == hand_before

        # deletes remove mcq's users only
        gone = [_change(ChangeKey("ACCOUNT_ENTRY", pkey_string="bob"), None),
                _change(ChangeKey("ACCOUNT_ENTRY", pkey_string="mallory"), None)]  # fmt: skip
        assert adapter.apply_batch(gone) == [None, None]
        assert set(held(settings, staff)) == {"CN=Ana Ruiz-Gil", "CN=Cyd Poe", "CN=Hand Made"}

        # reconcile's read back: exactly mcq's users and groups, equal to the rows; drift found
        states = [account("ana", "Ana", "Ruiz-Gil", status="S"), account("cyd", "Cyd", "Poe"),
                  group("ops", {"ana": ("Ana", "Ruiz-Gil"), "bob": ("Bob", "Li")})]  # fmt: skip
        view = ListenerView(registry, "AD")
        back = adapter.read_back()
        want = adapter.expected(view, states)
        # the group's member of a user that is gone: AD dropped it (its links follow the directory)
        want[str(ChangeKey("GROUP_ENTRY", pkey_string="ops"))]["member"] = [f"cn=ana ruiz-gil,{staff}".lower()]
        back[str(ChangeKey("GROUP_ENTRY", pkey_string="ops"))]["member"] = [
            m.lower() for m in back[str(ChangeKey("GROUP_ENTRY", pkey_string="ops"))]["member"]]  # fmt: skip
        assert back == want
        conn = ad(settings)
        conn.modify(f"CN=Cyd Poe,{staff}", {"userAccountControl": [(MODIFY_REPLACE, [DISABLED])]})
        conn.unbind()
        back = adapter.read_back()
        cyd = str(ChangeKey("ACCOUNT_ENTRY", pkey_string="cyd"))
        assert back[cyd]["useraccountcontrol"] == [DISABLED] and want[cyd]["useraccountcontrol"] == [ENABLED]
    finally:
        adapter.close()
