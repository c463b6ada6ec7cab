"""Two LDAP listeners writing to two directories, each through its own named connection
(``targets``): the campus's LDAP listener to OpenLDAP, its twin to a second directory
(the local slapd's second database, its own suffix and administrator)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ldap3 import LEVEL, Connection, Server

from mcq.config import Settings
from mcq.stack import Stack
from mcq.stack.services.ldap import second_directory
from mcq.targets import LdapSettings, LdapTarget
from mcq.testing.listeners import World, registry_world, running, wait_for
from tests import CAMPUS
from tests.support.changes import ch, listener, send_changes


def bind(directory: LdapSettings) -> Connection:
    return Connection(
        Server(directory.url), user=directory.bind_dn, password=directory.bind_password().get_secret_value(),
        auto_bind=True,
    )  # fmt: skip


def subtree(directory: LdapSettings, base: str, make: bool) -> None:
    conn = bind(directory)
    if make:
        conn.add(base, ["organizationalUnit"], {"ou": base.split(",")[0].split("=")[1]})
        for ou in ("people", "groups"):
            conn.add(f"ou={ou},{base}", ["organizationalUnit"], {"ou": ou})
    else:  # leaves first
        found = conn.extend.standard.paged_search(base, "(objectClass=*)", attributes=["1.1"], generator=False)
        for dn in sorted((e["dn"] for e in found if e.get("type") == "searchResEntry"), key=lambda d: -d.count(",")):
            conn.delete(dn)
    conn.unbind()


def people(directory: LdapSettings, base: str) -> dict[str, list[str]]:
    """uid -> telephone numbers of every person entry under BASE."""
    conn = bind(directory)
    conn.search(f"ou=people,{base}", "(objectClass=inetOrgPerson)", LEVEL, attributes=["uid", "telephoneNumber"])
    out = {str(e.uid): sorted(map(str, e.telephoneNumber)) for e in conn.entries if e.uid}
    conn.unbind()
    return out


@pytest.fixture
def two(stack: Stack, settings: Settings, token: str, tmp_path: Path) -> Iterator[tuple[World, World]]:
    second = LdapTarget(**second_directory(settings))  # type: ignore[arg-type]
    s = settings.model_copy(update={"topic_prefix": f"tl{token}", "targets": {"second": second}})
    first_base, second_base = f"ou=t{token},{settings.ldap.base_dn}", f"ou=t{token},{second.base_dn}"
    subtree(settings.ldap, first_base, make=True)
    subtree(second, second_base, make=True)
    # the campus's LDAP listener in the first directory, and its twin in the second
    campus = yaml.safe_load(CAMPUS.read_text())
    [ldap] = [x for x in campus["listeners"] if x["name"] == "LDAP"]
    twin = copy.deepcopy(ldap)
    twin.update(name="LDAP2", role=None)
    twin["adapter"]["settings"]["target"] = "second"
    for made, base in ((ldap, first_base), (twin, second_base)):
        for entry in made["adapter"]["settings"]["entries"].values():
            entry["dn"] = entry["dn"].replace("{base}", base)
    campus["listeners"].append(twin)
    campus["interests"] += [{**i, "listener": "LDAP2"} for i in campus["interests"] if i["listener"] == "LDAP"]
    text = yaml.safe_dump(campus, sort_keys=False)
    ldap_world = registry_world(s, text, tmp_path / "campus.yaml", "LDAP", first_base)
    yield ldap_world, listener(ldap_world, "LDAP2")
    subtree(settings.ldap, first_base, make=False)
    subtree(second, second_base, make=False)


def test_two_ldap_listeners_write_to_two_directories_each_through_its_named_connection(
    two: tuple[World, World], settings: Settings
) -> None:
    ldap_world, twin_world = two
    second = ldap_world.settings.ldap_target("second")
    first_base, second_base = ldap_world.table, f"ou={ldap_world.table.split(',')[0].split('=')[1]},{second.base_dn}"
    ada = {"person_id": "1", "first_name": "Ada", "last_name": "Lovelace", "id_number": "660001"}
    send_changes(
        ldap_world,
        ch("PERSON/PEOPLE", "INSERT", ada, person_id=1),
        ch("PERSON/Telephone", "INSERT", {"person_id": "1", "tele_type": "campus", "phone_number": "+1 518 276 0001"},
           person_id=1, aux_string="campus"),
        ch("LOGINS", "INSERT", {"username": "ada", "owner": "1", "unixuid": "5001", "shell": "/bin/zsh"},
           person_id=1, pkey_string="ada", pkey_number=5001),
    )  # fmt: skip
    with running(ldap_world) as ldap_rt, running(twin_world) as twin_rt:
        wait_for("Ada in OpenLDAP", lambda: "ada" in people(settings.ldap, first_base), 90)
        wait_for("Ada in the second directory", lambda: "ada" in people(second, second_base), 90)
        assert ldap_rt.counters.failed == 0 and twin_rt.counters.failed == 0, (ldap_rt.summary(), twin_rt.summary())
    # each directory holds only its own listener's entry: the suffixes are separate databases,
    # and each listener could write only where its connection's administrator may
    assert list(people(settings.ldap, first_base)) == ["ada"]
    assert list(people(second, second_base)) == ["ada"]
    first_admin = bind(settings.ldap)
    assert not first_admin.add(f"ou=probe,{second_base}", ["organizationalUnit"], {"ou": "probe"})
    first_admin.unbind()
