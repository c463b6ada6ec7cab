"""How long a normaliser start holds real-time changes: ``mcq streams normalize`` (real time,
its default mode) from process start to its first logical record.

Method: a captured campus world of its own (``--people``; 16 tables and the outbox, so 17
real-time queries), its connector's snapshot left to finish in the raw topics. Then
``--runs`` times: ``mcq streams normalize`` as its own process with a checkpoint of its
own (so it has every raw record to write), the logical topics' record count watched
every 0.25 s from the start of the process until it grows, then SIGTERM. Reported per
run: that time (what a change committed during a restart waits, at best), and the
runner's own figure for building and starting its queries. Every restart of a
normaliser pays this: a redeployed pod, a crash, a registry change.

    .venv/bin/python -m bench.normalize_start --runs 3

Needs the local stack up (``mcq stack up``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.testing.worlds import captured_world
from streams.plan import plan_normalize

from .listener_apply import raw_rows, wait_snapshot
from .table import print_table
from .world import bench_run

STARTED = re.compile(r"queries started in ([\d.]+) s")


def first_record(settings: Settings, logical: list[str], cmd: list[str], env: dict[str, str], log: Path,
                 timeout_s: float) -> tuple[float, float | None]:  # fmt: skip
    """Seconds from the process's start to the logical topics' first new record, and the
    runner's "queries started in" figure."""
    before = raw_rows(settings, logical)
    with log.open("w") as out:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            while raw_rows(settings, logical) <= before:
                if proc.poll() is not None:
                    raise SystemExit(f"the normaliser exited {proc.returncode} before its first record: see {log}")
                if time.monotonic() - started > timeout_s:
                    raise SystemExit(f"no logical record within {timeout_s:.0f} s: see {log}")
                time.sleep(0.25)
            seconds = time.monotonic() - started
            time.sleep(2)  # its "real time" line follows its queries' start
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
    found = STARTED.search(log.read_text())
    return seconds, float(found.group(1)) if found else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--people", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300, help="seconds one start may take")
    args = ap.parse_args(argv)
    run = bench_run()
    settings, env, work = run.settings, run.env, run.work
    rows: list[str] = []
    print(f"loading and capturing {args.people:,} people ...", flush=True)
    with captured_world(settings, people=args.people, seed=17) as world:
        registry_file = work / "registry.yaml"
        registry_file.write_text(world.registry_yaml)
        registry = parse_registry(registry_file.read_text(), str(registry_file))
        plan = plan_normalize(registry, settings.topic_prefix)
        wait_snapshot(settings, sorted({world.topic(f.table) for t in registry.tables for f in t.feeds}))
        times: list[float] = []
        for i in range(args.runs):
            cmd = [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--registry", str(registry_file),
                   "--checkpoint", str(work / f"ckpt{i}")]  # fmt: skip
            print(f"start {i + 1} of {args.runs} ...", flush=True)
            seconds, queries_s = first_record(
                settings, plan.logical_topics, cmd, env, work / f"normalize{i}.log", args.timeout
            )
            times.append(seconds)
            started = f"{queries_s:.1f} s" if queries_s is not None else "?"
            rows.append(f"| {i + 1} | {len(plan.raw_topics)} | {started} | {seconds:.1f} s |")
            print(rows[-1], flush=True)
        if len(times) > 1:
            rows.append(f"| mean | | | **{statistics.mean(times):.1f} s** |")
    caption = f"{args.people:,} people, {len(plan.raw_topics)} raw topics, the whole local stack on the same machine"
    print_table(caption, ["start", "real-time queries", "queries built and started", "to the first record"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
