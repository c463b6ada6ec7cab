"""The normaliser's Prometheus metrics, from Spark's progress of each query (what its
batch lines say), served with ``/livez`` and ``/readyz`` by ``mcq/health.py``:

* ``mcq_normalize_rows_total{query, direction}``: raw records read (``in``) and records
  written to the logical, refresh and withheld topics (``out``);
* ``mcq_normalize_batches_total{query}`` and
  ``mcq_normalize_last_batch_timestamp_seconds{query}``: a query that stopped making
  progress shows as a timestamp that no longer moves;
* ``mcq_normalize_behind_records{query}``: raw records not yet read: at a micro-batch
  query's batch end, from its progress; for a real-time query, at the scrape, from its
  Kafka consumers when they run in the driver (``streams/lag.py``: its progress comes once
  per checkpoint interval and cannot say);
* ``mcq_normalize_batch_seconds{query}``: the last batch's duration.

Pure bookkeeping over the progress JSON and what ``watch`` is given: no Spark here."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from streams.lag import Sample, furthest


def behind(progress: dict[str, Any]) -> int:
    """Raw records not yet read when the batch ended: each source's latest offsets minus
    its end offsets (a StreamingQueryProgress as JSON)."""
    out = 0
    for source in progress.get("sources", []):
        end, latest = source.get("endOffset"), source.get("latestOffset")
        if not end or not latest:
            continue
        end_d = json.loads(end) if isinstance(end, str) else end
        latest_d = json.loads(latest) if isinstance(latest, str) else latest
        for topic, parts in latest_d.items():
            for part, offset in parts.items():
                out += max(0, int(offset) - int(end_d.get(topic, {}).get(part, 0)))
    return out


class Behind(Collector):
    """``mcq_normalize_behind_records``: the last progress's figure per query, replaced at
    each read by the consumers' own where ``watch`` gave them."""

    def __init__(self) -> None:
        self.from_progress: dict[str, int] = {}
        self._samples: Callable[[], list[Sample] | None] | None = None
        self._prefix = ""
        self._names: Callable[[], set[str]] = set

    def watch(self, samples: Callable[[], list[Sample] | None], prefix: str, names: Callable[[], set[str]]) -> None:
        """Read the queries named ``prefix`` + raw topic (of ``names``) from ``samples``."""
        self._samples, self._prefix, self._names = samples, prefix, names

    def live(self, names: set[str] | None = None) -> dict[str, int]:
        """The watched queries' figures from their consumers (those of ``names``, else all)."""
        if self._samples is None:
            return {}
        names = self._names() if names is None else names
        topics = [n.removeprefix(self._prefix) for n in names if n.startswith(self._prefix)]
        if not topics:
            return {}
        try:
            samples = self._samples()
        except Exception:  # a JVM going away under a scrape: the progress's figures stand
            return {}
        return {self._prefix + t: n for t, n in furthest(samples or [], topics).items()}

    def now(self) -> dict[str, int]:
        return {**self.from_progress, **self.live()}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "mcq_normalize_behind_records",
            "Raw records not yet read: a micro-batch query's at its last batch's end, a real-time query's now "
            "(its Kafka consumers' lag, with a local master)",
            labels=["query"],
        )
        for query, value in sorted(self.now().items()):
            family.add_metric([query], value)
        yield family


class NormalizeMetrics:
    def __init__(self) -> None:
        self._noted: dict[int, Any] = {}
        self._noting = threading.Lock()  # the driver's loop and the health endpoint's thread both note
        self.runs: dict[str, dict[str, str]] = {}
        """Every query run started, by run id: name, id (kept across restarts), start time."""
        self.registry = CollectorRegistry()
        self.rows = Counter(
            "mcq_normalize_rows", "Records read from raw topics (in) and written (out)", ["query", "direction"],
            registry=self.registry,
        )  # fmt: skip
        self.batches = Counter("mcq_normalize_batches", "Batches finished", ["query"], registry=self.registry)
        self.last_batch = Gauge(
            "mcq_normalize_last_batch_timestamp_seconds", "When a batch last finished", ["query"],
            registry=self.registry,
        )  # fmt: skip
        self.behind = Behind()
        self.registry.register(self.behind)
        self.batch_seconds = Gauge(
            "mcq_normalize_batch_seconds", "Duration of the last batch", ["query"], registry=self.registry
        )

    def note_runs(self, queries: list[Any]) -> None:
        """Note the queries (pyspark's StreamingQuery) started since the last call: each run
        has an id of its own and the time it was first seen here (``/queries``)."""
        with self._noting:
            self._note(queries)

    def _note(self, queries: list[Any]) -> None:
        for query in queries:
            if id(query) not in self._noted:
                self._noted[id(query)] = query  # kept: an id is unique only while its object lives
                started = datetime.now(UTC).isoformat(timespec="milliseconds")
                run = {"name": str(query.name), "id": str(query.id), "run_id": str(query.runId), "started": started}
                self.runs[run["run_id"]] = run

    def started_ms(self) -> dict[str, int]:
        """Each run's start (as noted), by run id, in milliseconds since the epoch."""
        return {rid: int(datetime.fromisoformat(r["started"]).timestamp() * 1000) for rid, r in self.runs.items()}

    def observe(self, progress: dict[str, Any], now: float | None = None) -> None:
        """One finished batch of a query (Spark's progress as JSON)."""
        query = str(progress.get("name") or progress.get("id") or "?")
        # Spark says -1 where it does not know a count (a foreachBatch sink's output): not a row
        rows_in = int(progress.get("numInputRows") or 0)
        rows_out = int((progress.get("sink") or {}).get("numOutputRows") or 0)
        self.rows.labels(query=query, direction="in").inc(max(rows_in, 0))
        self.rows.labels(query=query, direction="out").inc(max(rows_out, 0))
        self.batches.labels(query=query).inc()
        self.last_batch.labels(query=query).set(now if now is not None else time.time())
        self.behind.from_progress[query] = behind(progress)
        duration = (progress.get("durationMs") or {}).get("triggerExecution", 0)
        self.batch_seconds.labels(query=query).set(duration / 1000)

    def watch_consumers(self, samples: Callable[[], list[Sample] | None], prefix: str) -> None:
        """Real-time queries (named ``prefix`` + raw topic) say how far behind they are from
        their consumers (``streams/lag.py``), at each scrape and batch line."""
        self.behind.watch(samples, prefix, lambda: {r["name"] for r in list(self.runs.values())})

    def behind_now(self, query: str, progress: dict[str, Any]) -> int:
        """How far ``query`` is behind: from its consumers when watched, else its progress."""
        return self.behind.live({query}).get(query, behind(progress))
