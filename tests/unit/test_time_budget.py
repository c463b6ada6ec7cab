"""CI's time budget: a scenario of the suites starts only while it can end before the deadline."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.time_budget import __file__ as PLUGIN

ROOT = Path(PLUGIN).resolve().parents[1]

SCENARIOS = """
import pytest

def test_of_make_test():
    pass

@pytest.mark.faults
def test_a_fault_scenario_that_does_not_say():
    pass

@pytest.mark.long(minutes=2)
def test_a_long_one_of_two_minutes():
    pass

@pytest.mark.extended(minutes=2)
@pytest.mark.long
def test_an_extended_one_of_two_minutes():
    pass

@pytest.mark.extended
@pytest.mark.scale
def test_an_extended_one_that_does_not_say():
    pass
"""


def _pytest(tmp_path: Path, deadline: float | None) -> subprocess.CompletedProcess[str]:
    """pytest in a child process with only the plugin loaded (no project config)."""
    (tmp_path / "test_scenarios.py").write_text(SCENARIOS)
    env = {key: value for key, value in os.environ.items() if key != "MCQ_TEST_DEADLINE"}
    if deadline is not None:
        env["MCQ_TEST_DEADLINE"] = str(int(deadline))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "-p", "tests.time_budget",
         "-W", "ignore::pytest.PytestUnknownMarkWarning", "--rootdir", str(tmp_path), "-c", os.devnull,
         str(tmp_path / "test_scenarios.py")],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _outcomes(run: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {
        line.split("::", 1)[1].split()[0]: line.split()[1]
        for line in run.stdout.splitlines()
        if "::" in line and (" PASSED" in line or " SKIPPED" in line)
    }


def test_three_minutes_before_the_deadline_only_what_can_end_starts_and_the_rest_says_why(tmp_path: Path) -> None:
    run = _pytest(tmp_path, time.time() + 3 * 60 + 30)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _outcomes(run) == {
        "test_of_make_test": "PASSED",
        "test_a_fault_scenario_that_does_not_say": "SKIPPED",
        "test_a_long_one_of_two_minutes": "PASSED",
        "test_an_extended_one_of_two_minutes": "PASSED",
        "test_an_extended_one_that_does_not_say": "SKIPPED",
    }, run.stdout
    assert "3 min left before its deadline, this scenario may take 8 (make faults runs it)" in run.stdout
    assert "this scenario may take 10 (make extended runs it)" in run.stdout


def test_past_the_deadline_the_tests_of_make_test_still_run(tmp_path: Path) -> None:
    run = _pytest(tmp_path, time.time() - 60)
    assert _outcomes(run)["test_of_make_test"] == "PASSED", run.stdout
    assert list(_outcomes(run).values()).count("SKIPPED") == 4, run.stdout
    assert "0 min left before its deadline" in run.stdout


def test_without_a_deadline_every_scenario_runs(tmp_path: Path) -> None:
    run = _pytest(tmp_path, None)
    assert run.returncode == 0 and set(_outcomes(run).values()) == {"PASSED"}, run.stdout
    assert len(_outcomes(run)) == 5, run.stdout
