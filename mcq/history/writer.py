"""Writing events to the history topic through a producer the caller flushes (a listener's
batch producer: its events are flushed before its offsets commit)."""

from __future__ import annotations

from typing import Protocol

from mcq.history.events import Event
from mcq.history.topic import HISTORY_PARTITIONS, partition_of


class _Producer(Protocol):
    def produce(self, topic: str, value: bytes, key: bytes, partition: int) -> None: ...


class HistoryWriter:
    def __init__(self, producer: _Producer, topic: str, partitions: int = HISTORY_PARTITIONS) -> None:
        self._producer = producer
        self.topic = topic
        self.partitions = partitions

    def record(self, event: Event) -> None:
        self.write(event.tname, event.key, event.to_json())

    def write(self, tname: str, key: str, event: bytes) -> None:
        """An event's JSON (:meth:`Event.to_json`, or a listener's step written from its
        fields) for key ``key`` of ``tname``."""
        self._producer.produce(
            self.topic, value=event, key=f"{tname}:{key}".encode(), partition=partition_of(tname, key, self.partitions)
        )
