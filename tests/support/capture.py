"""Waiting for Debezium: a raw topic's end, and until it stops moving."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from mcq.config import Settings
from mcq.topics.read import all_watermarks


def raw_events(settings: Settings, topic: str) -> int:
    """Records written to a raw topic so far (the ends of its partitions)."""
    admin = AdminClient(settings.kafka.client_config())
    meta = admin.list_topics(timeout=10).topics[topic]
    marks = all_watermarks(admin, [TopicPartition(topic, p) for p in meta.partitions])
    return sum(high for _, high in marks.values())


def settle(settings: Settings, topic: str, quiet_s: float = 5.0, timeout_s: float = 180.0) -> None:
    """Until Debezium has written every change made: the raw topic's end stops moving."""
    deadline = time.monotonic() + timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = raw_events(settings, topic)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.5)
    raise AssertionError(f"{topic}: still growing after {timeout_s:.0f} s")
