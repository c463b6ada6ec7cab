"""How long a running real-time normaliser's changes wait while a new instance takes
over from it (a deploy), and after a crash.

Method: a captured campus world of its own; ``mcq streams normalize`` (real time, its own
process) runs on a checkpoint. A driver commits one telephone-number update per
transaction at ``--rate`` throughout, and a consumer of the logical PERSON/Telephone
topic notes when each arrives (latency = arrival - commit). After ``--seconds`` of warm-up
and ``--seconds`` of steady state, a second ``mcq streams normalize`` of the same
checkpoint starts beside it (a phase of its own: two JVMs share the cores): it starts
Spark and its queries, held, then asks the first to hand over (``streams/handover.py``).
The hand-over begins at that ask. Then a third starts beside the second
as a standby (``--standby``: its queries held at the gate, it does not ask), and once it
stands by and the second has caught up with what the standby's start held back, the
second is killed (SIGKILL): the crash with a warm standby, which takes over
when it sees the process gone. Last, that one is killed and, 2 s later, a fourth starts
from the checkpoint: the crash with a cold start.

Targets: a change committed during the hand-over arrives no later than 1 s after the
ask plus its normal latency (the steady max); after a crash, none arrives later than
10 s after the kill (with a standby) or the new process's start (cold) plus its normal
latency.

    .venv/bin/python -m bench.normalize_handover --rate 50 --seconds 30

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

NEWS = ("held", "took over", "handed over", "real time, ", "standing by", "is gone")
"""What the instances' logs say of the hand-overs, printed after the table."""


def _when(path: Path, text: str, job: subprocess.Popen[bytes], deadline_s: float = 300) -> float:
    """When ``text`` first appeared in the log at ``path`` (polled every 50 ms)."""
    deadline = time.time() + deadline_s
    while text not in path.read_text():
        assert job.poll() is None and time.time() < deadline, path.read_text()[-3000:]
        time.sleep(0.05)
    return time.time()


def _caught_up(load: PhoneLoad, deadline_s: float) -> None:
    """Wait until every update committed 2 s ago or earlier has arrived."""
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        before = time.time() - 2
        if all(n in load.arrived for n, t in list(load.committed.items()) if t <= before):
            return
        time.sleep(0.5)


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
        checkpoint = f"/tmp/{settings.topic_prefix}-ckpt"
        command = [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--http-port", "0",
                   "--checkpoint", checkpoint, "--checkpoint-interval", "30 seconds"]  # fmt: skip
        logs = [Path(f"/tmp/{settings.topic_prefix}-normalize-{i}.log") for i in range(4)]
        jobs: list[subprocess.Popen[bytes]] = []

        def start(i: int, *more: str) -> float:
            jobs.append(
                subprocess.Popen([*command, *more], env=env, stdout=logs[i].open("wb"), stderr=subprocess.STDOUT)
            )
            return time.time()

        start(0)
        load = PhoneLoad(settings, world, args.rate)
        load.consume()
        try:
            _when(logs[0], "normalize: real time, ", jobs[0])  # queries started
            load.drive()
            time.sleep(args.seconds)  # warm-up: the JIT's first minute is not the steady state
            marks = [("steady (no hand-over)", time.time())]
            time.sleep(args.seconds)
            marks.append(("a second instance starting beside it (until its ask)", start(1)))
            asked = _when(logs[1], "asking it to hand over", jobs[1])
            marks.append(("planned hand-over (from the ask)", asked))
            _when(logs[1], "normalize: took over from ", jobs[1])
            time.sleep(args.seconds)
            marks.append(("a standby starting beside it (until it stands by)", start(2, "--standby")))
            _when(logs[2], "normalize: standing by for ", jobs[2])
            _when(logs[2], "held at the gate", jobs[2])
            marks.append(("standing by", time.time()))
            _caught_up(load, 180)  # what the standby's start on the same cores held back: a standby waits for hours
            time.sleep(args.seconds)
            jobs[1].kill()
            jobs[1].wait()  # gone, as a crashed pod's process is
            killed = time.time()
            marks.append(("crash with a standby: SIGKILL of the running one", killed))
            _when(logs[2], "normalize: real time, ", jobs[2])
            time.sleep(args.seconds)
            jobs[2].kill()
            jobs[2].wait()
            marks.append(("crash, cold: SIGKILL, a new process 2 s later", time.time()))
            time.sleep(2)
            restarted = start(3)
            _when(logs[3], "normalize: real time, ", jobs[3])
            time.sleep(args.seconds)
            marks.append(("end", time.time()))
            load.stop_driving()
            deadline = time.time() + 120  # the last updates' way through (a cold start's too)
            while time.time() < deadline and any(n not in load.arrived for n in list(load.committed)):
                time.sleep(0.5)
            steady_max = 0.0
            for (what, begun), (_, ended) in itertools.pairwise(marks):
                numbers, lat = load.latencies(begun, ended)
                missing = len(numbers) - len(lat)
                if what.startswith("steady"):
                    steady_max = max(lat)
                    verdict = ""
                elif what.startswith(("a second", "a standby", "standing")):  # two JVMs on the same cores
                    verdict = f"{max(lat) - steady_max:+.2f} s (reported)"
                elif what.startswith("planned"):  # arrived by the ask + 1 s + the normal latency
                    late = (
                        max(load.arrived[n] - max(load.committed[n], begun) for n in numbers if n in load.arrived)
                        - steady_max
                    )
                    verdict = f"{late:+.2f} s after the ask: {'met' if late <= 1.0 else 'not met'} (<= 1 s)"
                else:  # arrived by the kill (standby) or the new process's start + 10 s + the normal latency
                    since, what_since = (killed, "the kill") if "standby" in what else (restarted, "its start")
                    late = (
                        max(load.arrived[n] - max(load.committed[n], since) for n in numbers if n in load.arrived)
                        - steady_max
                    )
                    verdict = f"{late:+.2f} s after {what_since}: {'met' if late <= 10.0 else 'not met'} (<= 10 s)"
                if missing and verdict:
                    verdict = f"not met: {missing} not arrived 120 s after the load stopped"
                rows.append(f"| {what} | {len(numbers)} | {percentile(lat, 50):.2f} | {percentile(lat, 99):.2f} | "
                            f"{max(lat):.2f} | {missing} | {verdict} |")  # fmt: skip
                print(rows[-1], flush=True)
            for i, path in enumerate(logs):
                for line in path.read_text().splitlines():
                    if any(w in line for w in NEWS):
                        print(f"{i}: {line.split('normalize: ', 1)[-1][:240]}", flush=True)
        finally:
            load.stop()
            for job in jobs:
                job.terminate()
                job.wait(60)
    columns = ["phase (PERSON/Telephone updates)", "updates", "p50 s", "p99 s", "max s", "missing",
               "latest arrival beyond the steady max"]  # fmt: skip
    print_table(f"real time, {args.rate} telephone updates/s throughout, {os.cpu_count()} cores", columns, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
