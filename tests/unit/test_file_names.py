"""Batch file names of the ``file`` adapter sort in write order, whatever the clock does."""

from __future__ import annotations

from itertools import pairwise

from consumers.file.names import FileNamer


def test_names_sort_strictly_in_write_order_across_a_second_boundary() -> None:
    # many writes within one second, then the fraction wraps: 59.999999999 -> 00.000000001
    second = 1_706_745_599 * 10**9
    readings = [second + 999_999_000 + i for i in range(1000)] + [second + 10**9 + i for i in range(1000)]
    it = iter(readings)
    namer = FileNamer("BEST", clock_ns=lambda: next(it))
    names = [namer.next() for _ in readings]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert names[999].startswith("BEST-20240131T235959-999999999-")
    assert names[1000].startswith("BEST-20240201T000000-000000000-")


def test_names_keep_increasing_when_the_wall_clock_steps_back_or_stands_still() -> None:
    t = 1_706_745_600 * 10**9
    readings = [t, t, t - 5 * 10**9, t - 10**9 + 1, t, t + 1, t + 1, t - 1]
    it = iter(readings)
    namer = FileNamer("BEST", clock_ns=lambda: next(it))
    names = [namer.next() for _ in readings]
    assert all(a < b for a, b in pairwise(names)), names


def test_a_name_comes_from_one_clock_reading() -> None:
    calls = []

    def clock() -> int:
        calls.append(1)
        return 1_706_745_599_999_999_999

    assert FileNamer("X", clock_ns=clock).next() == "X-20240131T235959-999999999-000000000001"
    assert len(calls) == 1
