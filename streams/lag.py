"""How far the real-time queries are behind their raw topics now, from the Kafka consumers
that read them.

A real-time query's progress comes once per checkpoint interval (5 minutes by default)
and, at its end, says nothing about what is still to be read: its batch read until it was
time to stop. So ``mcq_normalize_behind_records`` for a real-time query comes from its
Kafka consumers instead, through Kafka's documented JMX metrics
(``kafka.consumer:type=consumer-fetch-manager-metrics``, per topic and partition):
``records-lag`` (the partition's end at the last fetch minus the consumer's position) and
``records-lead`` (the position minus the log's start). Spark's consumer pool can hold
several consumers of one partition (an idle one of an earlier batch beside the one a
running task reads with); the one furthest along (highest lead) is the reader.

Only the driver's JVM is looked into: with a local master the tasks run there. On a
cluster the executors' consumers are out of reach, and the gauge keeps what the progress
says (``streams/metrics.py``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Sample = tuple[str, int, float, float]
"""One consumer's (topic as its metric tag names it, partition, records-lead, records-lag)."""


def furthest(samples: Iterable[Sample], topics: Iterable[str]) -> dict[str, int]:
    """Records behind per topic of ``topics``: per partition, the lag of the consumer
    furthest along it. Kafka tags a topic with its dots as underscores, so each tag is
    matched to the topic it names; a partition no consumer reads yet is not counted, and
    a topic none of whose partitions is read has no figure."""
    by_tag = {topic.replace(".", "_"): topic for topic in topics}
    by_tag.update({topic: topic for topic in topics})
    best: dict[tuple[str, int], tuple[float, float]] = {}
    for tag, partition, lead, lag in samples:
        topic = by_tag.get(tag)
        if topic is None or math.isnan(lead) or math.isnan(lag) or lead < 0 or lag < 0:
            continue
        if (topic, partition) not in best or lead > best[topic, partition][0]:
            best[topic, partition] = (lead, lag)
    out: dict[str, int] = {}
    for (topic, _), (_, lag) in best.items():
        out[topic] = out.get(topic, 0) + int(lag)
    return out


def consumer_samples(spark: SparkSession) -> list[Sample] | None:
    """Every Kafka consumer's per-partition lead and lag in the driver's JVM
    (jvm/spark-gate's ``ConsumerLag``); None when the tasks do not run there (not a local
    master)."""
    if not str(spark.sparkContext.master).startswith("local"):
        return None
    jvm: Any = spark._jvm
    return parse_samples(str(jvm.mcq.spark.ConsumerLag.sample()))


def parse_samples(text: str) -> list[Sample]:
    """``ConsumerLag.sample()``'s lines: topic tag, partition, lead, lag (tab-separated)."""
    out: list[Sample] = []
    for line in text.splitlines():
        topic, partition, lead, lag = line.split("\t")
        out.append((topic, int(partition), float(lead), float(lag)))
    return out
