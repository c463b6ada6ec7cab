"""``make bench`` / ``make bench-quick``: every benchmark in one run, its tables printed and
(full run only) written into BENCHMARKS.md between its markers.

Each benchmark is a module of ``bench/`` run as its own process (its progress lines
reach the terminal as they come); the Markdown table lines it prints (``| ... |``) are its
result. ``--quick`` runs reduced sizes (4.0-4.2 minutes here, against a 5-minute aim) and leaves BENCHMARKS.md
alone: its figures are for a quick look, not for the record. It leaves out the benchmarks
of ``QUICK_COVERS``, each a normaliser start of its own, and says where its other figures
show them.

    .venv/bin/python -m bench.run            # full: rewrites BENCHMARKS.md
    .venv/bin/python -m bench.run --quick    # reduced, prints only
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"

# name -> (full arguments, quick arguments; None: not run by --quick, see QUICK_COVERS)
SUITE: dict[str, tuple[list[str], list[str] | None]] = {
    "kafka_ceiling": (["--records", "1000000"], ["--records", "100000"]),
    "normalize_latency": (["--rates", "20,100,400,1000", "--seconds", "60"], None),
    "normalize_backlog": (["--people", "112000"], None),
    "normalize_start": (["--runs", "3"], None),
    "normalize_cluster": (["--rates", "100,1000", "--seconds", "60", "--people", "20000"], None),
    "normalize_replan": (["--rate", "50", "--seconds", "30"], None),
    "normalize_handover": (["--rate", "50", "--seconds", "30"], None),
    "listener_apply": (["--people", "10000", "--pending", "100"], ["--people", "1000", "--pending", "100"]),
    "listener_drain": (
        ["--keys", "10000", "--updates", "10", "--runs", "2"],
        ["--keys", "2000", "--updates", "5", "--runs", "1"],
    ),
    "peer_jdbc_sink": (
        # a minute of warm-up: a normaliser's JIT compiles for its first minutes (BENCHMARKS.md)
        ["--people", "5000", "--rate", "1000", "--seconds", "60", "--warmup", "60"],
        [
            "--people",
            "200",
            "--rate",
            "100",
            "--seconds",
            "10",
            "--warmup",
            "5",
            "--bursts",
            "2",
            "--drain-bursts",
            "4",
        ],
    ),
    "batch_jobs": (["--keys", "1000000", "--samples", "1000"], ["--keys", "20000", "--samples", "10"]),
    "entities": (
        ["--orders", "1000", "--rounds", "5", "--entities", "100000"],
        ["--orders", "1000", "--rounds", "2", "--entities", "20000"],
    ),
    "memory_growth": (["--keys", "50000,100000,200000"], None),
    "mapped_ldap": (["--people", "10000", "--ad"], ["--people", "1000", "--ad"]),
    "listener_lanes": (
        ["--samples", "1000", "--bulk", "100000", "--burst", "20000"],
        ["--samples", "10", "--bulk", "20000", "--burst", "2000"],
    ),
}

QUICK_COVERS = {
    "normalize_latency": "commit -> logical at 100/s: peer_jdbc_sink's hops (commit -> logical, whole)",
    "normalize_backlog": "a backlog: listener_apply's initial load (batch 0; --once start to exit)",
    "normalize_start": "a normaliser's start: peer_jdbc_sink's initial load of mcq, start-up included",
    "normalize_cluster": "the normaliser on a Spark cluster: tests/cluster runs it there (make cluster)",
    "normalize_replan": "a registry change while it runs: make long's test checks the untouched queries' runs",
    "normalize_handover": "a hand-over and a crash restart: make long's test checks the hand-over's correctness",
    "memory_growth": "memory: listener_apply's note gives each process's peak at one size",
}
"""What --quick leaves out, and where its figures show the same thing in a smaller way: each of
these starts a normaliser of its own (30-45 s of Spark start-up here), the quick run's largest cost."""


def versions() -> str:
    """What the figures were measured with: machine, Python packages, JVM services."""
    pom = ET.parse(ROOT / "jvm" / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = {el.tag.split("}")[-1]: el.text for el in pom.find("m:properties", ns) or []}
    return (
        f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"pyspark {version('pyspark')}, confluent-kafka {version('confluent-kafka')}, "
        f"Kafka {props.get('kafka.version')}, Debezium {props.get('debezium.version')}, "
        f"Apicurio {props.get('apicurio.version')}"
    )


def run_one(name: str, args: list[str]) -> tuple[list[str], float]:
    """Run ``bench.<name>``; its output shown as it comes; its table lines returned."""
    print(f"\n== bench.{name} {' '.join(args)}", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", f"bench.{name}", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # progress as it comes, not at exit
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        print(f"  {line}", end="", flush=True)
        lines.append(line.rstrip("\n"))
    if proc.wait() != 0:
        raise SystemExit(f"bench.{name} exited {proc.returncode}")
    # the summary table is printed last (progress lines may be rows too); notes may follow it
    separators = [i for i, line in enumerate(lines) if line.startswith("|---")]
    if not separators:
        raise SystemExit(f"bench.{name} printed no table")
    result = [line for line in lines[separators[-1] - 1 :] if line.strip()]
    rows = next((i for i, line in enumerate(result) if not line.startswith("|")), len(result))
    notes = ["", *result[rows:]] if rows < len(result) else []  # a blank line ends the table
    return result[:rows] + notes, time.monotonic() - started


def rewrite(name: str, block: str) -> None:
    """Replace what is between ``<!-- bench:name -->`` and ``<!-- /bench:name -->``."""
    text = BENCHMARKS.read_text()
    pattern = re.compile(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{BENCHMARKS}: no <!-- bench:{name} --> ... <!-- /bench:{name} --> markers")
    BENCHMARKS.write_text(pattern.sub(lambda m: m.group(1) + block + m.group(2), text))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="reduced sizes, BENCHMARKS.md left alone")
    ap.add_argument("--only", help="comma-separated benchmark names (default: all)")
    args = ap.parse_args(argv)
    chosen = args.only.split(",") if args.only else list(SUITE)
    unknown = sorted(set(chosen) - set(SUITE))
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(SUITE)}")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    about = versions()
    results: dict[str, tuple[list[str], float, list[str]]] = {}
    skipped: list[str] = []
    started = time.monotonic()
    for name in chosen:
        bench_args = SUITE[name][1 if args.quick else 0]
        if bench_args is None:
            skipped.append(name)
            continue
        table, seconds = run_one(name, bench_args)
        results[name] = (table, seconds, bench_args)
    took = time.monotonic() - started
    print(f"\n== results ({'quick' if args.quick else 'full'}, {stamp}, {took / 60:.1f} min; {about})")
    for name, (table, seconds, bench_args) in results.items():
        print(f"\n### bench.{name} ({seconds:.0f} s)\n")
        print("\n".join(table))
        if not args.quick:
            command = f"python -m bench.{name} {' '.join(repr(a) if ' ' in a else a for a in bench_args)}"
            rewrite(name, "\n".join(table) + f"\n\nMeasured {stamp} by `make bench` (`{command}`); {about}.\n")
    if skipped:
        print("\nnot run by --quick (each starts a normaliser of its own), and where the quick run shows it:")
        for name in skipped:
            print(f"- bench.{name}: {QUICK_COVERS[name]}")
    if not args.quick:
        print(f"\n{BENCHMARKS.name} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
