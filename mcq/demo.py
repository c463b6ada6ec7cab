"""``mcq demo``: the whole pipeline on the campus world, narrated, then checked.

Starts the normaliser and the real-time listeners (LDAP, BEST's files) as processes,
waits for the initial load to reach them, performs a scripted burst of changes in the
source (a new hire, a telephone changed twice, a status change, a transfer-student
refresh through the explicit-log function, a deletion, a change the vendor trigger
rejects), runs Insite's batch catch-up, prints what each listener applied, what is
pending, parked and dead-lettered, and ends with a check that LDAP and the vendor table
hold, key by key, what the source holds. Exit 0 when they do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from ldap3 import LEVEL, Connection, Server

from consumers.ldap.entries import STATE, group_entry, person_entry
from consumers.projection import source_snapshot
from consumers.runtime.dlq import DeadLetters
from consumers.runtime.listener import ListenerRuntime
from consumers.runtime.status import status_report
from consumers.runtime.topics import ListenerTopics
from mcq.config import PROJECT_ROOT, Settings
from mcq.registry.model import Registry

Say = Callable[[str], None]
REALTIME = ("LDAP", "BEST")
SQL_IMPORT_STATE = ("PERSON/PEOPLE", "PERSON/Status", "PERSON/Dir_Orgn", "DEPARTMENT")


@dataclass
class Check:
    """The result of comparing a target with the source."""

    target: str
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        verdict = "equal to the source" if self.ok else f"{len(self.problems)} difference(s)"
        return f"check {self.target}: {self.checked} keys, {verdict}"


def _ldap(settings: Settings) -> Connection:
    s = settings.ldap
    return Connection(Server(s.url), user=s.bind_dn, password=s.password.get_secret_value(), auto_bind=True)


def _entries(conn: Connection, container: str) -> dict[str, dict[str, list[str]]]:
    conn.search(container, "(objectClass=*)", LEVEL, attributes=["*"], paged_size=1000)
    out = {
        e.entry_dn.lower(): {k: sorted(map(str, v)) for k, v in e.entry_attributes_as_dict.items()}
        for e in conn.entries
    }
    cookie = conn.result.get("controls", {}).get("1.2.840.113556.1.4.319", {}).get("value", {}).get("cookie")
    while cookie:
        conn.search(container, "(objectClass=*)", LEVEL, attributes=["*"], paged_size=1000, paged_cookie=cookie)
        out.update(
            {
                e.entry_dn.lower(): {k: sorted(map(str, v)) for k, v in e.entry_attributes_as_dict.items()}
                for e in conn.entries
            }
        )
        cookie = conn.result.get("controls", {}).get("1.2.840.113556.1.4.319", {}).get("value", {}).get("cookie")
    return out


def check_ldap(settings: Settings, registry: Registry, people_dn: str, groups_dn: str, default_gid: int = 100) -> Check:
    """Every person and group of the source has exactly its entry, and no other entry exists."""
    check = Check("LDAP")
    source = source_snapshot(settings, registry, [r for r in STATE if registry.table(*_ref(r))])
    conn = _ldap(settings)
    try:
        people, groups = _entries(conn, people_dn), _entries(conn, groups_dn)
        wanted: dict[str, Any] = {}
        for row in source.rows("PERSON/PEOPLE"):
            entry = person_entry(source, int(row["person_id"] or 0), people_dn, default_gid)
            if entry:
                wanted[entry.dn.lower()] = entry
        for row in source.rows("GROUPS"):
            entry = group_entry(source, row["group_name"] or "", groups_dn)
            if entry:
                wanted[entry.dn.lower()] = entry
        have = {**people, **groups}
        for dn, entry in wanted.items():
            check.checked += 1
            got = have.get(dn)
            if got is None:
                check.problems.append(f"{dn}: missing")
                continue
            for attr, values in entry.attributes.items():
                if sorted(values) != got.get(attr, []):
                    check.problems.append(f"{dn}: {attr} is {got.get(attr, [])}, the source says {sorted(values)}")
        for dn in have.keys() - wanted.keys():
            check.problems.append(f"{dn}: in the directory, not in the source")
    finally:
        conn.unbind()
    return check


def _ref(ref: str) -> tuple[str, str | None]:
    tname, _, subtype = ref.partition("/")
    return tname, subtype or None


def check_insite(settings: Settings, registry: Registry, vendor_schema: str, rejected: set[int]) -> Check:
    """SA_PERSON holds every person of the source as the trigger would, except the ones whose
    change the trigger rejected (those are in the dead-letter topic)."""
    from consumers.sql_import.adapter import ORGN

    check = Check("Insite SA_PERSON")
    source = source_snapshot(settings, registry, SQL_IMPORT_STATE)
    try:
        with psycopg.connect(settings.vendor.dsn()) as conn:
            rows = conn.execute(
                f"SELECT person_number, person_last_name, person_first_name, person_location, person_text1, "
                f"person_memo FROM {vendor_schema}.sa_person"
            ).fetchall()
        have = {r[0]: tuple(r[1:]) for r in rows}
        for person in source.rows("PERSON/PEOPLE"):
            pid = int(person["person_id"] or 0)
            if pid in rejected:
                continue
            check.checked += 1
            status = source.row("PERSON/Status", pid)
            orgns = sorted(source.rows(ORGN, pid), key=lambda r: int(r.get("dept_id") or 0))
            orgn = title = None
            if orgns:
                title = orgns[0].get("title")
                dept = source.keyed("DEPARTMENT", pkey_number=orgns[0].get("dept_id") or "")
                orgn = dept[0].get("name") if dept else None
            got = have.get(str(pid))
            if got is None:
                check.problems.append(f"person {pid}: missing")
                continue
            want_status = (status or {}).get("status")
            if want_status is None:  # the trigger's rule: No Status on insert, Former-<old> after
                ok_status = got[2] == "No Status" or (got[2] or "").startswith("Former-")
            else:
                ok_status = got[2] == want_status[:24]
            if (got[0], got[1], got[3], got[4]) != (
                person["last_name"],
                person["first_name"],
                orgn,
                title,
            ) or not ok_status:
                check.problems.append(
                    f"person {pid}: {got}, the source says "
                    f"{(person['last_name'], person['first_name'], want_status, orgn, title)}"
                )
    finally:
        pass
    return check


def _sql(settings: Settings, *statements: str | tuple[str, tuple[Any, ...]]) -> None:
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        for s in statements:
            if isinstance(s, tuple):
                conn.execute(s[0], s[1])  # type: ignore[arg-type]
            else:
                conn.execute(s)  # type: ignore[arg-type]


def _one(settings: Settings, query: str) -> Any:
    with psycopg.connect(settings.source.dsn()) as conn:
        row = conn.execute(query).fetchone()  # type: ignore[arg-type]
    return row[0] if row else None


def burst(settings: Settings, schema: str, say: Say) -> set[int]:
    """The scripted changes; returns the people whose change the vendor trigger will reject."""
    s = schema
    hire = int(_one(settings, f"SELECT coalesce(max(person_id), 0) + 1 FROM {s}.people"))
    uid = int(_one(settings, f"SELECT coalesce(max(unixuid), 60000) + 1 FROM {s}.logins"))
    say(f"burst: new hire Grace Hopper (person {hire}), with a status, a campus number, an e-mail and a login")
    _sql(
        settings,
        (
            f"INSERT INTO {s}.people (person_id, first_name, last_name, id_number) VALUES (%s, 'Grace', 'Hopper', %s)",
            (hire, f"H{hire}"),
        ),
        (f"INSERT INTO {s}.person_status (person_id, status) VALUES (%s, 'Employee')", (hire,)),
        (
            f"INSERT INTO {s}.directory_telephone (person_id, tele_type, phone_number) "
            "VALUES (%s, 'campus', '+1 518 276 1906')",
            (hire,),
        ),
        (f"INSERT INTO {s}.udi (person_id, email) VALUES (%s, 'hopperg@campus.example')", (hire,)),
        (
            f"INSERT INTO {s}.logins (username, owner, unixuid, source, shell) VALUES (%s, %s, %s, 'HR', '/bin/bash')",
            (f"hopperg{hire}", hire, uid),
        ),
    )
    phone_owner = int(_one(settings, f"SELECT min(person_id) FROM {s}.directory_telephone WHERE tele_type = 'campus'"))
    say(f"burst: person {phone_owner}'s campus number changes twice (only the last may remain)")
    for number in ("+1 518 276 7001", "+1 518 276 7002"):
        _sql(
            settings,
            (
                f"UPDATE {s}.directory_telephone SET phone_number = %s WHERE person_id = %s AND tele_type = 'campus'",
                (number, phone_owner),
            ),
        )
    status_owner = int(_one(settings, f"SELECT min(person_id) FROM {s}.person_status WHERE status = 'Student'"))
    say(f"burst: person {status_owner} graduates: status Student -> Alumni")
    _sql(settings, (f"UPDATE {s}.person_status SET status = 'Alumni' WHERE person_id = %s", (status_owner,)))
    say("burst: the transfer-student refresh (the paper's Figure 5) through mcq_log_update")
    _sql(
        settings, (PROJECT_ROOT / "examples" / "refresh_transfer_students.sql").read_text().replace("campus.", f"{s}.")
    )
    gone = int(_one(settings, f"SELECT max(person_id) FROM {s}.people WHERE person_id < {hire}"))
    say(f"burst: person {gone} is deleted (with every row that hangs off it)")
    _sql(
        settings,
        (
            f"DELETE FROM {s}.group_members WHERE username IN (SELECT username FROM {s}.logins WHERE owner = %s)",
            (gone,),
        ),
        (f"DELETE FROM {s}.logins WHERE owner = %s", (gone,)),
        (f"DELETE FROM {s}.people WHERE person_id = %s", (gone,)),
    )
    nameless = int(_one(settings, f"SELECT min(person_id) + 1 FROM {s}.people"))
    say(f"burst: person {nameless} loses their last name: INSITE's trigger will refuse that")
    _sql(settings, (f"UPDATE {s}.people SET last_name = '' WHERE person_id = %s", (nameless,)))
    return {nameless}


def _status_lines(settings: Settings, registry: Registry, names: list[str]) -> list[str]:
    out = []
    for r in status_report(settings, registry, names):
        c = r.counters
        out.append(
            f"  {r.name:7} {r.verdict:8} alive {len(r.alive)}  applied {c.get('applied', 0):6}  "
            f"pending {r.pending:6}  parked {c.get('parked', 0)}  dead-lettered {c.get('dead_lettered', 0)}  "
            f"superseded {c.get('superseded', 0)}"
        )
    return out


def run_demo(settings: Settings, registry: Registry, say: Say = print, timeout_s: float = 900.0) -> int:
    logs = settings.stack.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    env = {**os.environ}

    def start(name: str, *args: str) -> None:
        log = (logs / f"demo-{name}.log").open("ab")
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "mcq.cli", *args], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        say(f"demo: started {name} (pid {procs[name].pid}, log {logs / f'demo-{name}.log'})")

    ldap_settings = registry.listener("LDAP").adapter.settings  # type: ignore[union-attr]
    people_dn = ldap_settings.get("people_dn") or settings.ldap.people_dn
    groups_dn = ldap_settings.get("groups_dn") or settings.ldap.groups_dn
    vendor_schema = registry.listener("Insite").adapter.settings.get("vendor_schema", "insite")  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout_s
    try:
        start("normalize", "streams", "normalize", "--trigger", "1 second")
        for name in REALTIME:
            start(name, "listen", name, "--http-port", "0")

        def converge(what: str, check: Callable[[], Check]) -> Check:
            last = 0.0
            while True:
                result = check()
                if result.ok or time.monotonic() > deadline:
                    return result
                if time.monotonic() - last > 10:
                    last = time.monotonic()
                    say(
                        f"demo: waiting for {what}: {len(result.problems)} keys still differ, e.g. {result.problems[0]}"
                    )
                    for line in _status_lines(settings, registry, list(REALTIME)):
                        say(line)
                time.sleep(3)

        say("demo: the initial load flows: source -> Debezium -> Spark -> Kafka -> LDAP")
        first = converge("the initial load to reach LDAP", lambda: check_ldap(settings, registry, people_dn, groups_dn))
        say(first.line())
        rejected = burst(settings, "campus", say)
        ldap = converge("the burst to reach LDAP", lambda: check_ldap(settings, registry, people_dn, groups_dn))
        for line in _status_lines(settings, registry, list(REALTIME)):
            say(line)
        time.sleep(5)  # the normaliser's next batch carries the last of the burst
        retry = ListenerTopics(settings.topic_prefix, "Insite").retry
        for run in range(1, 6):  # nightly runs, compressed: parked changes are due at a later run
            say(f"demo: Insite's catch-up run #{run} (mcq listen Insite --until-caught-up)")
            ListenerRuntime(settings, "Insite", http_port=None, report=lambda line: say(f"  {line}")).run(
                until_caught_up=True
            )
            [status] = status_report(settings, registry, ["Insite"])
            parked = sum(lag.pending for lag in status.lags if lag.topic == retry)
            if not parked:
                break
            say(f"demo: {parked} parked change(s) wait for the next run")
            time.sleep(registry.listener("Insite").delivery.park_initial_s * 2 ** (run - 1))  # type: ignore[union-attr]
        for line in _status_lines(settings, registry, ["Insite"]):
            say(line)
        dead = DeadLetters(settings, "Insite").entries()
        for d in dead:
            say(f"demo: Insite dead letter {d.id} from {d.origin}: {d.error}")
        insite = check_insite(settings, registry, vendor_schema, rejected)
        say(ldap.line())
        say(insite.line())
        for problem in (ldap.problems + insite.problems)[:20]:
            say(f"  {problem}")
        refused = any("no last name" in d.error for d in dead)
        say(f"check: the trigger's refusal is in Insite's dead-letter topic: {'yes' if refused else 'NO'}")
        files = sorted(Path("out/best").glob("*.jsonl")) if Path("out/best").is_dir() else []
        say(f"check: BEST's listener wrote {len(files)} file(s) to out/best")
        return 0 if ldap.ok and insite.ok and refused else 1
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for name, proc in procs.items():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            say(f"demo: stopped {name}")
