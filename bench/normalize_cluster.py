"""The normaliser on the Spark standalone cluster beside ``local[*]``, on the same machine:
commit -> logical topic latency at steady rates (``bench.normalize_latency``) and the rate of
draining a raw backlog, start to exit (``bench.normalize_backlog``), each run once with the
default master and once with ``--master spark://127.0.0.1:27077`` (``mcq stack up --with
spark``: a master and two workers, executors in JVMs of their own).

    .venv/bin/python -m bench.normalize_cluster --rates 100,1000 --seconds 60 --people 20000

Needs the local stack up (``mcq stack up``; the cluster is started here when it is not).
Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys

from mcq.config import load_settings
from mcq.logs import quiet_libraries
from mcq.stack import Stack
from mcq.stack.services import GROUPS, SPARK, master_url

from .table import print_table


def _rows(module: str, args: list[str]) -> list[list[str]]:
    """The table rows (cells) a benchmark module prints last."""
    done = subprocess.run([sys.executable, "-m", f"bench.{module}", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    print(done.stdout[-3000:], flush=True)
    if done.returncode != 0:
        raise SystemExit(f"bench.{module} {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    lines = done.stdout.splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("|---"))
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[last + 1 :] if line.startswith("|")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="100,1000")
    ap.add_argument("--seconds", default="60")
    ap.add_argument("--people", default="20000", help="the backlog's world (~8.9 raw rows a person)")
    args = ap.parse_args()
    settings = load_settings()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the stack's lines as it starts
    quiet_libraries()
    Stack(settings, only=GROUPS[SPARK], with_=[SPARK]).up()
    cluster = master_url(settings)
    rows = []
    for name, master in (("local[*]", []), (f"standalone {cluster}", ["--master", cluster])):
        for cells in _rows("normalize_latency", ["--rates", args.rates, "--seconds", args.seconds, *master]):
            rate, _driven, changes, _raw, p50, p99, _max, missing, kept = cells
            rows.append(f"| {name} | commit -> logical at {rate}/s ({changes} changes) | p50 {p50} s, "
                        f"p99 {p99} s | missing {missing}, kept up: {kept} |")  # fmt: skip
        for cells in _rows("normalize_backlog", ["--people", args.people, *master]):
            what, read, written, wall, rate = cells
            rows.append(f"| {name} | backlog: {what} ({read}, {written} written) | {wall} | {rate} |")
    columns = ["master", "measurement", "figure", "rate / verdict"]
    print_table(f"the normaliser, {os.cpu_count()} cores, the whole local stack on the same machine", columns, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
