"""Apply rate of the ``table``, ``sql_import`` and ``ldap`` adapters, and how long a
scheduled ``--until-caught-up`` run with about 100 changes pending takes, start to exit.

Method: a captured campus world of its own (``--people``; a schema, a Debezium
connector, raw topics). Once the connector's snapshot is in the raw topics,
``mcq streams normalize --once`` turns it into the logical topics (its batch line gives
the normaliser's throughput on that backlog), and ``mcq entities run --until-caught-up``
writes the people and groups that LDAP and Insite map (examples/campus.yaml). Then each
listener runs
``mcq listen NAME --until-caught-up`` as its own process, one after the other, over the
whole initial load: ``Insite`` (sql_import, the vendor's import table and trigger),
``LDAP`` (ldap, an OU of its own on the stack's OpenLDAP) and ``Mirror`` (a ``table``
listener added to the registry, interested in what LDAP is). Rate = changes applied /
the process's wall time (Python and Kafka start-up included). Then ``--pending``
random updates are committed to the source, normalised once more, and each listener
runs again: the start-to-exit time of a scheduled run. Both runs end with a check of
LDAP and the import table against the source (``mcq.demo.checks``): a figure of a wrong
result is not reported as a figure.

    .venv/bin/python -m bench.listener_apply --people 10000 --pending 100

Needs the local stack up (``mcq stack up``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import psycopg
from ldap3 import Connection, Server

from mcq.config import Settings
from mcq.demo.checks import check_insite, check_ldap
from mcq.registry import parse_registry
from mcq.testing.worlds import captured_world
from mcq.topics.read import all_watermarks
from streams.plan import plan_normalize

from .memory import PeakRss
from .table import print_table
from .world import bench_run

MIRROR = """
  - name: Mirror
    comment: the last state of every row LDAP sees, in a table (bench)
    owner: bench@localhost
    schedule: realtime
    adapter: {type: table, settings: {table: TABLE}}
"""
MIRROR_INTERESTS = """
  - {listener: Mirror, tname: PERSON, subtype: "*"}
  - {listener: Mirror, tname: LOGINS, subtype: null}
  - {listener: Mirror, tname: GROUPS, subtype: null}
  - {listener: Mirror, tname: GROUP_MEM, subtype: null}
  - {listener: Mirror, tname: DEPARTMENT, subtype: null}
"""
LISTENERS = (("Mirror", "table"), ("Insite", "sql_import"), ("LDAP", "ldap"))


def bench_registry(text: str, token: str, base: str) -> str:
    """The captured world's registry with the bench's own LDAP containers, vendor schema and Mirror."""
    text = text.replace("ou=people,{base}", f"ou=people,{base}").replace("ou=groups,{base}", f"ou=groups,{base}")
    text = text.replace("        vendor_schema: insite\n", f"        vendor_schema: v_{token}\n")
    mirror = MIRROR.replace("TABLE", f"b_{token}.mirror")
    return text.replace("\ninterests:\n", f"{mirror}\ninterests:\n{MIRROR_INTERESTS}")


def raw_rows(settings: Settings, topics: list[str]) -> int:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings.kafka.client_config())
    meta = admin.list_topics(timeout=10).topics
    tps = [TopicPartition(t, p) for t in topics if t in meta for p in meta[t].partitions]
    if not tps:
        return 0
    return sum(high for _, high in all_watermarks(admin, tps).values())


def wait_snapshot(settings: Settings, topics: list[str], timeout_s: float = 900) -> int:
    """Until the raw topics stop growing (the connector's snapshot is in), with progress.

    Called once ``captured_world`` saw the slot active: the connector has read every table
    and streams, so what is left is its queue reaching the broker, and 3 s without a new
    record is the end (8 s of stillness cost each benchmark 6 s for nothing)."""
    deadline, last, still_since = time.monotonic() + timeout_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        n = raw_rows(settings, topics)
        if n != last:
            print(f"  snapshot: {n:,} raw records", flush=True)
            last, still_since = n, time.monotonic()
        elif n > 0 and time.monotonic() - still_since >= 3:
            return n
        time.sleep(1)
    raise SystemExit("the connector's snapshot did not finish in time")


PEAKS: dict[str, float] = {}
"""Peak resident MiB of the last run of each command (``mcq``), its child processes included."""


def mcq(env: dict[str, str], *args: str) -> tuple[float, str]:
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        job = subprocess.Popen([sys.executable, "-m", "mcq.cli", *args], env=env, stdout=out, stderr=err)
        with PeakRss(job.pid) as peak:
            returncode = job.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    seconds = time.monotonic() - started
    PEAKS[" ".join(args[:2])] = peak.mib
    if returncode != 0:
        raise SystemExit(f"mcq {' '.join(args)} exited {returncode}:\n{stdout[-3000:]}{stderr[-3000:]}")
    return seconds, stdout


def memory_row(what: str, n: int, unit: str, mib: float) -> list[str]:
    return [what, f"{n:,} {unit}", f"{mib:,.0f}", f"{mib / n * 100_000:,.0f}" if n else "-"]


def applied(out: str) -> int:
    found = re.search(r"caught up; applied (\d+)", out)
    return int(found.group(1)) if found else 0


def entities_row(env: dict[str, str], reg: tuple[str, ...], what: str) -> str:
    """``mcq entities run --until-caught-up`` (the people and groups LDAP and Insite map), timed."""
    seconds, out = mcq(env, "entities", "run", *reg, "--until-caught-up", "--no-http")
    found = re.search(r"entities: (\d+) records written", out)
    n = int(found.group(1)) if found else 0
    row = f"| `mcq entities run`, {what} | {n:,} entity records | {seconds:.1f} s | {n / seconds:,.0f} records/s |"
    print(row, flush=True)
    return row


def random_updates(settings: Settings, schema: str, n: int, seed: int = 3) -> None:
    rnd = random.Random(seed)
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        people = [r[0] for r in conn.execute(f"SELECT person_id FROM {schema}.people")]
        for i in range(n):
            if i % 2:
                conn.execute(f"UPDATE {schema}.people SET last_name = %s WHERE person_id = %s",
                             (f"Bench{i}", rnd.choice(people)))  # fmt: skip
            else:
                conn.execute(f"UPDATE {schema}.person_status SET status = %s WHERE person_id = %s",
                             (rnd.choice(["Student", "Staff", "Faculty"]), rnd.choice(people)))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--people", type=int, default=10_000)
    ap.add_argument("--pending", type=int, default=100, help="changes committed before the scheduled runs")
    args = ap.parse_args(argv)
    run = bench_run()
    token, settings, env, work = run.token, run.settings, run.env, run.work
    base = f"ou=b{token},{settings.ldap.base_dn}"
    ldap = Connection(Server(settings.ldap.url), user=settings.ldap.bind_dn,
                      password=settings.ldap.password.get_secret_value(), auto_bind=True)  # fmt: skip
    ldap.add(base, ["organizationalUnit"], {"ou": f"b{token}"})
    for ou in ("people", "groups"):
        ldap.add(f"ou={ou},{base}", ["organizationalUnit"], {"ou": ou})
    rows: list[str] = []
    memory: list[list[str]] = []
    try:
        print(f"loading and capturing {args.people:,} people ...", flush=True)
        with captured_world(settings, people=args.people, seed=11) as world:
            registry_file = work / "registry.yaml"
            registry_file.write_text(bench_registry(world.registry_yaml, token, base))
            registry = parse_registry(registry_file.read_text(), str(registry_file))
            raw = sorted({world.topic(f.table) for t in registry.tables for f in t.feeds})
            n_raw = wait_snapshot(settings, raw)
            reg = ("--registry", str(registry_file))
            ckpt = ("--checkpoint", str(work / "ckpt"))
            print("normalising the initial load ...", flush=True)
            seconds, out = mcq(env, "streams", "normalize", *reg, "--once", *ckpt)
            batch = re.search(r"batch 0: in (\d+), .*, ([\d.]+) s", out)
            if batch:
                rows_in, batch_s = int(batch.group(1)), float(batch.group(2))
                rows.append(f"| normaliser, initial load (batch 0) | {rows_in:,} raw rows | {batch_s:.1f} s | "
                            f"{rows_in / batch_s:,.0f} rows/s |")  # fmt: skip
            n_raw = raw_rows(settings, plan_normalize(registry, settings.topic_prefix).raw_topics)  # and the outbox's
            rows.append(f"| normaliser `--once`, start to exit | {n_raw:,} raw rows | {seconds:.1f} s | "
                        f"{n_raw / seconds:,.0f} rows/s |")  # fmt: skip
            print(rows[-1], flush=True)
            memory.append(memory_row("normaliser `--once` (Python and Spark's JVM)", n_raw, "raw rows",
                                     PEAKS["streams normalize"]))  # fmt: skip
            rows.append(entities_row(env, reg, "initial load"))
            entities = int(rows[-1].split("|")[2].split()[0].replace(",", ""))
            memory.append(
                memory_row("`mcq entities run` (the entity store)", entities, "entities", PEAKS["entities run"])
            )
            for name, kind in LISTENERS:
                print(f"listener {name} ({kind}): the initial load ...", flush=True)
                seconds, out = mcq(env, "listen", name, *reg, "--until-caught-up", "--no-http")
                n = applied(out)
                memory.append(memory_row(f"`mcq listen` `{kind}` ({name})", n, "keys", PEAKS[f"listen {name}"]))
                rows.append(f"| `{kind}` ({name}), initial load | {n:,} changes | {seconds:.1f} s | "
                            f"{n / seconds:,.0f} changes/s |")  # fmt: skip
                print(rows[-1], flush=True)
            random_updates(settings, world.schema, args.pending)
            time.sleep(3)  # Debezium's poll interval and the producer's linger
            seconds, out = mcq(env, "streams", "normalize", *reg, "--once", *ckpt)
            batch = re.search(r"batch \d+: in (\d+), .*, ([\d.]+) s", out)
            rows.append(f"| normaliser `--once`, scheduled run with changes pending | "
                        f"{int(batch.group(1)) if batch else 0:,} raw rows | {seconds:.1f} s | "
                        f"start to exit (batch {float(batch.group(2)) if batch else 0:.1f} s) |")  # fmt: skip
            print(rows[-1], flush=True)
            rows.append(entities_row(env, reg, "scheduled run with changes pending"))
            for name, kind in LISTENERS:
                seconds, out = mcq(env, "listen", name, *reg, "--until-caught-up", "--no-http")
                rows.append(f"| `{kind}` ({name}), scheduled run with changes pending | {applied(out):,} changes | "
                            f"{seconds:.1f} s | start to exit |")  # fmt: skip
                print(rows[-1], flush=True)
            checks = [
                check_ldap(settings, registry, f"ou=people,{base}", f"ou=groups,{base}"),
                check_insite(settings, registry, f"v_{token}", set()),
            ]
            for check in checks:
                print(f"check {check.target}: {'ok' if check.ok else 'WRONG'} ({check.checked:,} checked)", flush=True)
                if not check.ok:
                    raise SystemExit(f"the target is not the source's state: {check.problems[:5]}")
    finally:
        ldap.search(base, "(objectClass=*)", attributes=["1.1"])
        for dn in sorted((e.entry_dn for e in ldap.entries), key=lambda d: -d.count(",")):
            ldap.delete(dn)
        ldap.unbind()
        with psycopg.connect(settings.vendor.dsn(), autocommit=True) as db:
            db.execute(f"DROP SCHEMA IF EXISTS v_{token} CASCADE")
            db.execute(f"DROP SCHEMA IF EXISTS b_{token} CASCADE")
    caption = f"{args.people:,} people, {os.cpu_count()} cores, the whole local stack on the same machine"
    print_table(caption, ["measurement", "size", "wall time", "rate"], rows)
    # after the table, one line: bench.run keeps it as the table's note
    peaks = "; ".join(f"{what} {mib} MiB at {size} ({per} MiB per 100,000)" for what, size, mib, per in memory)
    print("\nPeak resident memory of each process of the initial load (sampled from /proc every 0.2 s, its child "
          f"processes included; per 100,000 with its fixed part): {peaks}.")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
