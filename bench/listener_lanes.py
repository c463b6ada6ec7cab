"""Listener runtime: real-time latency when idle and with a full bulk lane, and throughput.

Method: a listener with the built-in ``table`` adapter (PostgreSQL on the local stack)
runs as ``mcq listen`` in a process of its own, as a deployment runs it
(``bench/listener_process.py``). (1) Idle: one real-time change at a time is produced to its
logical topic; latency = produce -> row visible in the target, over ``--samples``
changes. (2) Loaded: ``--bulk`` changes are put in its bulk lane while it is stopped (it
applies a lane about as fast as one producer fills it, so a lane filled while it ran was
dry before the samples); it starts again, and once the bulk lane is being applied the same
real-time measurement is repeated. The lane's depth is read before and after the samples
(a lane that ran dry during them is said). (3) Throughput: the bulk lane's rate from its
first commit until it is empty (the loaded samples, single changes, run beside it), and the
real-time lane's rate for ``--burst`` changes produced at once.

    .venv/bin/python -m bench.listener_lanes --samples 1000 --bulk 100000 --burst 20000

Needs the local stack up (``mcq stack up``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Producer

from mcq.change import POSITION_HEADER, ChangeCodec
from mcq.config import load_settings
from mcq.contract import register_topic, registry_client
from mcq.testing.listeners import change, make_world, produce

from .listener_process import bulk_pending, lane_rate, listener_process, pending, wait_bulk_started
from .stats import percentile


def _applied(conn: psycopg.Connection[Any], table: str, key: str) -> bool:
    try:
        return conn.execute(f"SELECT 1 FROM {table} WHERE change_key = %s", (key,)).fetchone() is not None
    except psycopg.errors.UndefinedTable:
        return False  # the listener creates its target table as it starts


POLL_S = 0.001
"""How often the target is looked at: the resolution of every latency figure. Every 5 ms
(until 2026-11-29) put an idle change's ~6 ms at 6 or 11 ms and nothing between, too coarse
to judge a loaded p99 against 1.5x the idle one; a look costs PostgreSQL ~0.1 ms."""


def _latencies(w, samples: int) -> list[float]:  # type: ignore[no-untyped-def]
    """``samples`` real-time changes one at a time: produced -> row visible in the target. One
    producer (no linger) and one database connection for all of them: a connection per look
    (every ``POLL_S``) had PostgreSQL fork a backend each time, on the cores the listener needs."""
    codec = ChangeCodec(registry_client(w.settings))
    producer = Producer({**w.settings.kafka.client_config(), "linger.ms": 0, "enable.idempotence": True})
    out = []
    with psycopg.connect(w.settings.vendor.dsn(), autocommit=True) as conn:
        for i in range(samples):
            c = change("PHONE", 10_000_000 + i + int(time.time() * 1000) % 1_000_000, f"rt-{i}")
            key, value = codec.encode(w.phone_topic, c)
            sent = time.monotonic()
            producer.produce(w.phone_topic, key=key, value=value, headers=[(POSITION_HEADER, str(c.position).encode())])
            producer.flush(30)
            while not _applied(conn, w.table, c.key.text()):
                time.sleep(POLL_S)
            out.append(time.monotonic() - sent)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # 1,000: the p99 of 30 samples is their maximum, and of 200 the second largest; at 1,000
    # it is the tenth (a sample takes ~5 ms, so the lane moves on for seconds, not minutes)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--bulk", type=int, default=100_000)
    ap.add_argument("--burst", type=int, default=20_000)
    args = ap.parse_args()
    settings = load_settings()
    w = make_world(settings, uuid.uuid4().hex[:10], Path(tempfile.mkdtemp()))
    register_topic(registry_client(w.settings), w.topics.bulk)
    rows = []
    logs = w.registry_file.parent
    with listener_process(w, logs / "listener-idle.log"):
        _latencies(w, 3)  # warm-up: the first change waits for the listener's start
        idle = _latencies(w, args.samples)
        rows.append(("real-time, idle", idle))
    # the bulk lane is filled while the listener is stopped, so that the loaded samples start
    # beside a full lane: produced while it ran, the lane was applied about as fast as it was
    # produced, and the samples came after it had run dry
    produce(w.settings, w.topics.bulk, [change("PHONE", 20_000_000 + i, f"bulk-{i}", "INSERT") for i in
                                        range(args.bulk)])  # fmt: skip
    with listener_process(w, logs / "listener-loaded.log"):
        wait_bulk_started(w, 0)
        _latencies(w, 1)  # the real-time lane's consumer has joined its group too
        depth_before, done_before = bulk_pending(w)
        lane_started = time.monotonic()
        loaded = _latencies(w, args.samples)
        depth_after, _ = bulk_pending(w)
        dry = " (it ran dry: a larger --bulk keeps it full)" if depth_after == 0 else ""
        rows.append((f"real-time, bulk lane {depth_before:,} -> {depth_after:,} deep{dry}", loaded))
        rate = lane_rate(w, done_before, lane_started)
        group, topics = w.topics.group, [w.phone_topic]
        start = time.monotonic()
        produce(w.settings, w.phone_topic, [change("PHONE", 30_000_000 + i, f"burst-{i}") for i in range(args.burst)])
        while pending(w, group, topics)[0] > 0:
            time.sleep(0.1)
        burst_rate = args.burst / (time.monotonic() - start)
    print("| measurement | samples | p50 s | p99 s | max s | mean s |")
    print("|---|---|---|---|---|---|")
    for name, lat in rows:
        print(
            f"| {name} | {len(lat)} | {percentile(lat, 50):.3f} | {percentile(lat, 99):.3f} | {max(lat):.3f} | "
            f"{statistics.mean(lat):.3f} |"
        )
    lane = f"{rate:,.0f} changes/s (from its first commit until empty, the loaded samples included)"
    print(
        f"\nbulk lane throughput: {lane}; real-time burst of {args.burst:,} (produce included): "
        f"{burst_rate:,.0f} changes/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
