"""The normaliser's metrics, from Spark's progress of a query (streams/metrics.py)."""

from __future__ import annotations

from prometheus_client import generate_latest

from streams.metrics import NormalizeMetrics, behind

PROGRESS = {
    "name": "mcq-normalize-realtime mcq.raw.campus.campus.people",
    "batchId": 7,
    "numInputRows": 120,
    "sink": {"numOutputRows": 110},
    "durationMs": {"triggerExecution": 2500},
    "sources": [
        {
            "endOffset": '{"mcq.raw.campus.campus.people": {"0": 500, "1": 40}}',
            "latestOffset": {"mcq.raw.campus.campus.people": {"0": 530, "1": 40}},
        }
    ],
}


def _value(metrics: NormalizeMetrics, line_start: str) -> float:
    text = generate_latest(metrics.registry).decode()
    [line] = [x for x in text.splitlines() if x.startswith(line_start)]
    return float(line.rsplit(" ", 1)[1])


def test_behind_is_what_the_sources_hold_past_the_batchs_end_offsets() -> None:
    assert behind(PROGRESS) == 30
    assert behind({"sources": [{"endOffset": None, "latestOffset": None}]}) == 0


def test_each_batch_adds_its_rows_and_sets_when_it_finished_how_far_behind_and_how_long() -> None:
    metrics = NormalizeMetrics()
    metrics.observe(PROGRESS, now=1000.0)
    metrics.observe({**PROGRESS, "numInputRows": 5, "sink": {"numOutputRows": 4}}, now=1010.0)
    q = 'query="mcq-normalize-realtime mcq.raw.campus.campus.people"'
    assert _value(metrics, f'mcq_normalize_rows_total{{direction="in",{q}}}') == 125
    assert _value(metrics, f'mcq_normalize_rows_total{{direction="out",{q}}}') == 114
    assert _value(metrics, f"mcq_normalize_batches_total{{{q}}}") == 2
    assert _value(metrics, f"mcq_normalize_last_batch_timestamp_seconds{{{q}}}") == 1010.0
    assert _value(metrics, f"mcq_normalize_behind_records{{{q}}}") == 30
    assert _value(metrics, f"mcq_normalize_batch_seconds{{{q}}}") == 2.5


def test_a_progress_without_sink_or_sources_counts_what_it_has() -> None:
    metrics = NormalizeMetrics()
    metrics.observe({"name": "q", "numInputRows": 3})
    assert _value(metrics, 'mcq_normalize_rows_total{direction="in",query="q"}') == 3
    assert _value(metrics, 'mcq_normalize_rows_total{direction="out",query="q"}') == 0


def test_a_count_spark_does_not_know_is_not_counted() -> None:
    """Spark reports -1 output rows where it cannot count them (a foreachBatch sink)."""
    metrics = NormalizeMetrics()
    metrics.observe({**PROGRESS, "sink": {"numOutputRows": -1}})
    assert _value(metrics, 'mcq_normalize_rows_total{direction="out"') == 0
    assert _value(metrics, 'mcq_normalize_rows_total{direction="in"') == 120
