"""A listener's consumer group under rebalances it does not expect (issue 16, scenarios 1
and 2): an instance joining while another is inside a slow target call, and a target
that stays silent longer than the group's ``max.poll.interval.ms``.

The target is slowed or stopped for real: a lock on the target table held by the test,
and SIGSTOP of the PostgreSQL backend process serving the listener's connection. The
verifier: the target equals the changes' last states key by key, the group's committed
offsets never move backwards (sampled all along: no stale commit) and never pass what
the target holds while it holds nothing new (no commit before success), and the
instances keep running."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition

from consumers.runtime.heartbeat import read_beats
from mcq.change import Change
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import (
    World,
    expected_state,
    listen_process,
    make_world,
    produce,
    target_state,
    wait_for,
)
from tests.support.listeners import random_stream

# minutes of waiting inside slow targets: CI runs them when its time budget allows (make extended)
pytestmark = [pytest.mark.faults, pytest.mark.extended(minutes=3)]

TP = tuple[str, int]


class CommitWatch:
    """The listener group's committed offsets, read every 0.2 s in a thread."""

    def __init__(self, w: World) -> None:
        self._consumer = Consumer({**w.settings.kafka.client_config(), "group.id": w.topics.group})
        self._tps = [TopicPartition(w.phone_topic, p) for p in range(3)]
        self.samples: list[tuple[float, dict[TP, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commit-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            got = self._consumer.committed(self._tps, timeout=10)
            self.samples.append((time.monotonic(), {(t.topic, t.partition): t.offset for t in got if t.offset >= 0}))
            self._stop.wait(0.2)

    def latest(self) -> dict[TP, int]:
        return dict(self.samples[-1][1]) if self.samples else {}

    def since(self, t: float) -> list[dict[TP, int]]:
        return [s for at, s in self.samples if at >= t]

    def backwards(self) -> list[str]:
        """Every step back of a partition's committed offset (a stale commit)."""
        out: list[str] = []
        high: dict[TP, int] = {}
        for at, sample in self.samples:
            for tp, offset in sample.items():
                if offset < high.get(tp, -1):
                    out.append(f"{tp}: {high[tp]} -> {offset} at {at:.1f}")
                high[tp] = max(high.get(tp, -1), offset)
        return out

    @contextmanager
    def running(self) -> Iterator[CommitWatch]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(30)
            self._consumer.close()


def _ends(w: World) -> dict[TP, int]:
    consumer = Consumer({**w.settings.kafka.client_config(), "group.id": f"{w.topics.group}-ends"})
    try:
        return {
            (w.phone_topic, p): consumer.get_watermark_offsets(TopicPartition(w.phone_topic, p), timeout=10)[1]
            for p in range(3)
        }
    finally:
        consumer.close()


def _deliver(w: World, before: list[Change], changes: list[Change], what: str) -> None:
    """Produce ``changes`` and wait until the target holds the last states of all so far."""
    produce(w.settings, w.phone_topic, changes)
    wait_for(what, lambda: target_state(w.settings, w.table) == expected_state(before + changes), 120)


def _metric(log: Path, name: str) -> float:
    """A counter of the listener's /metrics (summed over its labels)."""
    match = re.search(r"health (http://[0-9.]+:\d+)", log.read_text())
    assert match, log.read_text()[-2000:]
    with urllib.request.urlopen(f"{match.group(1)}/metrics", timeout=10) as response:
        body = response.read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}{{[^}}]*}} ([0-9.e+]+)$", body, re.M))


def _stop_all(*procs: object) -> None:
    for p in procs:
        if p.poll() is None:  # type: ignore[attr-defined]
            p.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
            p.wait(60)  # type: ignore[attr-defined]


@pytest.mark.timeout(420)
def test_an_instance_joining_while_another_waits_inside_a_slow_target_call_loses_nothing_and_commits_nothing_stale(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path, statement_timeout_ms=180_000)
    first = random_stream(300, 120, seed=21)
    produce(w.settings, w.phone_topic, first)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a = listen_process(w, log=log_a)
    b = None
    try:
        wait_for("A to apply the first changes", lambda: target_state(w.settings, w.table) == expected_state(first))
        with CommitWatch(w).running() as watch:
            wait_for("A's commit", lambda: watch.latest() == _ends(w), 60)
            with psycopg.connect(settings.vendor.dsn()) as holder:
                holder.execute(f"LOCK TABLE {w.table} IN ACCESS EXCLUSIVE MODE")  # the slow target call
                second = random_stream(1_000, 300, seed=22)
                produce(w.settings, w.phone_topic, second)

                def a_waits() -> bool:  # (asked outside the holder's transaction: its view would not change)
                    with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
                        row = conn.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                            " AND wait_event_type = 'Lock'",
                            (f"mcq table {w.table}",),
                        ).fetchone()
                    return bool(row and row[0])

                wait_for("A to be inside its target call", a_waits, 60)
                before = watch.latest()
                b = listen_process(w, log=log_b)
                wait_for(
                    "B to join",
                    lambda: any(
                        x.alive() and x.pid == b.pid for x in read_beats(w.settings, w.topics.heartbeats, w.name)
                    ),
                    90,
                )
                joined = time.monotonic()
                time.sleep(8)  # B's rebalance waits for A, whose batch is not done
                assert all(s == before for s in watch.since(joined)), "a commit while A's batch was not applied"
                assert a_waits() and a.poll() is None
            # the lock is released (the holder's transaction ends): A's batch goes through

            def split() -> bool:
                beats = [x for x in read_beats(w.settings, w.topics.heartbeats, w.name) if x.alive()]
                return {x.pid for x in beats if x.partitions > 0} >= {a.pid, b.pid}

            wait_for("A and B to share the partitions", split, 120, 1)
            third = random_stream(1_000, 300, seed=23)
            _deliver(w, first + second, third, "the target to hold every change's last state")
            wait_for("the group to commit to the ends", lambda: watch.latest() == _ends(w), 60)
            assert a.poll() is None and b.poll() is None
            assert sum(_metric(log, "mcq_listener_removed_total") for log in (log_a, log_b)) == 0
            # B carries on alone from what the group committed: a commit past what A applied would show here
            _stop_all(a)
            fourth = random_stream(1_000, 300, seed=24)
            produce(w.settings, w.phone_topic, fourth)
            wait_for(
                "B alone to hold every change's last state",
                lambda: target_state(w.settings, w.table) == expected_state(first + second + third + fourth),
                120,
            )
            wait_for("the group to commit to the ends again", lambda: watch.latest() == _ends(w), 60)
        assert watch.backwards() == [], watch.backwards()
        assert b.poll() is None
    finally:
        _stop_all(a, *([b] if b else []))
    assert (a.returncode, b.returncode if b else 0) == (0, 0), log_a.read_text()[-3000:] + log_b.read_text()[-3000:]


@pytest.mark.timeout(420)
def test_a_target_silent_past_the_poll_interval_removes_the_instance_once_and_nothing_is_committed_before_it_answers(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    interval = 12
    w = make_world(settings, token, tmp_path, statement_timeout_ms=180_000,
                   delivery=f"      max_poll_interval_s: {interval}")  # fmt: skip
    first = random_stream(300, 100, seed=31)
    produce(w.settings, w.phone_topic, first)
    log = tmp_path / "listen.log"
    proc = listen_process(w, log=log)
    try:
        wait_for("the first changes", lambda: target_state(w.settings, w.table) == expected_state(first))
        with CommitWatch(w).running() as watch:
            wait_for("the first commit", lambda: watch.latest() == _ends(w), 60)
            before = watch.latest()
            with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (f"mcq table {w.table}",)
                ).fetchone()
            assert row is not None, "the listener's target connection"
            backend = int(row[0])
            os.kill(backend, signal.SIGSTOP)  # the target process stops answering
            stopped = time.monotonic()
            try:
                second = random_stream(500, 100, seed=32)
                produce(w.settings, w.phone_topic, second)
                time.sleep(interval * 2.5)  # past the poll interval and the session timeout
                assert all(s == before for s in watch.since(stopped)), "a commit before the target answered"
                assert proc.poll() is None
            finally:
                os.kill(backend, signal.SIGCONT)
            wait_for(
                "the target to hold the second changes",
                lambda: target_state(w.settings, w.table) == expected_state(first + second),
                120,
            )
            third = random_stream(500, 100, seed=33)
            _deliver(w, first + second, third, "the third changes")
            wait_for("the group to commit to the ends", lambda: watch.latest() == _ends(w), 60)
            time.sleep(interval)  # an eviction loop would show by now
        assert watch.backwards() == [], watch.backwards()
        text = log.read_text()
        assert text.count("the group removed this instance") == 1, text[-3000:]
        assert _metric(log, "mcq_listener_removed_total") == 1
        assert proc.poll() is None
    finally:
        _stop_all(proc)
    assert proc.returncode == 0, log.read_text()[-3000:]
