"""The pipeline under the failures of its own parts (issue 16, scenarios 3, 8 and 10):
while a workload writes to a user's table, Kafka Connect is SIGKILLed mid-stream, the
broker is SIGKILLed, and PostgreSQL — the source and the target's database, one
cluster — is SIGKILLed, each then started again as ``mcq stack up`` does. The normaliser
and the listener run as the processes a user runs, started once: each must recover by
itself. At the end the rule-filtered ``table`` target equals the source's last state,
read with SQL, key by key; the changes applied again after a fault (duplicates) are
counted from the listener's own metrics, and none was dead-lettered or parked for good."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import TopicPartition

from mcq.capture.apply import apply_capture
from mcq.capture.connector import OUTBOX_TABLE
from mcq.change import ChangeKey
from mcq.config import Settings
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from tests.integration.listeners import target_state
from tests.integration.worlds import uncapture, wait_slot_active

pytestmark = pytest.mark.faults

REGISTRY = """
sources:
  - {{name: {src}, schemas: [{schema}], slot: {slot}, publication: {slot}}}
tables:
  - tname: ACCOUNT
    feeds:
      - {{source: {src}, table: {schema}.accounts, keys: {{pkey_number: id}}, columns: [id, owner, status, quota]}}
listeners:
  - name: Active
    owner: chaos@example
    adapter: {{type: table, settings: {{table: {target}}}}}
interests:
  - {{listener: Active, tname: ACCOUNT, rule: "status = 'active'"}}
"""
STATUSES = ("active", "suspended", "closed")
ROWS = 300

# the test's own deadlines on two cores, and pytest's timeout made from their sum
START_S = 240  # capture, the normaliser's Spark start and first batch
FAULT_S = 3 * 200  # each fault: the kill, the service started again and healthy, a pause
CONVERGE_S = 420  # the target equal to the source once the workload stopped
TEARDOWN_S = 180


class Workload:
    """Random inserts, updates in and out of the rule, other-column updates and deletes,
    one per transaction, at a steady pace, in a thread; it rides through the source's
    restart (a change whose commit failed is simply not counted: the end state is read
    from the source, never from this count)."""

    def __init__(self, settings: Settings, schema: str, seed: int) -> None:
        self.settings, self.schema, self.rnd = settings, schema, random.Random(seed)
        self.committed = self.failures = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self.next_id = ROWS

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                with psycopg.connect(self.settings.source.dsn(), autocommit=True, connect_timeout=3) as conn:
                    while not self.stopping.is_set():
                        self._one(conn)
                        self.committed += 1
                        time.sleep(0.02)
            except psycopg.OperationalError:
                self.failures += 1
                time.sleep(0.5)

    def _one(self, conn: psycopg.Connection) -> None:  # type: ignore[type-arg]
        s, rnd = self.schema, self.rnd
        roll = rnd.random()
        pick = f"(SELECT id FROM {s}.accounts ORDER BY random() LIMIT 1)"
        if roll < 0.45:
            conn.execute(f"UPDATE {s}.accounts SET status = %s WHERE id = {pick}", (rnd.choice(STATUSES),))
        elif roll < 0.7:
            conn.execute(f"UPDATE {s}.accounts SET quota = %s WHERE id = {pick}", (rnd.randrange(1000),))
        elif roll < 0.82:
            conn.execute(f"DELETE FROM {s}.accounts WHERE id = {pick}")
        else:
            conn.execute(
                f"INSERT INTO {s}.accounts VALUES (%s, %s, %s, %s)",
                (self.next_id, f"owner{self.next_id}", rnd.choice(STATUSES), rnd.randrange(1000)),
            )
            self.next_id += 1

    @contextmanager
    def running(self) -> Iterator[Workload]:
        self.thread.start()
        try:
            yield self
        finally:
            self.stopping.set()
            self.thread.join(30)


def _source_view(settings: Settings, schema: str) -> dict[str, dict[str, str | None]]:
    """What the rule-filtered target must hold: the source's active rows, values as text."""
    with psycopg.connect(settings.source.dsn()) as conn:
        rows = conn.execute(
            f"SELECT id::text, owner, status, quota::text FROM {schema}.accounts WHERE status = 'active'"
        ).fetchall()
    return {
        ChangeKey("ACCOUNT", pkey_number=int(r[0])).text(): {"id": r[0], "owner": r[1], "status": r[2], "quota": r[3]}
        for r in rows
    }


def _kill_and_restart(stack: Stack, name: str, report: list[str]) -> None:
    svc = stack.service(name)
    pid = svc.handle.pid()
    assert pid is not None, f"{name} is not running"
    svc.handle.stop(signal.SIGKILL)
    time.sleep(3)  # down long enough for every client to notice
    started = time.monotonic()
    stack.up()
    report.append(f"{name} (pid {pid}) SIGKILLed, up again in {time.monotonic() - started:.1f} s")


def _where(settings: Settings, registry: Registry) -> str:
    """Where the changes stopped: the connector's state and each topic's end."""
    from confluent_kafka.admin import AdminClient

    from mcq.capture.connector import connector_name, raw_topic
    from mcq.connect_rest import ConnectClient
    from mcq.topics.read import all_watermarks

    source = registry.sources[0]
    with ConnectClient(settings.connect) as client:
        status = client.status(connector_name(source))
    admin = AdminClient(settings.kafka.client_config())
    topics = [raw_topic(source, f.table) for t in registry.tables for f in t.feeds] + [
        t.topic(settings.topic_prefix) for t in registry.tables
    ]
    meta = admin.list_topics(timeout=10).topics
    tps = [TopicPartition(t, p) for t in topics if t in meta for p in meta[t].partitions]
    return f"connector: {status}; topic ends: {all_watermarks(admin, tps)}"


def _metric(log: Path, outcome: str) -> float:
    """The listener's ``mcq_listener_changes_total{outcome=...}``, from its /metrics."""
    match = re.search(r"health (http://[0-9.]+:\d+)", log.read_text())
    assert match, log.read_text()[-2000:]
    with urllib.request.urlopen(f"{match.group(1)}/metrics", timeout=10) as response:
        body = response.read().decode()
    found = re.search(rf'mcq_listener_changes_total{{[^}}]*outcome="{outcome}"[^}}]*}} ([0-9.e+]+)', body)
    return float(found.group(1)) if found else 0.0


@pytest.mark.timeout(START_S + FAULT_S + CONVERGE_S + TEARDOWN_S + 120)
def test_the_pipeline_recovers_by_itself_from_killed_connect_broker_and_database(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex[:8]
    schema, src, slot = f"chaos_{token}", f"c{token}", f"mcq_c{token}"
    s = settings.model_copy(update={"topic_prefix": f"tc{token}"})
    target = f"chaos_{token}.active"
    text = REGISTRY.format(src=src, schema=schema, slot=slot, target=target)
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(text)
    registry = parse_registry(text, str(registry_file))
    rnd = random.Random(31)
    with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {OUTBOX_TABLE} WHERE tname = 'ACCOUNT' AND source IS NULL")
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.accounts (id int PRIMARY KEY, owner text, status text, quota int)")
        with conn.cursor().copy(f"COPY {schema}.accounts FROM STDIN") as copy:
            for i in range(ROWS):
                copy.write_row((i, f"owner{i}", rnd.choice(STATUSES), rnd.randrange(1000)))
    env = {**os.environ, "MCQ_TOPIC_PREFIX": s.topic_prefix}
    commands = {
        "normalize": ["streams", "normalize", "--registry", str(registry_file), "--checkpoint-interval", "10 seconds",
                      "--checkpoint", str(tmp_path / "ckpt")],
        "listen": ["listen", "Active", "--registry", str(registry_file), "--http-port", "0"],
    }  # fmt: skip
    logs = {name: tmp_path / f"{name}.log" for name in commands}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    faults: list[str] = []

    def assert_running() -> None:
        for name, proc in procs.items():
            assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{logs[name].read_text()[-4000:]}"

    try:
        apply_capture(registry, s, report=lambda _: None)
        wait_slot_active(s, slot)
        for name, args in commands.items():
            with logs[name].open("ab") as out:
                procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "mcq.cli", *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
        deadline = time.monotonic() + START_S
        while not target_state(s, target):  # the snapshot went all the way through
            assert_running()
            assert time.monotonic() < deadline, f"nothing reached {target} in {START_S} s"
            time.sleep(2)
        workload = Workload(s, schema, seed=41)
        with workload.running():
            for name in ("connect", "kafka", "postgres"):
                time.sleep(8)  # changes flowing before the fault
                _kill_and_restart(stack, name, faults)
                assert_running()
            time.sleep(8)  # and after the last one
        assert workload.committed > 300, (workload.committed, workload.failures)
        expected = _source_view(s, schema)
        deadline = time.monotonic() + CONVERGE_S
        while (got := target_state(s, target)) != expected:
            assert_running()
            if time.monotonic() > deadline:
                missing = expected.keys() - got.keys()
                extra = got.keys() - expected.keys()
                different = [k for k in expected.keys() & got.keys() if expected[k] != got[k]]
                raise AssertionError(
                    f"after {faults}: {len(missing)} missing, {len(extra)} extra, {len(different)} different, "
                    f"e.g. {sorted(missing)[:3]} {sorted(extra)[:3]} {different[:3]}\n{_where(s, registry)}\n"
                    + logs["listen"].read_text()[-3000:]
                )
            time.sleep(3)
        assert_running()
        assert _metric(logs["listen"], "dead_lettered") == 0, logs["listen"].read_text()[-3000:]
        print(
            f"chaos: {'; '.join(faults)}; {workload.committed} changes committed "
            f"({workload.failures} connection losses); target equal to the source ({len(expected)} rows); "
            f"listener applied {_metric(logs['listen'], 'applied'):.0f}, skipped as already applied "
            f"{_metric(logs['listen'], 'skipped'):.0f} (duplicates), retried {_metric(logs['listen'], 'failed'):.0f}"
        )
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        stack.up()  # whatever a failed restart left down, for the tests after this one
        uncapture(s, registry, schema)
        with psycopg.connect(s.vendor.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS chaos_{token} CASCADE")
