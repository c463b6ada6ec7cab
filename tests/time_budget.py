"""A pytest plugin (loaded by ``tests/conftest.py``): under CI's time budget, a scenario of
the suites starts only while it can end before the deadline.

``.ci/run`` sets ``MCQ_TEST_DEADLINE`` (epoch seconds) and CI ends a run at its own limit,
landing nothing. On 2026-12-05 CI's run on this machine was 1.6 times slower than the day's
others in ``make test`` and three to five times in ``make suites`` (after it, a first touch of
a page of memory measured 16 us here), and the limit ended it mid-``suites``. So a scenario
of the suites (``make suites``, then ``make extended``) starts only while the minutes left
are at least what it may take; otherwise it is skipped, saying so and which ``make`` target
runs it. What it may take is its marker's ``minutes=N`` (``extended(minutes=N)``; 10 for an
``extended`` one that does not say), else ``SUITE_SCENARIO_MINUTES``. The tests of ``make
test`` always run; without ``MCQ_TEST_DEADLINE`` every scenario runs.
"""

from __future__ import annotations

import os
import time

import pytest

SUITES = ("package", "cluster", "long", "faults", "scale", "extended")
"""The markers of the tiers CI runs after ``make test``."""
SUITE_SCENARIO_MINUTES = 8.0
"""What a scenario of the suites may take when its marker does not say: most take one to
three minutes on two cores; on the slowed machine of 2026-12-05 one took 11 (pytest-timeout's
600 s and the hang guard's grace end any one within 12)."""
EXTENDED_MINUTES = 10.0


def budget(item: pytest.Item) -> tuple[float, str] | None:
    """How many minutes ITEM may take and the ``make`` target that runs it, if it is a
    scenario of the suites; else None."""
    tiers = [marker for marker in item.iter_markers() if marker.name in SUITES]
    if not tiers:
        return None
    extended = item.get_closest_marker("extended") is not None
    tier = "extended" if extended else tiers[0].name
    said = next((marker.kwargs["minutes"] for marker in tiers if "minutes" in marker.kwargs), None)
    if said is not None:
        return float(said), tier
    return (EXTENDED_MINUTES if extended else SUITE_SCENARIO_MINUTES), tier


def pytest_runtest_setup(item: pytest.Item) -> None:
    deadline = os.environ.get("MCQ_TEST_DEADLINE")
    scenario = budget(item)
    if not deadline or scenario is None:
        return
    need, tier = scenario
    left = (float(deadline) - time.time()) / 60
    if left < need:
        pytest.skip(
            f"CI's time budget: {max(left, 0):.0f} min left before its deadline, this scenario may take "
            f"{need:.0f} (make {tier} runs it)"
        )
