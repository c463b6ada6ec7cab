"""``mcq demo``: the whole pipeline on the campus world, narrated, then checked.

Starts the normaliser, the entities job (the people and groups the directory and the
vendor's import table map, examples/campus.yaml) and the real-time listeners (LDAP, BEST's
files) as processes,
waits for the initial load to reach them, performs a scripted burst of changes in the
source (a new hire, a telephone changed twice, a status change, a transfer-student
refresh through the explicit-log function, a deletion, a change the vendor trigger
rejects), runs Insite's batch catch-up, prints what each listener applied, what is
pending, parked and dead-lettered, and ends with checks (:mod:`mcq.demo.checks`, derived from
the source tables, never from the listeners' code) that LDAP, the vendor table and BEST's
files hold, key by key, what the source holds. Exit 0 only when every check it prints
holds: the initial load in LDAP, LDAP, the vendor table and BEST's files after the burst,
and the vendor trigger's refusal in Insite's dead-letter topic.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg

from consumers.runtime.dlq import DeadLetters
from consumers.runtime.listener import ListenerRuntime
from consumers.runtime.status import status_report
from mcq.config import Settings
from mcq.demo.checks import Check, check_files, check_insite, check_ldap
from mcq.registry.model import Registry
from mcq.resources import read_text
from mcq.topics.listener import ListenerTopics

log = logging.getLogger(__name__)

Say = Callable[[str], None]
REALTIME = ("LDAP", "BEST")


def world_schema(registry: Registry) -> str:
    """The schema holding the campus world's tables: the one the registry's PERSON/PEOPLE feed names."""
    table = registry.table("PERSON", "PEOPLE")
    if table is None or not table.feeds:
        raise ValueError("the registry has no feed of PERSON/PEOPLE: which schema holds the world?")
    return table.feeds[0].schema_name


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
    _sql(settings, read_text("examples", "refresh_transfer_students.sql").replace("campus.", f"{s}."))
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


def run_demo(settings: Settings, registry: Registry, say: Say = log.info, timeout_s: float = 900.0) -> int:
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
    vendor_schema = registry.listener("Insite").adapter.settings["vendor_schema"]  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout_s
    try:
        start("normalize", "streams", "normalize", "--trigger", "1 second")
        start("entities", "entities", "run", "--http-port", "0")
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

        say("demo: the initial load flows: source -> Debezium -> Spark -> Kafka -> entities -> LDAP")
        first = converge("the initial load to reach LDAP", lambda: check_ldap(settings, registry, people_dn, groups_dn))
        say(first.line())
        for problem in first.problems[:10]:
            say(f"  {problem}")
        rejected = burst(settings, world_schema(registry), say)
        ldap = converge("the burst to reach LDAP", lambda: check_ldap(settings, registry, people_dn, groups_dn))
        for line in _status_lines(settings, registry, list(REALTIME)):
            say(line)
        time.sleep(5)  # the normaliser's next batch carries the last of the burst
        retry = ListenerTopics(settings.topic_prefix, "Insite").retry
        for run in range(1, 6):  # nightly runs, compressed: parked changes are due at a later run
            say(f"demo: Insite's catch-up run #{run} (mcq listen Insite --until-caught-up)")
            ListenerRuntime(settings, "Insite", http_port=None).run(until_caught_up=True)
            [status] = status_report(settings, registry, ["Insite"])
            parked = status.waiting + sum(lag.pending for lag in status.lags if lag.topic == retry)
            if not parked:
                break
            say(f"demo: {parked} parked change(s) wait for the next run")
            time.sleep(registry.listener("Insite").delivery.park_initial_s * 2 ** (run - 1))  # type: ignore[union-attr]
        for line in _status_lines(settings, registry, ["Insite"]):
            say(line)
        dead = DeadLetters(settings, "Insite").entries()
        for d in dead:
            say(f"demo: Insite dead letter {d.id} from {d.origin}: {d.error}")
        best = converge("the burst to reach BEST's files", lambda: check_files(settings, registry, "BEST"))
        insite = check_insite(settings, registry, vendor_schema, rejected)
        for check in (ldap, insite, best):
            say(check.line())
            for problem in check.problems[:10]:
                say(f"  {problem}")
        refused = any("no last name" in d.error for d in dead)
        say(f"check: the trigger's refusal is in Insite's dead-letter topic: {'yes' if refused else 'NO'}")
        return 0 if all(c.ok for c in (first, ldap, insite, best)) and refused else 1
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
