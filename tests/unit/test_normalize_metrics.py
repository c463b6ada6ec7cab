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


RT = "mcq-normalize-realtime "


def test_a_partition_is_as_far_behind_as_the_consumer_furthest_along_it() -> None:
    """Kafka tags a topic with its dots as underscores; an idle pooled consumer of an
    earlier batch (lower lead) does not speak for the partition."""
    samples = [
        ("mcq_raw_campus_people", 0, 1_000.0, 0.0),  # idle, caught up when it last fetched
        ("mcq_raw_campus_people", 0, 1_400.0, 600.0),  # the running task's
        ("mcq_raw_campus_people", 1, 50.0, 7.0),
        ("mcq_raw_other", 0, 10.0, 3.0),  # not a topic asked about
        ("mcq_raw_campus_rooms", 0, float("nan"), float("nan")),  # assigned, nothing fetched yet
    ]
    from streams.lag import furthest

    assert furthest(samples, ["mcq.raw.campus.people", "mcq.raw.campus.rooms"]) == {"mcq.raw.campus.people": 607}


def test_a_real_time_query_says_how_far_behind_its_consumers_are_now_not_at_its_last_batch() -> None:
    metrics = NormalizeMetrics()
    name = RT + "mcq.raw.campus.campus.people"
    metrics.observe({**PROGRESS, "name": name, "sources": []}, now=1.0)  # a real-time batch's end: 0
    metrics.note_runs([type("Q", (), {"name": name, "id": "i", "runId": "r"})()])
    lags = [("mcq_raw_campus_campus_people", 0, 900.0, 1_250.0)]
    metrics.watch_consumers(lambda: lags, RT)
    assert _value(metrics, f'mcq_normalize_behind_records{{query="{name}"}}') == 1_250
    assert metrics.behind_now(name, PROGRESS) == 1_250
    lags[0] = ("mcq_raw_campus_campus_people", 0, 2_150.0, 0.0)
    assert _value(metrics, f'mcq_normalize_behind_records{{query="{name}"}}') == 0


def test_without_its_consumers_a_query_keeps_its_progress_figure() -> None:
    """On a cluster (None: the executors' consumers are out of reach), or a JVM going away."""
    metrics = NormalizeMetrics()
    metrics.observe(PROGRESS)
    metrics.watch_consumers(lambda: None, RT)
    assert _value(metrics, "mcq_normalize_behind_records{") == 30

    def gone() -> None:
        raise ConnectionError("py4j: the gateway closed")

    metrics.watch_consumers(gone, RT)  # type: ignore[arg-type]
    assert _value(metrics, "mcq_normalize_behind_records{") == 30


def test_the_jvms_lines_are_read_as_samples_a_consumer_that_has_not_fetched_as_nan() -> None:
    from streams.lag import furthest, parse_samples

    samples = parse_samples("mcq_raw_a\t0\t12.0\t3.0\nmcq_raw_a\t1\tNaN\tNaN\n")
    assert samples[0] == ("mcq_raw_a", 0, 12.0, 3.0) and samples[1][:2] == ("mcq_raw_a", 1)
    assert furthest(samples, ["mcq.raw.a"]) == {"mcq.raw.a": 3}
    assert parse_samples("") == []
