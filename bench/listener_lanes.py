"""Listener runtime: real-time latency when idle and with a full bulk lane, and throughput.

Method: a listener with the built-in ``table`` adapter (PostgreSQL on the local stack)
runs in this process. (1) Idle: one real-time change at a time is produced to its
logical topic; latency = produce -> row visible in the target, over ``--samples``
changes. (2) Loaded: ``--bulk`` changes are put in its bulk lane first; once the bulk
lane is being applied, the same real-time measurement is repeated. (3) Throughput: the
bulk lane's rate of applied changes while nothing else happens, and the real-time lane's
rate for ``--burst`` changes produced at once.

    .venv/bin/python -m bench.listener_lanes --samples 30 --bulk 100000 --burst 20000

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

import psycopg

from mcq.config import load_settings
from mcq.contract import register_topic, registry_client
from mcq.testing.listeners import change, make_world, produce, running

from .stats import percentile


def _applied(settings, table: str, key: str) -> bool:  # type: ignore[no-untyped-def]
    with psycopg.connect(settings.vendor.dsn()) as conn:
        return conn.execute(f"SELECT 1 FROM {table} WHERE change_key = %s", (key,)).fetchone() is not None


def _latencies(w, samples: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for i in range(samples):
        c = change("PHONE", 10_000_000 + i + int(time.time() * 1000) % 1_000_000, f"rt-{i}")
        sent = time.monotonic()
        produce(w.settings, w.phone_topic, [c])
        while not _applied(w.settings, w.table, c.key.text()):
            time.sleep(0.005)
        out.append(time.monotonic() - sent)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--bulk", type=int, default=100_000)
    ap.add_argument("--burst", type=int, default=20_000)
    args = ap.parse_args()
    settings = load_settings()
    w = make_world(settings, uuid.uuid4().hex[:10], Path(tempfile.mkdtemp()))
    register_topic(registry_client(w.settings), w.topics.bulk)
    rows = []
    with running(w) as rt:
        time.sleep(5)  # joined both groups
        idle = _latencies(w, args.samples)
        rows.append(("real-time, idle", idle))
        produce(w.settings, w.topics.bulk, [change("PHONE", 20_000_000 + i, f"bulk-{i}", "INSERT") for i in
                                            range(args.bulk)])  # fmt: skip
        while rt.counters.bulk_applied == 0:
            time.sleep(0.05)
        loaded = _latencies(w, args.samples)
        depth = args.bulk - rt.counters.bulk_applied
        rows.append((f"real-time, bulk lane {depth:,} deep", loaded))
        start_count, start = rt.counters.bulk_applied, time.monotonic()
        while rt.counters.bulk_applied < args.bulk:
            time.sleep(0.2)
        bulk_rate = (rt.counters.bulk_applied - start_count) / (time.monotonic() - start)
        before, start = rt.counters.applied, time.monotonic()
        produce(w.settings, w.phone_topic, [change("PHONE", 30_000_000 + i, f"burst-{i}") for i in range(args.burst)])
        while rt.counters.applied < before + args.burst:
            time.sleep(0.1)
        burst_rate = args.burst / (time.monotonic() - start)
    print("| measurement | samples | p50 s | p99 s | max s | mean s |")
    print("|---|---|---|---|---|---|")
    for name, lat in rows:
        print(
            f"| {name} | {len(lat)} | {percentile(lat, 50):.3f} | {percentile(lat, 99):.3f} | {max(lat):.3f} | "
            f"{statistics.mean(lat):.3f} |"
        )
    print(
        f"\nbulk lane throughput: {bulk_rate:,.0f} changes/s; real-time burst of {args.burst:,} "
        f"(produce included): {burst_rate:,.0f} changes/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
