"""What the normaliser runs in real time and what it keeps in ordered micro-batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcq.registry import parse_registry
from streams.plan import plan_normalize
from streams.realtime import batch_line, interval_ms, split_plan
from tests.support.registries import TWO_FEEDS

CAMPUS = Path(__file__).resolve().parents[2] / "examples" / "campus.yaml"


def test_a_registry_whose_keys_each_come_from_one_table_runs_wholly_in_real_time() -> None:
    plan = plan_normalize(parse_registry(CAMPUS.read_text(), str(CAMPUS)), "p")
    realtime, ordered = split_plan(plan)
    assert ordered is None
    assert realtime == plan


def test_a_logical_table_fed_by_two_raw_topics_is_ordered_in_micro_batches() -> None:
    plan = plan_normalize(parse_registry(TWO_FEEDS, "two.yaml"), "p")
    assert plan.shared_topics == {"p.contact"}
    realtime, ordered = split_plan(plan)
    assert ordered is not None
    assert {f.topic for f in ordered.feeds} == {"p.contact"}
    assert {f.raw_topic for f in ordered.feeds} == {"mcq.raw.db.s.phones", "mcq.raw.db.s.addresses"}
    assert not ordered.outbox_topics and not ordered.explicit_topics
    # everything else stays real time, the outbox and its explicit-only table included
    assert {f.topic for f in realtime.feeds} == {"p.person"}
    assert realtime.outbox_topics == plan.outbox_topics
    assert [t for _, _, t in realtime.explicit_topics] == ["p.note"]


def test_a_real_time_batch_line_gives_rows_in_and_records_out() -> None:
    line = batch_line(
        {
            "name": "mcq-normalize-realtime mcq.raw.db.s.people",
            "batchId": 3,
            "numInputRows": 120,
            "sink": {"numOutputRows": 131},
            "durationMs": {"triggerExecution": 60250, "queryPlanning": 410},
        },
        "60 seconds",
    )
    assert line == (
        "batch 3 of mcq.raw.db.s.people: in 120, out 131 (real time, checkpoint every 60 seconds), 60.2 s, "
        "planning 0.4 s"
    )


def test_a_checkpoint_interval_reads_as_spark_writes_it_and_nonsense_is_refused() -> None:
    assert interval_ms("5 minutes") == 300_000
    assert interval_ms("90 seconds") == 90_000
    assert interval_ms("1 hour") == 3_600_000
    assert interval_ms("250 ms") == 250
    for bad in ("soon", "0 seconds", "5 fortnights", "-1 minute"):
        with pytest.raises(ValueError, match="is not an interval"):
            interval_ms(bad)
