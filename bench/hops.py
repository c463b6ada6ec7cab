"""Where a change's time goes between hops: a tap that reads topics as they are written.

A :class:`HopTap` follows topics from their ends in a thread of its own (no group, fetches
that return as soon as a record is there) and notes, for every marker a record's bytes
hold (a value the bench wrote into the source, such as ``B-123``), the first wall-clock
time it saw that marker on each stage. JSON and Avro both keep a string's UTF-8 bytes, so
the marker is found without decoding. The tap's own delay (one fetch, a few ms) is in the
figures; it is the same for every stage.

:func:`hop_rows` turns those times and the commit and arrival times into per-hop
percentiles and, for the slowest samples, which hop held them.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, TopicPartition

from .stats import percentile

if TYPE_CHECKING:
    from mcq.config import Settings


class HopTap:
    def __init__(self, settings: Settings, stages: dict[str, list[str]], marker: bytes) -> None:
        self.settings, self.stages, self.pattern = settings, stages, re.compile(marker)
        self.seen: dict[str, dict[str, float]] = {stage: {} for stage in stages}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._lock, self._waiting = threading.Lock(), len(stages)
        self._threads = [threading.Thread(target=self._follow, args=(s,), daemon=True) for s in stages]

    def __enter__(self) -> HopTap:
        for t in self._threads:
            t.start()
        if not self._ready.wait(60):
            raise TimeoutError("the hop tap did not get its partitions in 60 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _follow(self, stage: str) -> None:
        consumer = Consumer(
            {
                **self.settings.kafka.client_config(),
                "group.id": f"bench-hops-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                # a fetch is answered as soon as one byte is there (fetch.min.bytes), so the
                # wait only bounds an idle round: at 5 ms the two stages' consumers sent the
                # broker hundreds of empty fetches a second, on the cores being measured
                "fetch.wait.max.ms": 100,
                "fetch.min.bytes": 1,
            }
        )
        try:
            meta = consumer.list_topics(timeout=30).topics
            tps = [TopicPartition(t, p) for t in self.stages[stage] if t in meta for p in meta[t].partitions]
            consumer.assign(
                [TopicPartition(tp.topic, tp.partition, consumer.get_watermark_offsets(tp, 30)[1]) for tp in tps]
            )
            with self._lock:
                self._waiting -= 1
                if not self._waiting:
                    self._ready.set()
            seen = self.seen[stage]
            while not self._stop.is_set():
                for msg in consumer.consume(500, 0.1):
                    now = time.time()
                    if msg.error() is None and (value := msg.value()):
                        for match in self.pattern.finditer(value):
                            seen.setdefault(match.group().decode(), now)
        finally:
            consumer.close()


def hop_rows(committed: dict[str, float], hops: list[tuple[str, dict[str, float]]], worst: float = 0.01) -> list[str]:
    """Markdown list items: each hop's p50/p99/max over the samples seen at every stage, and, of the
    slowest ``worst`` share of them (commit -> last stage), the mean share of each hop."""
    full = [k for k in committed if all(k in times for _, times in hops)]
    if not full:
        return ["- no sample was seen at every stage"]
    steps: dict[str, list[float]] = {}
    prev = dict(committed)
    names = ["commit", *(name for name, _ in hops)]
    per_key: dict[str, list[float]] = {k: [] for k in full}
    for i, (_, times) in enumerate(hops):
        label = f"{names[i]} -> {names[i + 1]}"
        values = []
        for k in full:
            d = max(0.0, times[k] - prev[k])
            values.append(d)
            per_key[k].append(d)
        steps[label] = values
        prev = times
    start = min(committed.values())
    rows = []
    for label, v in steps.items():
        worst_key = full[max(range(len(v)), key=v.__getitem__)]
        rows.append(
            f"- {label}: p50 {percentile(v, 50):.3f} s, p99 {percentile(v, 99):.3f} s, max {max(v):.3f} s "
            f"(committed {committed[worst_key] - start:.1f} s into the run; {len(v):,} samples)"
        )
    for i in range(1, len(hops) - 1):  # commit -> an inner stage, whole (the normaliser's output: commit -> logical)
        v = [sum(per_key[k][: i + 1]) for k in full]
        rows.append(
            f"- commit -> {names[i + 1]}, whole: p50 {percentile(v, 50):.3f} s, p99 {percentile(v, 99):.3f} s, "
            f"max {max(v):.3f} s"
        )
    slow = sorted(full, key=lambda k: sum(per_key[k]), reverse=True)[: max(1, int(len(full) * worst))]
    share = [sum(per_key[k][i] for k in slow) / max(1e-9, sum(sum(per_key[k]) for k in slow)) for i in range(len(hops))]
    rows.append(
        f"- the slowest {len(slow)} (commit -> {names[-1]} ≥ {min(sum(per_key[k]) for k in slow):.2f} s), their "
        "time by hop: " + ", ".join(f"{label} {s:.0%}" for label, s in zip(steps, share, strict=True))
    )
    return rows
