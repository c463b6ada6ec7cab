"""A test's own corner of the stack's OpenLDAP: the ``world`` fixture (an OU with people and
groups, the campus's LDAP listener pointed at it, removed after), and entries read back with
ldap3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ldap3 import BASE, LEVEL, Connection, Server

from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import (
    World,
    registry_world,
)
from tests import CAMPUS
from tests.support.changes import ch, send_changes


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
    conn.unbind()
    text = CAMPUS.read_text()  # the campus's LDAP listener, its containers the test's
    text = text.replace("ou=people,{base}", f"ou=people,{base}").replace("ou=groups,{base}", f"ou=groups,{base}")
    prefix = f"tq{token}"
    s = settings.model_copy(update={"topic_prefix": prefix})
    yield registry_world(s, text, tmp_path / "campus.yaml", "LDAP", base)
    # remove the test's subtree, leaves first (a new connection: a test may have restarted the server)
    conn = ldap(settings)
    found = conn.extend.standard.paged_search(base, "(objectClass=*)", attributes=["1.1"], paged_size=1000,
                                              generator=False)  # fmt: skip
    entries = sorted((e["dn"] for e in found if e.get("type") == "searchResEntry"), key=lambda dn: -dn.count(","))
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


def send_people(w: World, n: int) -> None:
    """N people, each with a campus phone, and the group staff, sent to the logical topics."""
    for pid in range(1, n + 1):
        send_changes(
            w,
            ch("PERSON/PEOPLE", "INSERT", {"person_id": str(pid), "first_name": f"P{pid}", "last_name": f"L{pid}"},
               person_id=pid),
            ch("PERSON/Telephone", "INSERT",
               {"person_id": str(pid), "tele_type": "campus", "phone_number": f"+1 518 276 {pid:04d}"},
               person_id=pid, aux_string="campus"),
        )  # fmt: skip
    send_changes(
        w,
        ch("GROUPS", "INSERT", {"group_name": "staff", "gid": "500", "description": "All staff"}, pkey_string="staff"),
    )
