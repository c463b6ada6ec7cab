"""A listener draining a backlog of its real-time topic: wall time and the listener's own CPU
per change.

Method: a listener with the built-in ``table`` adapter (PostgreSQL on the local stack) and a
real-time topic holding ``--updates`` rounds of changes to each of ``--keys`` keys, written
while no listener runs (the first round inserts, the others update; each round is written
whole before the next, as ``bench.peer_jdbc_sink``'s drain bursts are). Then ``mcq listen T
--until-caught-up`` runs as its own process, start to exit, and its CPU time is read from
the kernel when it exits (user + system, the listener's process alone: not PostgreSQL's,
not the broker's). The CPU per change is the figure this machine's neighbours move least:
``bench.peer_jdbc_sink``'s drain (wall time, everything on the same 2 cores) varied by a
quarter between two runs of the same code. The target is checked afterwards: every key at
its last round's value.

    .venv/bin/python -m bench.listener_drain --keys 10000 --updates 10 --runs 2

Needs the local stack up (``mcq stack up``). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from bench.table import print_table
from mcq.config import load_settings
from mcq.testing.listeners import change, listen_process, make_world, produce


def _run(keys: int, updates: int) -> tuple[int, float, float]:
    """(changes drained, wall s, CPU s) of one listener over a world of its own."""
    settings = load_settings()
    w = make_world(settings, uuid.uuid4().hex[:10], Path(tempfile.mkdtemp()))
    backlog = [
        change("PHONE", 40_000_000 + k, f"u{u}-{k}", "INSERT" if u == 0 else "UPDATE")
        for u in range(updates)
        for k in range(keys)
    ]
    print(f"  writing {len(backlog):,} changes of {keys:,} keys to {w.phone_topic} ...", flush=True)
    produce(w.settings, w.phone_topic, backlog)
    log = w.registry_file.parent / "listener.log"
    started = time.monotonic()
    proc = listen_process(w, "--until-caught-up", log=log)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"mcq listen exited {os.waitstatus_to_exitcode(status)}: see {log}")
    with psycopg.connect(settings.vendor.dsn()) as conn:
        last = f"u{updates - 1}-%"
        row = conn.execute(f"SELECT count(*) FROM {w.table} WHERE state->>'phone' LIKE %s", (last,)).fetchone()
    if row is None or row[0] != keys:
        raise SystemExit(f"{w.table}: {row[0] if row else 0:,} of {keys:,} keys at their last value: see {log}")
    return len(backlog), wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--updates", type=int, default=10, help="changes per key (the first an insert)")
    ap.add_argument("--runs", type=int, default=2, help="drains, each over a world of its own")
    args = ap.parse_args()
    rows = []
    for run in range(1, args.runs + 1):
        n, wall, cpu = _run(args.keys, args.updates)
        rows.append(
            f"| {run} | {n:,} | {wall:.1f} s | {n / wall:,.0f} changes/s | {cpu:.1f} s | {cpu / n * 1e6:.0f} µs |"
        )
        print(rows[-1], flush=True)
    print_table(
        f"A `table` listener draining {args.keys:,} keys x {args.updates} changes, `mcq listen --until-caught-up` "
        "start to exit (its process's CPU: user + system)",
        ["run", "changes", "wall time", "rate", "listener CPU", "CPU per change"],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
