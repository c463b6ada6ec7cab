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


def test_a_test_stuck_past_its_timeout_ends_the_session_with_every_threads_traceback(tmp_path: Path) -> None:
    (tmp_path / "test_stuck.py").write_text(STUCK)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.hang_guard",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_stuck.py")],
        cwd=tmp_path,
        env={**os.environ, "MCQ_TEST_HANG_GRACE_S": "2", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert run.returncode == 1
    assert "Timeout (0:00:03)!" in run.stderr
    assert "test_stuck_in_a_call_that_never_returns_to_python" in run.stderr  # the stuck frame is named
    assert "passed" not in run.stdout  # the session ended there


def test_a_test_that_ends_in_time_disarms_the_guard(tmp_path: Path) -> None:
    (tmp_path / "test_quick.py").write_text(
        "import time, pytest\n\n@pytest.mark.timeout(1)\ndef test_quick():\n    pass\n\n"
        "def test_slower_than_the_first_limit():\n    time.sleep(4)\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.hang_guard",
         "--rootdir", str(tmp_path), "-c", os.devnull, "-o", "timeout=0", str(tmp_path / "test_quick.py")],
        cwd=tmp_path,
        env={**os.environ, "MCQ_TEST_HANG_GRACE_S": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
