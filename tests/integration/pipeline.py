"""The pipeline world of the fault tests and the soak: a user's own table,
``<schema>.accounts (id, owner, status, quota)`` with PostgreSQL's defaults, loaded with
random rows, in a registry of its own that captures it as ACCOUNT and has one ``table``
listener; a workload writing to it; and the user's processes (``mcq streams normalize``,
``mcq listen``) run, killed and started again. The expected target state is read from
the source with SQL, never from mcq's code."""

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
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from mcq.capture.connector import OUTBOX_TABLE
from mcq.change import ChangeKey
from mcq.config import Settings
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from mcq.testing.worlds import uncapture

# the captured table (a format template: src, schema, slot), for registries of their own
SOURCE = """
sources:
  - {{name: {src}, schemas: [{schema}], slot: {slot}, publication: {slot}}}
tables:
  - tname: ACCOUNT
    feeds:
      - {{source: {src}, table: {schema}.accounts, keys: {{pkey_number: id}}, columns: [id, owner, status, quota]}}
"""
REGISTRY = (
    SOURCE
    + """listeners:
  - name: {listener}
    owner: tests@example
    adapter: {{type: table, settings: {{table: {target}}}}}
interests:
  - {{listener: {listener}, tname: ACCOUNT{rule}}}
"""
)
STATUSES = ("active", "suspended", "closed")


@dataclass(frozen=True)
class Accounts:
    settings: Settings  # with the world's own topic prefix
    schema: str
    slot: str
    target: str  # the listener's table, in the vendor database
    listener: str
    rule: str | None
    registry: Registry
    registry_file: Path

    @property
    def env(self) -> dict[str, str]:
        return {"MCQ_TOPIC_PREFIX": self.settings.topic_prefix}

    def source_view(self) -> dict[str, dict[str, str | None]]:
        """What the listener's target must hold: the source's rows (those its rule keeps), values as text."""
        where = f" WHERE {self.rule}" if self.rule else ""
        with psycopg.connect(self.settings.source.dsn()) as conn:
            rows = conn.execute(f"SELECT id::text, owner, status, quota::text FROM {self.schema}.accounts{where}")
            return {
                ChangeKey("ACCOUNT", pkey_number=int(r[0])).text(): {
                    "id": r[0], "owner": r[1], "status": r[2], "quota": r[3]
                }
                for r in rows.fetchall()
            }  # fmt: skip


@contextmanager
def accounts(
    settings: Settings, tmp_path: Path, tag: str, rows: int, *, seed: int, listener: str = "Active",
    rule: str | None = "status = 'active'", raw_partitions: int | None = None,
) -> Iterator[Accounts]:  # fmt: skip
    """The world, its capture removed and its schemas dropped afterwards (capture itself is
    the test's to start: some tests kill Connect while it snapshots). ``raw_partitions``:
    the feed's, for a raw topic of several partitions."""
    token = uuid.uuid4().hex[:8]
    schema, src, slot = f"{tag}_{token}", f"{tag[0]}{token}", f"mcq_{tag[0]}{token}"
    s = settings.model_copy(update={"topic_prefix": f"t{tag[0]}{token}"})
    target = f"{schema}.{listener.lower()}"
    text = REGISTRY.format(src=src, schema=schema, slot=slot, target=target, listener=listener,
                           rule=f', rule: "{rule}"' if rule else "")  # fmt: skip
    if raw_partitions is not None:
        text = text.replace("quota]}", f"quota], raw_partitions: {raw_partitions}}}", 1)
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(text)
    world = Accounts(s, schema, slot, target, listener, rule, parse_registry(text, str(registry_file)), registry_file)
    rnd = random.Random(seed)
    with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {OUTBOX_TABLE} WHERE tname = 'ACCOUNT' AND source IS NULL")
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.accounts (id int PRIMARY KEY, owner text, status text, quota int)")
        with conn.cursor().copy(f"COPY {schema}.accounts FROM STDIN") as copy:
            for i in range(rows):
                copy.write_row((i, f"owner{i}", rnd.choice(STATUSES), rnd.randrange(1000)))
    try:
        yield world
    finally:
        uncapture(s, world.registry, schema)
        with psycopg.connect(s.vendor.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


class Workload:
    """Random inserts, updates in and out of the rule, other-column updates and deletes,
    one per transaction, at a steady pace, in a thread; it rides through the source's
    restart (a change whose commit failed is simply not counted: the end state is read
    from the source, never from this count)."""

    def __init__(self, settings: Settings, schema: str, seed: int, next_id: int) -> None:
        self.settings, self.schema, self.rnd = settings, schema, random.Random(seed)
        self.committed = self.failures = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self.next_id = next_id

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
        pick = f"(SELECT id FROM {s}.accounts WHERE id >= 0 ORDER BY random() LIMIT 1)"  # (ids < 0: the soak's)
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


class Proc:
    """One of the user's processes (``mcq listen``, ``mcq streams normalize``) in a session
    of its own (the normaliser's Spark JVM is its child), logging to ``log``; restartable."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args, self.env, self.log = args, {**os.environ, **env}, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.counted: Counter[str] = Counter()  # a listener's counters of the incarnations killed

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "mcq.cli", *self.args], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def running(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, (
            f"mcq {self.args[0]} exited {self.proc.returncode if self.proc else None}:\n{self.log.read_text()[-4000:]}"
        )

    def metrics(self) -> Counter[str]:
        """A listener's ``mcq_listener_changes_total`` by outcome, from its /metrics (the
        health address its last incarnation printed)."""
        found = re.findall(r"health (http://[0-9.]+:\d+)", self.log.read_text())
        assert found, self.log.read_text()[-2000:]
        with urllib.request.urlopen(f"{found[-1]}/metrics", timeout=10) as response:
            body = response.read().decode()
        pattern = r'mcq_listener_changes_total{[^}]*outcome="(\w+)"[^}]*} (\S+)'
        return Counter({outcome: int(float(v)) for outcome, v in re.findall(pattern, body)})

    def kill(self, listener: bool = False) -> None:
        """SIGKILL (a listener's counters read first)."""
        assert self.proc is not None
        if listener:
            self.counted += self.metrics()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP to the process group (the normaliser's JVM with it) for the block's
        duration, as a node under pressure would stall it; SIGCONT after."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def start_pipeline(w: Accounts, procs: Iterable[Proc], timeout_s: float) -> None:
    """Capture the world, start the user's processes, and wait until its first rows reach
    the listener's target (:func:`wait_first_rows`)."""
    from mcq.capture.apply import apply_capture
    from mcq.testing.worlds import wait_slot_active

    apply_capture(w.registry, w.settings)
    wait_slot_active(w.settings, w.slot)
    procs = list(procs)
    for p in procs:
        p.start()
    wait_first_rows(w, procs, timeout_s)


def wait_first_rows(w: Accounts, procs: Iterable[Proc], timeout_s: float) -> None:
    """Until the listener's target holds rows (the snapshot went all the way through), the
    user's processes running all along."""
    from mcq.testing.listeners import target_state

    deadline = time.monotonic() + timeout_s
    while not target_state(w.settings, w.target):
        for p in procs:
            p.running()
        assert time.monotonic() < deadline, f"nothing reached {w.target} in {timeout_s:.0f} s"
        time.sleep(2)


def kill_and_restart(stack: Stack, name: str, report: list[str]) -> None:
    """SIGKILL a service of the stack, and start it again as ``mcq stack up`` does."""
    svc = stack.service(name)
    pid = svc.handle.pid()
    assert pid is not None, f"{name} is not running"
    svc.handle.stop(signal.SIGKILL)
    time.sleep(3)  # down long enough for every client to notice
    started = time.monotonic()
    stack.up()
    report.append(f"{name} (pid {pid}) SIGKILLed, up again in {time.monotonic() - started:.1f} s")
