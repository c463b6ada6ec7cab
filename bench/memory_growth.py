"""How memory grows with keys: a listener's process and the entity store, at three sizes.

Method: for each of ``--keys`` (e.g. 50,000, 100,000, 200,000): a listener world of its own
(the test registry's ``table`` target on the stack's PostgreSQL) whose topic holds that many
keys; ``mcq listen NAME --until-caught-up`` as its own process applies them all, its peak
resident memory sampled from /proc every 0.2 s (its state store and applied positions hold
every key at the end). The entity store: that many entities (orders, two items each) put
into an entity index in this process, traced with tracemalloc (``bench.entities``).
Growth is linear or better when the MiB each further key costs does not rise from one
size to the next (within 15 %: the sampling and the allocator's arenas).

    .venv/bin/python -m bench.memory_growth --keys 50000,100000,200000

Needs the local stack up (``mcq stack up``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from mcq.config import load_settings
from mcq.testing.listeners import make_world

from .batch_jobs import _produce
from .entities import memory as entity_memory
from .memory import PeakRss
from .table import print_table

TOLERANCE = 1.15


def _listener_peak(keys: int) -> float:
    """Peak resident MiB of ``mcq listen --until-caught-up`` applying ``keys`` keys."""
    settings = load_settings()
    w = make_world(settings, uuid.uuid4().hex[:10], Path(tempfile.mkdtemp()))
    _produce(w, keys)
    env = {**os.environ, "MCQ_TOPIC_PREFIX": w.settings.topic_prefix, "MCQ_HOME": str(w.settings.stack.home)}
    command = [sys.executable, "-m", "mcq.cli", "listen", w.name, "--registry", str(w.registry_file),
               "--until-caught-up", "--no-http"]  # fmt: skip
    with tempfile.TemporaryFile() as out:
        job = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        with PeakRss(job.pid) as peak:
            job.wait()
        if job.returncode != 0:
            out.seek(0)
            raise SystemExit(f"mcq listen exited {job.returncode}: {out.read().decode(errors='replace')[-3000:]}")
    return peak.mib


def _growth(what: str, sizes: list[int], mib: list[float]) -> list[str]:
    """A row per size: MiB, the MiB per 100,000 more keys since the size before; the verdict
    on the last: linear or better when that cost does not rise from one step to the next."""
    slopes = [(mib[i] - mib[i - 1]) / (sizes[i] - sizes[i - 1]) * 100_000 for i in range(1, len(sizes))]
    linear = all(b <= max(a, 0.0) * TOLERANCE + 1.0 for a, b in itertools.pairwise(slopes))
    rows = [[what, f"{n:,}", f"{m:,.0f}", f"{slopes[i - 1]:,.1f}" if i else "", ""] for i, (n, m) in
            enumerate(zip(sizes, mib, strict=True))]  # fmt: skip
    rows[-1][-1] = "linear or better: met" if linear else "grows faster than linearly: not met"
    return ["| " + " | ".join(r) + " |" for r in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", default="50000,100000,200000", help="sizes, comma separated, rising")
    args = ap.parse_args()
    sizes = [int(k) for k in args.keys.split(",")]
    listener = []
    for n in sizes:
        listener.append(_listener_peak(n))
        print(f"bench.memory_growth: mcq listen, {n:,} keys: peak {listener[-1]:,.0f} MiB", flush=True)
    entities = [int(entity_memory(n)[0][2]) for n in sizes]  # MiB traced
    rows = _growth("`mcq listen` (`table`), peak RSS of the process", sizes, listener)
    rows += _growth("entity store (orders with two items), traced", sizes, [float(e) for e in entities])
    columns = ["what", "keys / entities", "MiB", "MiB per 100,000 more", "growth"]
    print_table(f"memory by size, {os.cpu_count()} cores", columns, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
