"""Targets a team maps in YAML, end to end on the real stack, with a new user's own people
schema (tests/unit/people_registry.py, not the campus): persons with a status, accounts,
telephones, groups and memberships, captured by Debezium, normalised by Spark, assembled
into account and group entities by ``mcq entities run``, and applied by three listeners
with no Python of the user's: an OpenLDAP directory with its own DN layout and object
classes (offline for the first half), Samba's Active Directory (users disabled when their
owner's status says so, groups with members by DN, a new name renaming the user), and a
vendor's import table whose trigger refuses a record without a name.

A random workload flips statuses, adds and removes telephones and memberships, renames
persons, deletes and adds accounts. Every target ends equal to what SQL over the source
says, written apart from the mapping code. Entries made by hand in the same containers
(and an account whose name collides with them) are never touched: the colliding account
is dead-lettered with the collision named. Then drift made by hand in the directory is
reported by ``mcq reconcile`` exactly, repaired by ``--repair`` without touching the
hand-made entry, and ``mcq rebuild`` rebuilds an emptied directory."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from ldap3 import LEVEL, MODIFY_REPLACE, Connection, Server

from consumers.runtime.dlq import DeadLetters
from consumers.runtime.listener import ListenerRuntime
from mcq.capture.apply import apply_capture
from mcq.capture.connector import raw_topic
from mcq.change import ChangeKey
from mcq.cli import main
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.stack.services.ad import BASE_DN, ad_directory
from mcq.targets import LdapTarget
from mcq.testing.worlds import uncapture, wait_raw_records, wait_slot_active
from streams.entities.job import EntityJob
from streams.runner import run_normalize
from tests.support.ad import ad
from tests.unit.people_registry import (
    AD_LISTENER,
    DDL,
    IMPORT_LISTENER,
    LDAP_LISTENER,
    PEOPLE,
    VENDOR,
    VENDOR_READ_BACK,
)

STATUS = {"A": "Active", "S": "Suspended"}
INTERESTS = """interests:
  - {listener: Dir, tname: ACCOUNT_ENTRY}
  - {listener: Dir, tname: GROUP_ENTRY}
  - {listener: AD, tname: ACCOUNT_ENTRY}
  - {listener: AD, tname: GROUP_ENTRY}
  - {listener: Vendor, tname: ACCOUNT_ENTRY}
"""
RETRY = "    delivery: {park_initial_s: 0, max_attempts: 20}\n"


class Workload:
    """Random changes of a people schema, counting the raw records each table's capture
    writes (one per insert or update, two per delete)."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str, rnd: random.Random) -> None:
        self.conn, self.s, self.rnd = conn, schema, rnd
        self.events: Counter[str] = Counter()
        self.next_id = 1000

    def run(self, sql: str, args: tuple[Any, ...], table: str, per_row: int = 1) -> None:
        cur = self.conn.execute(sql.format(s=self.s), args)
        self.events[table] += per_row * max(cur.rowcount, 0)

    def ids(self, sql: str) -> list[Any]:
        return [r[0] for r in self.conn.execute(sql.format(s=self.s)).fetchall()]

    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def load(self) -> None:
        r = self.rnd
        for p in range(60):
            self.run("INSERT INTO {s}.persons VALUES (%s, %s, %s, %s, NULL)",
                     (p, f"G{p}", f"F{p}", r.choice("AS")), "persons")  # fmt: skip
            for _ in range(r.randrange(0, 4)):
                self.run("INSERT INTO {s}.telephones VALUES (%s, %s, %s, %s)",
                         (self.fresh(), p, r.choice(("office", "mobile", "fax")), f"+1 555 {r.randrange(10_000):04d}"),
                         "telephones")  # fmt: skip
        for p in range(45):  # one account each for most persons
            self.run("INSERT INTO {s}.accounts VALUES (%s, %s, %s)", (f"l{p}", p, 1000 + p), "accounts")
        # the colliding one: its names are taken by entries made by hand in both directories
        self.run("INSERT INTO {s}.persons VALUES (99, 'Hand', 'Made', 'A', NULL)", (), "persons")
        self.run("INSERT INTO {s}.accounts VALUES ('hand', 99, 1099)", (), "accounts")
        for g in range(6):
            self.run("INSERT INTO {s}.groups VALUES (%s, %s, %s)", (f"g{g}", 500 + g, f"group {g}"), "groups")
            for login in r.sample([f"l{p}" for p in range(45)], r.randrange(0, 8)):
                self.run("INSERT INTO {s}.memberships VALUES (%s, %s)", (f"g{g}", login), "memberships")

    def step(self) -> None:
        r = self.rnd
        roll = r.random()
        if roll < 0.2:  # a status flips: AD enables or disables, LDAP's shell changes
            self.run("UPDATE {s}.persons SET status = CASE status WHEN 'A' THEN 'S' ELSE 'A' END WHERE id = %s",
                     (r.randrange(60),), "persons")  # fmt: skip
        elif roll < 0.33:
            number = f"+1 555 {r.randrange(10_000):04d}"
            self.run("INSERT INTO {s}.telephones VALUES (%s, %s, %s, %s)",
                     (self.fresh(), r.randrange(60), r.choice(("office", "mobile")), number), "telephones")  # fmt: skip
        elif roll < 0.43:
            phones = self.ids("SELECT id FROM {s}.telephones")
            if phones:
                self.run("DELETE FROM {s}.telephones WHERE id = %s", (r.choice(phones),), "telephones", 2)
        elif roll < 0.48:
            phones = self.ids("SELECT id FROM {s}.telephones")
            if phones:
                self.run("UPDATE {s}.telephones SET number = %s WHERE id = %s",
                         (f"+1 555 {r.randrange(10_000):04d}", r.choice(phones)), "telephones")  # fmt: skip
        elif roll < 0.63:  # a membership added
            logins = self.ids("SELECT login FROM {s}.accounts WHERE login <> 'hand'")
            self.run("INSERT INTO {s}.memberships VALUES (%s, %s) ON CONFLICT DO NOTHING",
                     (f"g{r.randrange(6)}", r.choice(logins)), "memberships")  # fmt: skip
        elif roll < 0.73:
            pairs = self.conn.execute(f"SELECT group_name, login FROM {self.s}.memberships").fetchall()
            if pairs:
                self.run("DELETE FROM {s}.memberships WHERE group_name = %s AND login = %s", r.choice(pairs),
                         "memberships", 2)  # fmt: skip
        elif roll < 0.85:  # a person renamed: the AD user's CN follows, and its groups' members
            p = r.randrange(60)
            self.run("UPDATE {s}.persons SET family = %s WHERE id = %s", (f"F{p}r{self.fresh()}", p), "persons")
        elif roll < 0.91:  # an account goes (its memberships with it)
            logins = self.ids("SELECT login FROM {s}.accounts WHERE login <> 'hand'")
            login = r.choice(logins)
            self.run("DELETE FROM {s}.memberships WHERE login = %s", (login,), "memberships", 2)
            self.run("DELETE FROM {s}.accounts WHERE login = %s", (login,), "accounts", 2)
        elif roll < 0.97:  # an account for a person without one
            free = self.ids("SELECT id FROM {s}.persons p WHERE id < 60 AND NOT EXISTS "
                            "(SELECT 1 FROM {s}.accounts a WHERE a.person_id = p.id)")  # fmt: skip
            if free:
                p = r.choice(free)
                self.run("INSERT INTO {s}.accounts VALUES (%s, %s, %s)", (f"l{p}x{self.fresh()}", p, 2000 + p),
                         "accounts")  # fmt: skip
        else:
            self.run("UPDATE {s}.groups SET gid = %s WHERE name = %s", (600 + r.randrange(50), f"g{r.randrange(6)}"),
                     "groups")  # fmt: skip


# ---------------------------------------------------------------------- what SQL says


def accounts(conn: psycopg.Connection[Any], s: str) -> dict[str, dict[str, Any]]:
    """Every account with its owner and the owner's telephones, from SQL."""
    rows = conn.execute(f"""
        SELECT a.login, a.uid_number, p.given, p.family, p.status,
               array(SELECT t.number FROM {s}.telephones t WHERE t.person_id = p.id AND t.kind = 'office'
                     ORDER BY t.id),
               array(SELECT t.number FROM {s}.telephones t WHERE t.person_id = p.id AND t.kind = 'mobile'
                     ORDER BY t.id)
          FROM {s}.accounts a JOIN {s}.persons p ON p.id = a.person_id""").fetchall()
    return {login: {"uid": uid, "given": given, "family": family, "status": status, "office": list(office),
                    "mobile": list(mobile)} for login, uid, given, family, status, office, mobile in rows}  # fmt: skip


def groups(conn: psycopg.Connection[Any], s: str) -> dict[str, dict[str, Any]]:
    rows = conn.execute(f"""
        SELECT g.name, g.gid, array(SELECT m.login FROM {s}.memberships m JOIN {s}.accounts a ON a.login = m.login
                                     WHERE m.group_name = g.name)
          FROM {s}.groups g""").fetchall()
    return {name: {"gid": gid, "logins": sorted(logins)} for name, gid, logins in rows}


def _ldap(settings: Settings) -> Connection:
    s = settings.ldap
    return Connection(Server(s.url), user=s.bind_dn, password=s.password.get_secret_value(), auto_bind=True)


def entries(conn: Connection, container: str, attributes: list[str]) -> dict[str, dict[str, list[str]]]:
    conn.search(container, "(objectClass=*)", LEVEL, attributes=attributes)
    return {
        e.entry_dn.split(",")[0].lower(): {
            k.lower(): sorted(map(str, v)) for k, v in e.entry_attributes_as_dict.items() if v
        }
        for e in conn.entries
    }


def wanted_directory(people: dict[str, dict[str, Any]], teams: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for login, a in people.items():
        if login == "hand":
            continue  # its name is a hand-made entry's: dead-lettered
        out[f"uid={login}"] = {
            "cn": [f"{a['given']} {a['family']}"], "sn": [a["family"]], "givenname": [a["given"]],
            "telephonenumber": sorted(set(a["office"])), "mobile": sorted(set(a["mobile"])),
            "employeetype": [STATUS[a["status"]]], "uidnumber": [str(a["uid"])],
            "loginshell": ["/bin/bash" if a["status"] == "A" else "/usr/sbin/nologin"],
        }  # fmt: skip
    for name, g in teams.items():
        out[f"cn={name}"] = {"gidnumber": [str(g["gid"])], "memberuid": g["logins"]}
    return {k: {a: v for a, v in attrs.items() if v} for k, attrs in out.items()}


def held_directory(settings: Settings, base: str) -> dict[str, Any]:
    conn = _ldap(settings)
    people = entries(conn, f"ou=staff,{base}", ["cn", "sn", "givenName", "telephoneNumber", "mobile", "employeeType",
                                                "uidNumber", "loginShell"])  # fmt: skip
    teams = entries(conn, f"ou=teams,{base}", ["gidNumber", "memberUid"])
    conn.unbind()
    return {**people, **teams}


def wanted_ad(people: dict[str, dict[str, Any]], teams: dict[str, dict[str, Any]], base: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for login, a in people.items():
        if login == "hand":
            continue
        out[f"cn={a['given']} {a['family']}".lower()] = {
            "samaccountname": [login], "useraccountcontrol": ["512" if a["status"] == "A" else "514"],
            "telephonenumber": a["office"][:1], "othertelephone": sorted(set(a["office"])), "mobile": a["mobile"][:1],
        }  # fmt: skip
    for name, g in teams.items():
        members = [f"cn={people[x]['given']} {people[x]['family']},ou=staff,{base}".lower() for x in g["logins"]]
        out[f"cn={name}"] = {"member": sorted(members)}
    return {k: {a: v for a, v in attrs.items() if v} for k, attrs in out.items()}


def held_ad(settings: Settings, base: str) -> dict[str, Any]:
    conn = ad(settings)
    people = entries(conn, f"OU=staff,{base}", ["sAMAccountName", "userAccountControl", "telephoneNumber",
                                                "otherTelephone", "mobile"])  # fmt: skip
    teams = {k: {"member": sorted(m.lower() for m in v.get("member", []))} for k, v in
             entries(conn, f"OU=teams,{base}", ["member"]).items()}  # fmt: skip
    conn.unbind()
    people.pop("cn=hand made", None)  # made by hand: checked apart
    return {**people, **{k: {a: x for a, x in v.items() if x} for k, v in teams.items()}}


@pytest.fixture
def places(stack: Stack, active_directory: Stack, settings: Settings) -> Iterator[tuple[str, str, str]]:
    """The test's OpenLDAP subtree, AD OU and vendor schema, each with what was made by hand."""
    token = uuid.uuid4().hex[:8]
    base, ad_base, vendor = f"ou=e{token},{settings.ldap.base_dn}", f"OU=e{token},{BASE_DN}", f"v{token}"
    conn = _ldap(settings)
    conn.add(base, ["organizationalUnit"], {"ou": f"e{token}"})
    for ou in ("staff", "teams"):
        conn.add(f"ou={ou},{base}", ["organizationalUnit"], {"ou": ou})
    conn.add(f"uid=hand,ou=staff,{base}", ["inetOrgPerson"], {"cn": "Hand Made", "sn": "Made"})
    conn.unbind()
    conn = ad(settings)
    conn.add(ad_base, ["organizationalUnit"])
    for ou in ("staff", "teams"):
        conn.add(f"OU={ou},{ad_base}", ["organizationalUnit"])
    conn.add(f"CN=Hand Made,OU=staff,{ad_base}", ["top", "person", "organizationalPerson", "user"],
             {"sAMAccountName": f"h{token}", "sn": "Made", "userAccountControl": "514"})  # fmt: skip
    conn.unbind()
    with psycopg.connect(settings.vendor.dsn(), autocommit=True) as pg:
        pg.execute(VENDOR.format(v=vendor))  # type: ignore[arg-type]
    yield base, ad_base, vendor
    conn = _ldap(settings)
    found = conn.extend.standard.paged_search(base, "(objectClass=*)", attributes=["1.1"], paged_size=1000,
                                              generator=False)  # fmt: skip
    for dn in sorted((e["dn"] for e in found if e.get("type") == "searchResEntry"), key=lambda d: -d.count(",")):
        conn.delete(dn)
    conn.unbind()
    conn = ad(settings)
    conn.delete(ad_base, controls=[("1.2.840.113556.1.4.805", True, None)])
    conn.unbind()
    with psycopg.connect(settings.vendor.dsn(), autocommit=True) as pg:
        pg.execute(f"DROP SCHEMA {vendor} CASCADE")  # type: ignore[arg-type]


# a scenario of a minute and more on two cores: in make long, so make test stays under 25 minutes
@pytest.mark.long
def test_a_teams_own_schema_reaches_its_directory_its_ad_and_its_import_table_through_mappings_alone(
    settings: Settings, tmp_path: Path, places: tuple[str, str, str]
) -> None:
    base, ad_base, vendor = places
    token = uuid.uuid4().hex[:8]
    schema, src, slot = f"hr_{token}", f"h{token}", f"mcq_h{token}"
    s = settings.model_copy(update={"topic_prefix": f"tm{token}", "state_dir": tmp_path / "state",
                                    "targets": {"ad": LdapTarget(**ad_directory(settings))}})  # fmt: skip
    read_back = tmp_path / "vendor_read_back.sql"
    read_back.write_text(VENDOR_READ_BACK.format(v=vendor))
    listeners = ("listeners:" + LDAP_LISTENER.format(name="Dir", base=base)
                 + AD_LISTENER.format(name="AD", base=ad_base) + RETRY
                 + IMPORT_LISTENER.format(name="Vendor", vendor=vendor, read_back=read_back) + INTERESTS)  # fmt: skip
    text = PEOPLE.format(src=src, schema=schema, slot=slot, listeners=listeners)
    registry_file = tmp_path / "people.yaml"
    registry_file.write_text(text)
    registry = parse_registry(text, str(registry_file))
    with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        for ddl in DDL:
            conn.execute(ddl.format(s=schema))
        work = Workload(conn, schema, random.Random(55))
        work.load()
    checkpoint = tmp_path / "checkpoint"

    def normalise() -> None:
        for table, n in work.events.items():
            wait_raw_records(s, raw_topic(registry.sources[0], f"{schema}.{table}"), n)
        run_normalize(s, registry, once=True, checkpoint=checkpoint)
        assert EntityJob(s, registry).run(until_caught_up=True) == 0

    def listen(*names: str) -> None:
        for name in names:
            rt = ListenerRuntime(s, name, registry=registry, http_port=None)
            assert rt.run(until_caught_up=True) == 0

    env = {"MCQ_TOPIC_PREFIX": s.topic_prefix, "MCQ_HOME": str(s.stack.home)}
    cli = CliRunner()
    try:
        apply_capture(registry, s)
        wait_slot_active(s, slot)
        with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
            work.conn = conn
            for _ in range(150):
                work.step()
        normalise()
        listen("AD", "Vendor")  # the directory's listener is offline for now
        with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
            work.conn = conn
            for _ in range(300):
                work.step()
        normalise()
        listen("Dir", "AD", "Vendor")
        listen("AD")  # a group whose new member was not made yet when it was written: retried

        with psycopg.connect(s.source.dsn()) as conn:
            people, teams = accounts(conn, schema), groups(conn, schema)
        assert {a["status"] for a in people.values()} == {"A", "S"} and any(g["logins"] for g in teams.values())
        assert held_directory(s, base) == {"uid=hand": {"cn": ["Hand Made"], "sn": ["Made"]},
                                           **wanted_directory(people, teams)}  # fmt: skip
        assert held_ad(s, ad_base) == wanted_ad(people, teams, ad_base)
        with psycopg.connect(s.vendor.dsn()) as conn:
            vendor_rows = {r[0]: r[1:] for r in conn.execute(
                f"SELECT login, full_name, status, phone FROM {vendor}.people").fetchall()}  # type: ignore[arg-type]  # fmt: skip
        states = {"A": "active", "S": "suspended"}
        assert {k: v for k, v in vendor_rows.items() if k in people} == {
            login: (f"{a['given']} {a['family']}", states[a["status"]], (a["office"] or [None])[0])
            for login, a in people.items()
        }
        assert all(v[1] == "gone" for k, v in vendor_rows.items() if k not in people)  # deleted: kept as former
        # the collisions: dead-lettered with the collision named, in both directories
        for name in ("Dir", "AD"):
            dead = [d.error for d in DeadLetters(s, name).entries()]
            assert any("collision" in e and "hand" in e.lower() for e in dead), (name, dead)
            assert all("collision" in e for e in dead), (name, dead)

        # the preview of one account's entry
        login = next(x for x in sorted(people) if x != "hand")
        shown = cli.invoke(main, ["map", "preview", "Dir", f"pkey_string={login}", "--tname", "ACCOUNT_ENTRY",
                                  "--registry", str(registry_file)], env=env)  # fmt: skip
        assert shown.exit_code == 0 and f'"dn": "uid={login},ou=staff,{base}"' in shown.output, shown.output

        # drift by hand in the directory: reported exactly, repaired, the hand-made entry untouched
        conn = _ldap(s)
        victim, changed = sorted(k for k in people if k != "hand")[:2]
        conn.delete(f"uid={victim},ou=staff,{base}")
        conn.modify(f"uid={changed},ou=staff,{base}", {"sn": [(MODIFY_REPLACE, ["Drifted"])]})
        conn.unbind()
        report = tmp_path / "drift.json"
        drift = cli.invoke(main, ["reconcile", "Dir", "--registry", str(registry_file), "--report", str(report)],
                           env=env)  # fmt: skip
        # exactly what was done by hand, and the account whose name collides (dead-lettered: it never got there)
        assert drift.exit_code == 1 and "2 missing, 0 extra, 1 different" in drift.output, drift.output
        missing = {ChangeKey.from_str(line.split("missing: ", 1)[1]).pkey_string for line in
                   drift.output.splitlines() if "missing: " in line}  # fmt: skip
        assert missing == {victim, "hand"}, drift.output
        assert (
            f"different: ACCOUNT_ENTRY[pkey_string={changed}]" in drift.output and "found ['Drifted']" in drift.output
        )
        repaired = cli.invoke(main, ["reconcile", "Dir", "--repair", "--registry", str(registry_file)], env=env)
        assert repaired.exit_code == 0, repaired.output
        listen("Dir")
        assert held_directory(s, base) == {"uid=hand": {"cn": ["Hand Made"], "sn": ["Made"]},
                                           **wanted_directory(people, teams)}  # fmt: skip
        clean = cli.invoke(main, ["reconcile", "Dir", "--registry", str(registry_file)], env=env)
        assert (
            "1 missing, 0 extra, 0 different" in clean.output and "ACCOUNT_ENTRY[pkey_string=hand]" in clean.output
        ), clean.output

        # an emptied directory (but the hand-made entry) rebuilt from the topics
        conn = _ldap(s)
        for dn in list(held_directory(s, base)):
            if dn != "uid=hand":
                conn.delete(f"{dn},ou={'staff' if dn.startswith('uid=') else 'teams'},{base}")
        conn.unbind()
        rebuilt = cli.invoke(main, ["rebuild", "Dir", "--registry", str(registry_file)], env=env)
        assert rebuilt.exit_code == 0, rebuilt.output
        assert "1 key(s) left out: dead-lettered and unresolved" in rebuilt.output  # the colliding account
        assert held_directory(s, base) == {"uid=hand": {"cn": ["Hand Made"], "sn": ["Made"]},
                                           **wanted_directory(people, teams)}  # fmt: skip
    finally:
        uncapture(s, registry, schema)
