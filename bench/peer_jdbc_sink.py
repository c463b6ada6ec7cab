"""The peer, side by side: Debezium's own JDBC sink connector and mcq moving the same raw
topic into the same PostgreSQL, in the same run.

Method: a captured campus world of its own (``--people``). Both read the raw
``directory_telephone`` topic Debezium wrote:

- **peer**: ``io.debezium.connector.jdbc.JdbcSinkConnector`` (3.4.0.Final, the newest
  on Maven Central here) in the stack's Connect worker, upserting each row into
  ``p_<token>.telephone`` of the vendor database;
- **mcq**: ``mcq streams normalize`` (real-time mode) into the logical topics, and
  ``mcq listen Mirror`` (the ``table`` adapter, interested in PERSON/Telephone) keeping
  each key's last state in ``b_<token>.mirror`` of the same database.

The raw values carry their Connect schema (``connect.natural_text: false``), which the JDBC
sink needs; mcq's default connector writes the smaller schemaless form instead.

1. Initial load, one after the other (each alone on the 2 cores): from the start of the
   connector / of the two mcq processes until the target holds every row of the source
   table. Rate = rows / that time, start-up included.
2. Latency, both running, once the normaliser is through the other tables' backlogs too
   (the logical topics stopped growing): one telephone-number update per transaction at ``--rate``,
   ``--warmup`` seconds of them (reported apart: the normaliser started a minute before, and
   its JVM compiles its queries' code for minutes on 2 shared cores: 24,305 methods in 134 s
   of compile time, ``BENCHMARKS.md``) then ``--seconds``
   measured; a poller reads both targets every 50 ms and notes when each new number
   appears. Latency = first seen in the target - commit. A tap (``bench/hops.py``) reads
   the raw and the logical topic meanwhile, so each of mcq's samples is split into its
   hops: commit -> raw (Debezium), raw -> logical (the normaliser), logical -> row (the
   listener).
   Then a second ``table`` listener (``Mirror2``) is started on the running pipeline: a new
   target fed from the logical topics, as the peer's new connector is fed from the raw one.
3. Throughput, both warm: ``--bursts`` transactions, each updating every telephone row,
   committed one after the other; the time until each target holds every row's last
   value, and until the raw and the logical topic hold every change. Both read what one
   Debezium connector writes while it writes, so this is bounded by Debezium.
4. Draining a backlog, the consumers' own throughput: the peer connector paused and the
   ``Mirror`` listener stopped, ``--drain-bursts`` transactions of the same kind; once the
   raw topic and the logical topic (the normaliser keeps running, as Debezium does) hold
   every change, the peer is resumed and timed until its target holds every last value,
   then the listener is started and timed the same way, each alone on the cores
   (``--listeners N``: N instances in its group; two drained no faster than one here).

    .venv/bin/python -m bench.peer_jdbc_sink --people 5000 --rate 100 --seconds 30

Needs the local stack up (``mcq stack up``) with the JDBC sink plugin (``make install``
resolves it into ``.cache/jvm/connect-plugins``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

from mcq.acl.cluster import AclAdmin
from mcq.acl.plan import Grant
from mcq.config import Settings, load_settings
from mcq.connect_rest import ConnectClient
from mcq.registry import parse_registry
from mcq.stack.services import KAFKA_CONNECT
from mcq.testing.worlds import captured_world, wait_raw_records
from streams.plan import plan_normalize

from .hops import HopTap, hop_rows
from .listener_apply import raw_rows
from .stats import percentile

MIRROR = """
  - name: Mirror
    comment: the last state of every telephone row, in a table (bench)
    owner: bench@localhost
    schedule: realtime
    adapter: {type: table, settings: {table: TABLE}}
"""
MIRROR_INTEREST = '  - {listener: Mirror, tname: PERSON, subtype: "Telephone"}\n'
MIRROR2 = MIRROR.replace("Mirror", "Mirror2")
MIRROR2_INTEREST = MIRROR_INTEREST.replace("Mirror", "Mirror2")


def peer_config(settings: Settings, topic: str, table: str, tasks: int = 1) -> dict[str, str]:
    db = settings.vendor
    return {
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
        "tasks.max": str(tasks),
        "topics": topic,
        "connection.url": db.jdbc_url(),
        "connection.username": db.user,
        "connection.password": db.password.get_secret_value(),  # the local stack's own; a bench only
        "insert.mode": "upsert",
        "primary.key.mode": "record_value",
        "primary.key.fields": "person_id,tele_type",
        "schema.evolution": "basic",
        "collection.name.format": table,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
        "value.converter.replace.null.with.default": "false",  # a NULL stays NULL, as for mcq
    }


def count(settings: Settings, query: str) -> int:
    try:
        with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
            row = conn.execute(query).fetchone()
            return int(row[0]) if row else 0
    except psycopg.errors.UndefinedTable:
        return 0


def wait_loaded(
    settings: Settings,
    what: str,
    query: str,
    expected: int,
    started: float,
    timeout_s: float,
    upstream: list[str] | None = None,
) -> float:
    """Seconds from ``started`` until ``query`` counts ``expected`` rows, with progress (and
    how many records the ``upstream`` topics hold by then)."""
    last = -1
    while time.monotonic() - started < timeout_s:
        n = count(settings, query)
        if n != last:
            also = f", {raw_rows(settings, upstream):,} in {', '.join(upstream)}" if upstream else ""
            print(f"  {what}: {n:,} / {expected:,} rows at {time.monotonic() - started:.1f} s{also}", flush=True)
            last = n
        if n >= expected:
            return time.monotonic() - started
        time.sleep(0.25)
    raise SystemExit(f"{what}: {last:,} of {expected:,} rows after {timeout_s:.0f} s")


def wait_settled(settings: Settings, topics: list[str], still_s: float = 10, timeout_s: float = 900) -> None:
    """Until the logical topics have not grown for ``still_s`` (the normaliser is through its
    backlog), with progress."""
    started, last, still_since = time.monotonic(), -1, time.monotonic()
    while time.monotonic() - started < timeout_s:
        n = raw_rows(settings, topics)
        if n != last:
            print(f"  logical records: {n:,}", flush=True)
            last, still_since = n, time.monotonic()
        elif time.monotonic() - still_since >= still_s:
            return
        time.sleep(1)
    raise SystemExit(f"the logical topics still grew after {timeout_s:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--people", type=int, default=5000)
    ap.add_argument("--rate", type=int, default=100, help="updates per second in the latency run")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=10.0,
                    help="seconds of updates at --rate before the measured ones (reported apart)")  # fmt: skip
    ap.add_argument("--bursts", type=int, default=5, help="transactions that each update every row, both warm")
    ap.add_argument("--drain-bursts", type=int, default=10,
                    help="such transactions committed while both consumers are stopped, then drained")  # fmt: skip
    ap.add_argument(
        "--raw-partitions",
        type=int,
        default=1,
        help="partitions of the raw telephone topic (its feed's raw_partitions); the peer gets as many tasks",
    )
    ap.add_argument("--listeners", type=int, default=1,
                    help="Mirror instances draining the backlog (one group, as the chart's replicas)")  # fmt: skip
    ap.add_argument("--dump", type=Path, help="write every sample's time at each hop to this JSON file")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    token = uuid.uuid4().hex[:6]
    settings = load_settings().model_copy(update={"topic_prefix": f"peer{token}"})
    # the JDBC sink needs each value's Connect schema: the world's connector writes values
    # with it (as for a worker without mcq's NaturalText transform), and mcq reads the same
    settings = settings.model_copy(update={"connect": settings.connect.model_copy(update={"natural_text": False})})
    peer_table, mirror_table, mirror2_table = f"p_{token}.telephone", f"b_{token}.mirror", f"b_{token}.mirror2"
    connector = f"bench-peer-{token}"
    procs: list[subprocess.Popen[bytes]] = []
    rows: list[str] = []
    warm_rows: list[str] = []  # the warm-up's latencies, peer and mcq
    parts = {"directory_telephone": args.raw_partitions} if args.raw_partitions > 1 else None
    with (
        captured_world(settings, people=args.people, raw_partitions=parts) as world,
        ConnectClient(settings.connect) as connect,
    ):
        s = world.schema
        raw = world.topic(f"{s}.directory_telephone")
        with psycopg.connect(settings.source.dsn()) as conn:
            expected = int(conn.execute(f"SELECT count(*) FROM {s}.directory_telephone").fetchone()[0])  # type: ignore[index]
        wait_raw_records(settings, raw, expected, timeout_s=600)
        print(f"{expected:,} telephone rows in {raw}", flush=True)
        with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS p_{token}")
        registry_file = Path(f"/tmp/{settings.topic_prefix}.yaml")
        registry_file.write_text(
            world.registry_yaml.replace(
                "\ninterests:\n",
                MIRROR.replace("TABLE", mirror_table)
                + MIRROR2.replace("TABLE", mirror2_table)
                + "\ninterests:\n"
                + MIRROR_INTEREST
                + MIRROR2_INTEREST,
            )
        )
        env = {**os.environ, "MCQ_TOPIC_PREFIX": settings.topic_prefix}
        try:
            # 1. initial load, each alone
            # the stack's Connect worker runs as mcq-connect under its ACLs: a sink reads a raw
            # topic in its own group, which a campus would grant it the same way
            worker = f"User:{KAFKA_CONNECT}"
            AclAdmin(settings).grant(
                [
                    Grant(worker, "TOPIC", "LITERAL", raw, "READ"),
                    Grant(worker, "GROUP", "LITERAL", f"connect-{connector}", "READ"),
                ]
            )
            started = time.monotonic()
            connect.put(connector, peer_config(settings, raw, peer_table, args.raw_partitions))
            peer_load = wait_loaded(settings, "peer", f"SELECT count(*) FROM {peer_table}", expected, started, 900)
            log = open(f"/tmp/{settings.topic_prefix}-mcq.log", "wb")  # noqa: SIM115

            def spawn(*command: str) -> subprocess.Popen[bytes]:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "mcq.cli", *command],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                procs.append(proc)
                return proc

            def listen(name: str) -> subprocess.Popen[bytes]:
                return spawn("listen", name, "--registry", str(registry_file), "--http-port", "0")

            started = time.monotonic()
            spawn("streams", "normalize", "--http-port", "0", "--registry", str(registry_file),
                  "--checkpoint", f"/tmp/{settings.topic_prefix}-ckpt")  # fmt: skip
            mirror = listen("Mirror")
            mirror_count = f"SELECT count(*) FROM {mirror_table} WHERE tname = 'PERSON' AND subtype = 'Telephone'"
            registry = parse_registry(registry_file.read_text(), str(registry_file))
            logical = plan_normalize(registry, settings.topic_prefix).logical_topics
            telephone = [t for t in logical if t.endswith(".telephone")]
            mcq_load = wait_loaded(settings, "mcq", mirror_count, expected, started, 900, telephone)
            rows.append(f"| initial load, start-up included | {expected:,} rows | peer {peer_load:.1f} s, "
                        f"{expected / peer_load:,.0f} rows/s | "
                        f"mcq {mcq_load:.1f} s, {expected / mcq_load:,.0f} rows/s |")  # fmt: skip
            print(rows[-1], flush=True)
            # the telephone rows are in, other tables' backlogs may still be read in real time
            # (a query per raw topic on the same cores): latency is measured once all are through
            wait_settled(settings, logical)
            # a new target on the running pipeline, as the peer's connector was one on a running worker
            started = time.monotonic()
            listen("Mirror2")
            mirror2_count = mirror_count.replace(mirror_table, mirror2_table)
            new_load = wait_loaded(settings, "mcq, a new listener", mirror2_count, expected, started, 900)
            rows.append(f"| a new target on a running pipeline | {expected:,} rows | peer (above) | "
                        f"mcq {new_load:.1f} s, {expected / new_load:,.0f} rows/s |")  # fmt: skip
            print(rows[-1], flush=True)

            # 2. latency, both running
            seen: dict[str, dict[str, float]] = {"peer": {}, "mcq": {}}
            stop = threading.Event()

            def poll() -> None:
                with psycopg.connect(settings.vendor.dsn(), autocommit=True) as db:
                    while not stop.is_set():
                        now = time.time()
                        for (value,) in db.execute(
                            f"SELECT phone_number FROM {peer_table} WHERE phone_number LIKE 'B-%%'"
                        ):
                            seen["peer"].setdefault(value, now)
                        number = "state->>'phone_number'"
                        for (value,) in db.execute(f"SELECT {number} FROM {mirror_table} WHERE {number} LIKE 'B-%%'"):
                            seen["mcq"].setdefault(value, now)
                        time.sleep(0.05)

            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            committed: dict[str, float] = {}
            tap = HopTap(settings, {"raw": [raw], "logical": logical}, rb"B-\d+")
            with tap, psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
                keys = conn.execute(
                    f"SELECT person_id, tele_type FROM {s}.directory_telephone ORDER BY 1, 2"
                ).fetchall()
                warm, n = int(args.rate * args.warmup), int(args.rate * args.seconds)
                print(f"latency: {warm} updates to warm up, then {n} measured, at {args.rate}/s", flush=True)
                begin = time.time()
                for i in range(warm + n):
                    if (wait := begin + i / args.rate - time.time()) > 0:
                        time.sleep(wait)
                    number = f"B-{i}"
                    conn.execute(f"UPDATE {s}.directory_telephone SET phone_number = %s WHERE person_id = %s "
                                 "AND tele_type = %s", (number, *keys[i % len(keys)]))  # fmt: skip
                    committed[number] = time.time()
                deadline = time.time() + 120
                while time.time() < deadline and not all(len(seen[x]) >= len(committed) for x in seen):
                    time.sleep(0.5)
            stop.set()
            warming = {k: committed.pop(k) for k in [f"B-{i}" for i in range(warm)]}
            for who in ("peer", "mcq"):
                lat = [seen[who][k] - t for k, t in warming.items() if k in seen[who]]
                warm_rows.append(f"{who} p99 {percentile(lat, 99):.2f} s (max {max(lat or [0]):.2f} s)")
            stages = [("raw", tap.seen["raw"]), ("logical", tap.seen["logical"]), ("row", seen["mcq"])]
            hops = hop_rows(committed, stages)
            if args.dump:
                args.dump.write_text(json.dumps({"committed": committed, **dict(stages)}))
            for who in ("peer", "mcq"):
                lat = [seen[who][k] - t for k, t in committed.items() if k in seen[who]]
                rows.append(f"| commit -> row in the target at {args.rate}/s, {who} | {len(lat):,} of {n:,} | "
                            f"p50 {percentile(lat, 50):.2f} s | "
                            f"p99 {percentile(lat, 99):.2f} s (max {max(lat or [0]):.2f} s) |")  # fmt: skip
                print(rows[-1], flush=True)
            # 3. throughput, both warm: --bursts transactions, each updating every row
            hop_topics = {"raw": raw, "logical": telephone[0]}
            rows.append(burst(settings, s, peer_table, mirror_table, expected, args.bursts, hop_topics))
            print(rows[-1], flush=True)
            # 4. draining a backlog, each consumer alone
            if args.drain_bursts:
                mirrors = [mirror]

                def restart_mirror() -> None:
                    mirrors[:] = [listen("Mirror") for _ in range(args.listeners)]

                rows.append(
                    drain(
                        settings, connect, connector, s, (peer_table, mirror_table), expected, args.drain_bursts,
                        hop_topics, stop_mirror=lambda: stop_procs(mirrors), start_mirror=restart_mirror,
                        instances=args.listeners,
                    )
                )  # fmt: skip
                print(rows[-1], flush=True)
        finally:
            connect.delete(connector)
            stop_procs(procs)
            with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS p_{token} CASCADE")
                conn.execute(f"DROP SCHEMA IF EXISTS b_{token} CASCADE")
    print(
        f"\n{args.people:,} people, {os.cpu_count()} cores, the whole local stack on the same machine; the raw "
        f"telephone topic in {args.raw_partitions} partition(s), the peer with as many tasks\n"
    )
    print("| measurement | size | Debezium JDBC sink 3.4.0.Final | mcq (real time + `table`) |")
    print("|---|---|---|---|")
    load = [c.strip(" |") for c in rows[0].split(" | ")]
    print(f"| initial load, start-up included (mcq: the normaliser's start too) | {load[1]} | {load[2][5:]} | "
          f"{load[3][4:]} |")  # fmt: skip
    new = [c.strip(" |") for c in rows[1].split(" | ")]
    print(f"| a new target on the running pipeline (peer: a new connector; mcq: a new listener) | {new[1]} | "
          f"{load[2][5:]} | {new[3][4:]} |")  # fmt: skip
    peer, ours = ([c.strip(" |") for c in row.split(" | ")] for row in rows[2:4])
    print(f"| commit -> row in the target at {args.rate}/s ({peer[1]} / {ours[1]} arrived) | {n:,} updates | "
          f"{peer[2]}, {peer[3]} | {ours[2]}, {ours[3]} |")  # fmt: skip
    for row in rows[4:]:
        print(row)
    if warm_rows:
        print(
            f"\nThe {args.warmup:g} s of updates at {args.rate}/s before the measured ones (the normaliser "
            f"started a minute before; not in the figures above): {', '.join(warm_rows)}."
        )
    print("\nmcq's samples hop by hop (a tap reading the raw and logical topics; row: the 50 ms poller):\n")
    for row in hops:
        print(row)
    return 0


def stop_procs(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process still running, then wait for it (kill after 60 s)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def commit_bursts(settings: Settings, schema: str, mark: str, bursts: int) -> None:
    """``bursts`` transactions, one after the other, each giving every telephone row the
    number ``<mark><burst>-<person>-<type>`` (so the last burst's values can be counted)."""
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        for r in range(1, bursts + 1):
            conn.execute(
                f"UPDATE {schema}.directory_telephone SET phone_number = '{mark}{r}-' || person_id || '-' || tele_type"
            )


def burst(
    settings: Settings, schema: str, peer_table: str, mirror_table: str, rows: int, bursts: int, hops: dict[str, str]
) -> str:
    """Commit ``bursts`` transactions that each update all ``rows`` telephone rows, one after
    the other, and time until each target holds every row's value of the last one (and
    until each topic of ``hops``, name -> topic, has every change)."""
    last = f"C{bursts}-%%"
    queries = {
        "peer": f"SELECT count(*) FROM {peer_table} WHERE phone_number LIKE '{last}'",
        "mcq": f"SELECT count(*) FROM {mirror_table} WHERE state->>'phone_number' LIKE '{last}'",
    }
    done: dict[str, float] = {}
    n = rows * bursts
    before = {name: raw_rows(settings, [topic]) for name, topic in hops.items()}
    print(f"throughput: {bursts} transaction(s) of {rows:,} updates each", flush=True)
    begin = time.monotonic()
    commit_bursts(settings, schema, "C", bursts)
    committed = time.monotonic() - begin
    with psycopg.connect(settings.vendor.dsn(), autocommit=True) as db:
        while len(done) < len(queries) + len(hops) and time.monotonic() - begin < 900:
            for name, topic in hops.items():
                if name not in done and raw_rows(settings, [topic]) - before[name] >= n:
                    done[name] = time.monotonic() - begin
                    print(f"  {name} topic: all {n:,} changes in {done[name]:.1f} s", flush=True)
            for who, query in queries.items():
                if who not in done and int(db.execute(query).fetchone()[0]) >= rows:  # type: ignore[index]
                    done[who] = time.monotonic() - begin
                    print(f"  {who}: all {rows * bursts:,} changes in {done[who]:.1f} s", flush=True)
            time.sleep(0.1)

    def cell(who: str) -> str:
        return f"{who} {done[who]:.1f} s, {n / done[who]:,.0f} changes/s" if who in done else f"{who}: not done"

    reached = ", ".join(f"{name} topic {done[name]:.1f} s" for name in hops if name in done)
    return (
        f"| throughput, both warm: {bursts} transactions each updating every row (committed in {committed:.1f} s; "
        f"every change in the {reached}) | "
        f"{n:,} changes | {cell('peer')} | {cell('mcq')} |"
    )


def drain(
    settings: Settings,
    connect: ConnectClient,
    connector: str,
    schema: str,
    tables: tuple[str, str],
    rows: int,
    bursts: int,
    hops: dict[str, str],
    stop_mirror: Callable[[], None],
    start_mirror: Callable[[], None],
    instances: int = 1,
) -> str:
    """The consumers' own throughput: with the peer paused and mcq's listener stopped, commit
    ``bursts`` transactions that each update all ``rows`` telephone rows; once each topic of
    ``hops`` holds every change, resume the peer and time it until its target holds every
    row's last value, then start the listener and time it the same way."""
    peer_table, mirror_table = tables
    last = f"D{bursts}-%%"
    n = rows * bursts
    connect.pause(connector)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = connect.status(connector) or {}
        states = [status.get("connector", {}).get("state")] + [t.get("state") for t in status.get("tasks", [])]
        if set(states) == {"PAUSED"}:
            break
        time.sleep(0.2)
    else:
        raise SystemExit(f"the peer connector {connector} is not PAUSED after 60 s: {states}")
    stop_mirror()
    before = {name: raw_rows(settings, [topic]) for name, topic in hops.items()}
    print(f"drain: {bursts} transaction(s) of {rows:,} updates each, both consumers stopped", flush=True)
    commit_bursts(settings, schema, "D", bursts)
    begin = time.monotonic()
    for name, topic in hops.items():
        while (have := raw_rows(settings, [topic]) - before[name]) < n:
            if time.monotonic() - begin > 900:
                raise SystemExit(f"the {name} topic holds {have:,} of {n:,} changes after 900 s")
            time.sleep(1)
        print(f"  {name} topic: all {n:,} changes {time.monotonic() - begin:.1f} s after the commits", flush=True)
    took: dict[str, float] = {}
    for who, table, column, start in (
        ("peer", peer_table, "phone_number", lambda: connect.resume(connector)),
        ("mcq", mirror_table, "state->>'phone_number'", start_mirror),
    ):
        query = f"SELECT count(*) FROM {table} WHERE {column} LIKE '{last}'"
        started = time.monotonic()
        start()
        took[who] = wait_loaded(settings, f"{who} draining", query, rows, started, 900)
    names = {"peer": "peer", "mcq": "mcq" if instances == 1 else f"mcq ({instances} listener instances)"}
    cells = [f"{names[who]} {took[who]:.1f} s, {n / took[who]:,.0f} changes/s" for who in ("peer", "mcq")]
    return (
        f"| draining a backlog, each alone: {bursts} transactions each updating every row, in the raw and the "
        f"logical topic before the peer is resumed / the listener started (start-up included) | "
        f"{n:,} changes | {cells[0]} | {cells[1]} |"
    )


if __name__ == "__main__":
    sys.exit(main())
