"""Where a first real-time start begins after a micro-batch catch-up: read from the
catch-up's checkpoint (written here as Spark 4.1 writes it), and only before the
real-time queries ever planned a batch."""

from __future__ import annotations

import json
from pathlib import Path

from streams.catchup import committed_offsets, realtime_started, starting_offsets

META = '{"batchWatermarkMs":0,"batchTimestampMs":1795637550425,"conf":{}}'


def batch(location: Path, n: int, offsets: dict[str, dict[str, int]], committed: bool = True) -> None:
    (location / "offsets").mkdir(parents=True, exist_ok=True)
    (location / "commits").mkdir(parents=True, exist_ok=True)
    (location / "offsets" / str(n)).write_text(f"v1\n{META}\n{json.dumps(offsets)}")
    if committed:
        (location / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_hand_over_is_where_the_newest_committed_batch_ended(tmp_path: Path) -> None:
    batch(tmp_path, 0, {"raw.a": {"0": 10, "1": 4}, "raw.b": {"0": 7}})
    batch(tmp_path, 1, {"raw.a": {"0": 25, "1": 9}, "raw.b": {"0": 7}})
    batch(tmp_path, 2, {"raw.a": {"0": 40, "1": 9}, "raw.b": {"0": 8}}, committed=False)  # planned, not done
    assert committed_offsets(tmp_path) == {"raw.a": {"0": 25, "1": 9}, "raw.b": {"0": 7}}


def test_no_committed_batch_means_no_hand_over(tmp_path: Path) -> None:
    assert committed_offsets(tmp_path) is None
    batch(tmp_path, 0, {"raw.a": {"0": 10}}, committed=False)
    assert committed_offsets(tmp_path) is None


def test_a_real_time_query_starts_at_the_hand_over_for_its_own_topics_else_at_the_beginning() -> None:
    offsets = {"raw.a": {"0": 25, "1": 9}, "raw.b": {"0": 7}}
    assert json.loads(starting_offsets(offsets, ["raw.a"])) == {"raw.a": {"0": 25, "1": 9}}
    assert json.loads(starting_offsets(offsets, ["raw.a", "raw.b"])) == offsets  # the outbox query reads several
    assert starting_offsets(offsets, ["raw.c"]) == "earliest"  # a topic the catch-up did not read
    assert starting_offsets(None, ["raw.a"]) == "earliest"


def test_once_a_real_time_query_planned_a_batch_no_catch_up_runs_again(tmp_path: Path) -> None:
    assert not realtime_started(tmp_path)
    (tmp_path / "realtime" / "raw_a" / "offsets").mkdir(parents=True)
    assert not realtime_started(tmp_path)  # made, nothing planned yet
    (tmp_path / "realtime" / "raw_a" / "offsets" / "0").write_text("v1")
    assert realtime_started(tmp_path)
