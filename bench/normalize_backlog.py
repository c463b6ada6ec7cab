"""Normaliser throughput draining a raw backlog: ``mcq streams normalize --once`` over a
connector's whole initial snapshot.

Method: a captured campus world of its own (``--people``; about 8.9 raw rows per person
over 16 tables), its connector's snapshot left to finish in the raw topics, then
``mcq streams normalize --once`` as its own process. Reported: the raw rows, the
process's start to exit (Spark's start-up and planning included), and the batch's own
time from the normaliser's batch line (from reading the first raw record to the last
logical record acknowledged by Kafka). The logical topics' record count is checked
against the batch line's count: a figure of a run that lost records is not a figure.

    .venv/bin/python -m bench.normalize_backlog --people 112000   # ~1,000,000 raw rows

Needs the local stack up (``mcq stack up``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from mcq.registry import parse_registry
from mcq.testing.worlds import captured_world
from streams.plan import plan_normalize

from .listener_apply import raw_rows, wait_snapshot
from .memory import PeakRss
from .table import print_table
from .world import bench_run

BATCH = re.compile(r"batch (\d+): in (\d+), out (\d+) \(\+(\d+) tombstones, (\d+) refresh requests\).*?([\d.]+) s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--people", type=int, default=112_000, help="people in the world (~8.9 raw rows each)")
    ap.add_argument("--master", help="the normaliser's Spark master (default: local[*])")
    args = ap.parse_args(argv)
    run = bench_run()
    settings, env, work = run.settings, run.env, run.work
    rows: list[str] = []
    print(f"loading and capturing {args.people:,} people ...", flush=True)
    with captured_world(settings, people=args.people, seed=13, slot_timeout_s=1800) as world:
        registry_file = work / "registry.yaml"
        registry_file.write_text(world.registry_yaml)
        registry = parse_registry(registry_file.read_text(), str(registry_file))
        raw = sorted({world.topic(f.table) for t in registry.tables for f in t.feeds})
        n_raw = wait_snapshot(settings, raw)
        print(f"normalising {n_raw:,} raw rows ...", flush=True)
        started = time.monotonic()
        cmd = [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--registry", str(registry_file), "--once",
               "--checkpoint", str(work / "ckpt"), *(["--master", args.master] if args.master else [])]  # fmt: skip
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        batches: list[tuple[int, int, int, float]] = []
        with PeakRss(proc.pid) as peak:  # Python and Spark's JVM
            for line in proc.stdout:
                print(f"  {line}", end="", flush=True)
                found = BATCH.search(line)
                if found:
                    out = int(found.group(3)) + int(found.group(4)) + int(found.group(5))
                    batches.append((int(found.group(1)), int(found.group(2)), out, float(found.group(6))))
            proc.wait()
        if proc.returncode != 0:
            raise SystemExit(f"mcq streams normalize exited {proc.returncode}")
        seconds = time.monotonic() - started
        rows_in = sum(b[1] for b in batches)
        written = sum(b[2] for b in batches)
        plan = plan_normalize(registry, settings.topic_prefix)
        logical = raw_rows(settings, [*plan.logical_topics, plan.refresh_topic])
        n_raw = raw_rows(settings, plan.raw_topics)  # the feeds' and the outbox's
        if logical != written:
            raise SystemExit(f"the logical topics hold {logical:,} records, the batch lines say {written:,} written")
        if rows_in != n_raw:
            raise SystemExit(f"the batches read {rows_in:,} raw rows of the {n_raw:,} in the raw topics")
        batch_s = sum(b[3] for b in batches)
        rows.append(f"| batch time ({len(batches)} batch(es), from the batch lines) | {rows_in:,} raw rows | "
                    f"{written:,} | {batch_s:.1f} s | **{rows_in / batch_s:,.0f} rows/s** |")  # fmt: skip
        rows.append(f"| `mcq streams normalize --once`, start to exit | {rows_in:,} raw rows | {written:,} | "
                    f"{seconds:.1f} s | {rows_in / seconds:,.0f} rows/s |")  # fmt: skip
        rows.append(f"| the normaliser's peak resident memory (Python and Spark's JVM, sampled every 0.2 s) | "
                    f"{rows_in:,} raw rows | | {peak.mib:,.0f} MiB | |")  # fmt: skip
    caption = f"{args.people:,} people, {os.cpu_count()} cores, the whole local stack on the same machine"
    if args.master:
        caption += f", master {args.master}"
    print_table(caption, ["measurement", "read", "logical records written", "wall time", "rate"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
