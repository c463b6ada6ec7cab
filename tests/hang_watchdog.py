"""A process of its own that writes a hung test session's native stacks (``py-spy dump
--native``) before ``tests/hang_guard.py`` ends the session.

faulthandler shows Python frames only. A thread stuck inside C (librdkafka, libpq) while
another waits for the GIL shows as two harmless-looking frames; py-spy shows which thread
holds the GIL and the C frames below each. It runs outside the session's process, so a
GIL that is never released cannot stop it.

Usage: ``python tests/hang_watchdog.py PID``; standard input takes lines ``arm SECONDS``
(dump PID's stacks once, SECONDS from now, unless told otherwise first) and ``disarm``;
end of input ends it. The dump goes to standard output.
"""

from __future__ import annotations

import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

DUMP_TIMEOUT_S = 60


def py_spy() -> str | None:
    """py-spy of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def dump(pid: int) -> None:
    exe = py_spy()
    out = sys.stdout
    if exe is None:
        out.write(f"hang watchdog: py-spy is not installed: no native stacks of process {pid}\n")
        out.flush()
        return
    out.write(f"hang watchdog: native stacks of process {pid} (py-spy dump --native):\n")
    out.flush()
    try:
        subprocess.run([exe, "dump", "--native", "--pid", str(pid)], stdout=out, stderr=out, timeout=DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out.write(f"hang watchdog: py-spy gave no dump within {DUMP_TIMEOUT_S} s\n")
    out.flush()


def watch(pid: int) -> None:
    deadline: float | None = None
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([sys.stdin], [], [], wait)
        if ready:
            line = sys.stdin.readline()
            if not line:
                return
            word, _, value = line.strip().partition(" ")
            deadline = time.monotonic() + float(value) if word == "arm" else None
        elif deadline is not None:
            deadline = None
            dump(pid)


if __name__ == "__main__":
    # the end of its input ends it: a signal meant for the session's process group (Ctrl-C, a
    # stray SIGTERM to the group) is the session's to handle
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    watch(int(sys.argv[1]))
