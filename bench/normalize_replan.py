"""How much a registry change delays the tables it does not touch, in a running real-time
normaliser.

Method: a captured campus world of its own; ``mcq streams normalize`` (real time, its own
process) follows the registry store, as a deployment runs it. A driver commits one
telephone-number update per transaction at ``--rate`` for the whole run, and a consumer of
the logical PERSON/Telephone topic notes when each arrives (latency = arrival - commit).
After ``--seconds`` of steady state, ``mcq registry apply`` is run three times, ``--seconds``
apart, each changing another table: the address feed's ``watch`` changed, the BUILDINGS
table removed, then added again. Per phase: the telephone updates committed from the apply
to ``--seconds`` after it, against the steady state before the first. Target: a change to
an untouched table is not delayed by more than 1 s (its max minus the steady max).

    .venv/bin/python -m bench.normalize_replan --rate 50 --seconds 30

Needs the local stack up (``mcq stack up``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from mcq.config import load_settings
from mcq.registry import parse_registry
from mcq.registry.store import RegistryStore
from mcq.testing.worlds import captured_world

from .phone_load import PhoneLoad
from .stats import percentile
from .table import print_table


def _phases(text: str) -> list[tuple[str, str]]:
    """(what changes, the registry's text after it), in order."""
    watched = text.replace(
        "watch: [street, city, state, postal_code, country]", "watch: [street, city, state, postal_code]", 1
    )
    cut = slice(watched.index("  - tname: BUILDINGS"), watched.index("  - tname: DEPARTMENT"))
    removed = (watched[: cut.start] + watched[cut.stop :]).replace(
        "  - {listener: CMMS, tname: BUILDINGS, subtype: null}\n", ""
    )
    return [
        ("a feed's watch changed (PERSON/Address)", watched),
        ("a table removed (BUILDINGS)", removed),
        ("a table added (BUILDINGS again)", watched),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=50, help="telephone updates per second, throughout")
    ap.add_argument("--seconds", type=float, default=30.0, help="the steady phase, and each change's phase")
    ap.add_argument("--people", type=int, default=500)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: the captured world is removed
    settings = load_settings().model_copy(update={"topic_prefix": f"bench{uuid.uuid4().hex[:6]}"})
    rows: list[str] = []
    with captured_world(settings, people=args.people) as world:
        store = RegistryStore(settings)
        store.apply(parse_registry(world.registry_yaml, "campus.yaml"))
        env = {**os.environ, "MCQ_TOPIC_PREFIX": settings.topic_prefix}
        log_path = Path(f"/tmp/{settings.topic_prefix}-normalize.log")
        job = subprocess.Popen(
            [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--http-port", "0",
             "--checkpoint", f"/tmp/{settings.topic_prefix}-ckpt"],
            env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        load = PhoneLoad(settings, world, args.rate)
        load.consume()
        try:
            deadline = time.time() + 300
            while "normalize: real time, " not in log_path.read_text() and time.time() < deadline:  # queries started
                assert job.poll() is None, log_path.read_text()[-3000:]
                time.sleep(0.5)
            load.drive()
            time.sleep(args.seconds)  # warm-up: the JIT's first minute is not the steady state
            marks = [("steady (no change)", time.time())]
            time.sleep(args.seconds)
            for what, text in _phases(world.registry_yaml):
                marks.append((what, time.time()))
                store.apply(parse_registry(text, "campus.yaml"))
                time.sleep(args.seconds)
            marks.append(("end", time.time()))
            load.stop_driving()
            time.sleep(10)  # the last updates' way through
            steady_max = 0.0
            for (what, begun), (_, ended) in itertools.pairwise(marks):
                numbers, lat = load.latencies(begun, ended)
                missing = len(numbers) - len(lat)
                if what.startswith("steady"):
                    steady_max = max(lat)
                delay = max(lat) - steady_max
                verdict = "" if what.startswith("steady") else f"{delay:+.2f} s: {'met' if delay <= 1.0 else 'not met'}"
                rows.append(f"| {what} | {len(numbers)} | {percentile(lat, 50):.2f} | {percentile(lat, 99):.2f} | "
                            f"{max(lat):.2f} | {missing} | {verdict} |")  # fmt: skip
                print(rows[-1], flush=True)
            restarted = [line for line in log_path.read_text().splitlines() if "restarting the queries of" in line]
            for line in restarted:
                print(line.split("normalize: ", 1)[-1][:240], flush=True)
        finally:
            load.stop()
            job.terminate()
            job.wait(60)
    columns = ["phase (untouched: PERSON/Telephone)", "updates", "p50 s", "p99 s", "max s", "missing",
               "max beyond steady (target <= 1 s)"]  # fmt: skip
    print_table(f"real time, {args.rate} telephone updates/s throughout, {os.cpu_count()} cores", columns, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
