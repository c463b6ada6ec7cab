"""The session guard against a test stuck where its timeout cannot reach it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.hang_guard import __file__ as GUARD

ROOT = Path(GUARD).resolve().parents[1]

STUCK = """
import signal, time, pytest

@pytest.mark.timeout(1)
def test_stuck_in_a_call_that_never_returns_to_python():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # pytest-timeout's signal never lands
    time.sleep(120)

def test_never_reached():
    pass
"""


def _pytest(tmp_path: Path, test_file: str, grace_s: str, *options: str) -> subprocess.CompletedProcess[str]:
    """pytest in a child process with only the guard loaded (no project config) on one file."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.hang_guard",
         "--rootdir", str(tmp_path), "-c", os.devnull, *options, str(tmp_path / test_file)],
        cwd=tmp_path,
        env={**os.environ, "MCQ_TEST_HANG_GRACE_S": grace_s, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip


def test_a_test_stuck_past_its_timeout_ends_the_session_with_every_threads_traceback(tmp_path: Path) -> None:
    (tmp_path / "test_stuck.py").write_text(STUCK)
    run = _pytest(tmp_path, "test_stuck.py", "5")
    assert run.returncode == 1
    assert "Timeout (0:00:06)!" in run.stderr
    assert "test_stuck_in_a_call_that_never_returns_to_python" in run.stderr  # the stuck frame is named
    assert "passed" not in run.stdout  # the session ended there
    # before that, the watchdog process wrote the native stacks: the C call the test is stuck in
    native = run.stderr.split("hang watchdog: native stacks of process", 1)[-1]
    assert "time_sleep" in native, run.stderr


def test_a_test_that_ends_in_time_disarms_the_guard(tmp_path: Path) -> None:
    (tmp_path / "test_quick.py").write_text(
        "import time, pytest\n\n@pytest.mark.timeout(1)\ndef test_quick():\n    pass\n\n"
        "def test_slower_than_the_first_limit():\n    time.sleep(4)\n"
    )
    run = _pytest(tmp_path, "test_quick.py", "1", "-o", "timeout=0")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


def test_a_watchdog_that_ended_is_said_once_and_the_session_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_watchdog_gone.py").write_text(
        "import os, signal\nfrom tests.hang_guard import _WATCHDOG\n\n"
        "def test_ends_the_watchdog(request):\n"
        "    watchdog = request.config.stash[_WATCHDOG]\n"
        "    os.kill(watchdog.pid, signal.SIGKILL)\n    watchdog.wait(10)\n\n"
        "def test_after_it():\n    pass\n\ndef test_and_after_that():\n    pass\n"
    )
    run = _pytest(tmp_path, "test_watchdog_gone.py", "5", "-o", "timeout=30")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout and "INTERNALERROR" not in run.stdout + run.stderr
    assert run.stderr.count("hang guard: the watchdog process") == 1, run.stderr
    assert "ended (signal 9)" in run.stderr, run.stderr


def test_the_watchdog_outlives_a_sigterm_to_the_sessions_process_group(tmp_path: Path) -> None:
    (tmp_path / "test_group_term.py").write_text(
        "import os, signal, time\nfrom tests.hang_guard import _WATCHDOG\n\n"
        "def test_a_sigterm_to_the_group(request):\n"
        "    pid = request.config.stash[_WATCHDOG].pid\n"
        "    for _ in range(100):  # until its own start is done: its SIGTERM disposition is set\n"
        "        ignored = next(line for line in open(f'/proc/{pid}/status') if line.startswith('SigIgn:'))\n"
        "        if int(ignored.split()[1], 16) & (1 << (signal.SIGTERM - 1)):\n            break\n"
        "        time.sleep(0.1)\n"
        "    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the session itself outlives it\n"
        "    try:\n        os.killpg(0, signal.SIGTERM)\n    finally:\n"
        "        signal.signal(signal.SIGTERM, previous)\n"
        "    assert request.config.stash[_WATCHDOG].poll() is None\n\n"
        "def test_after_it():\n    pass\n"
    )
    run = subprocess.run(  # a process group of its own, so the SIGTERM reaches no one else
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.hang_guard",
         "--rootdir", str(tmp_path), "-c", os.devnull, "-o", "timeout=30", str(tmp_path / "test_group_term.py")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
        start_new_session=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout and "hang guard: the watchdog process" not in run.stderr, run.stderr
