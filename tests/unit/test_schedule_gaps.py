"""A scheduled listener's longest gap between two runs: what its topics' deletes are kept
for (twice it). Checked against every run of a year, counted here apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from croniter import croniter

from mcq.registry.schedules import schedule_gap_s


def _gap_over(schedule: str, days: int) -> float:
    """Every run of ``days`` days walked, the longest gap between two."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    runs = croniter(schedule, start)
    at = [runs.get_next(datetime)]
    while at[-1] < start + timedelta(days=days):
        at.append(runs.get_next(datetime))
    return max((b - a).total_seconds() for a, b in pairwise(at))


@pytest.mark.parametrize(
    "schedule",
    [
        "0 2 * * *",  # nightly
        "*/30 * * * *",
        "15 6,18 * * *",  # twice a day, unevenly
        "0 * * * 1-5",  # hourly on weekdays: the weekend is the gap
        "*/30 8-17 * * mon-fri",
        "30 2 * * 0",  # weekly
        "0 0 1 * *",  # monthly
        "0 3 1,15 * *",
        "0 4 * 1,7 *",  # daily in January and July only
        "0 5 29 2 *",  # 29 February: not in 2026 or 2027
    ],
)
def test_the_longest_gap_is_the_longest_of_a_whole_years_runs(schedule: str) -> None:
    if schedule == "0 5 29 2 *":  # its runs are years apart: more than a year's span holds
        assert schedule_gap_s(schedule) > 365 * 86400
        return
    assert schedule_gap_s(schedule) == _gap_over(schedule, 400)


@pytest.mark.parametrize(
    ("schedule", "gap_s"),
    [
        ("* * * * 1-5", 2 * 86400 + 60),  # every minute on weekdays: Friday 23:59 to Monday 00:00
        ("*/10 * * * 0,3", 3 * 86400 + 600),  # Sunday and Wednesday: Wednesday 23:50 to Sunday 00:00
        ("0 9 * * 7", 7 * 86400),  # 7 is Sunday too
        ("30 * * * * 15", 3600),  # a seconds field
    ],
)
def test_a_schedule_that_runs_often_on_some_weekdays_has_the_weekend_as_its_gap(schedule: str, gap_s: float) -> None:
    assert schedule_gap_s(schedule) == gap_s
    assert _gap_over(schedule, 15) == gap_s  # what walking two weeks of its runs finds


def test_a_real_time_listener_has_no_gap() -> None:
    assert schedule_gap_s("realtime") == 0.0
