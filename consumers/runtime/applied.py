"""What a listener has applied: the source position of the last change applied per key.

Kept in memory and in the listener's compacted ``applied`` topic, so that every instance
(and the next run) knows it: a change not newer than what was applied for its key is a
duplicate or a replay (skipped), and a parked change that a newer one overtook is
superseded (dropped, counted). Written before the offsets are committed.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from consumers.exceptions import ConsumerError
from mcq.change import ChangeKey, Position
from mcq.config import Settings
from mcq.topics.read import watermarks


def _parse(value: bytes) -> Position:
    a, b = value.decode().split("/")
    return Position(int(a), int(b))


class AppliedPositions:
    def __init__(self, settings: Settings, topic: str, producer: Producer) -> None:
        self.topic = topic
        self._producer = producer
        self._positions: dict[str, Position] = {}
        self._consumer = Consumer(
            {
                **settings.kafka.client_config(),
                "group.id": f"_mcq-applied-{uuid.uuid4().hex}",  # never commits: reads the whole topic
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        meta = self._consumer.list_topics(topic, timeout=15).topics.get(topic)
        if meta is None or meta.error is not None:
            raise ConsumerError(
                f"applied positions topic {topic} is missing: {meta.error if meta else 'no such topic'}"
            )
        self._partitions = sorted(meta.partitions)
        self._consumer.assign([TopicPartition(topic, p, -2) for p in self._partitions])  # -2: beginning

    def __len__(self) -> int:
        return len(self._positions)

    def get(self, key: ChangeKey) -> Position | None:
        return self._positions.get(key.text())

    def record(self, key: ChangeKey, position: Position) -> None:
        """Remember an applied change; the caller flushes the producer before committing."""
        text = key.text()
        current = self._positions.get(text)
        if current is None or position > current:
            self._positions[text] = position
            self._producer.produce(self.topic, key=text.encode(), value=str(position).encode())

    def _take(self, timeout_s: float) -> bool:
        msg = self._consumer.poll(timeout_s)
        if msg is None:
            return False
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return True
            raise ConsumerError(f"reading {self.topic}: {err}")
        key, value = (msg.key() or b"").decode(), msg.value()
        if value is not None:
            pos = _parse(value)
            current = self._positions.get(key)
            if current is None or pos > current:
                self._positions[key] = pos
        return True

    def catch_up(self, timeout_s: float = 60.0) -> None:
        """Read what the other instances (and earlier runs) wrote, up to the end as of now."""
        ends = {p: watermarks(self._consumer, TopicPartition(self.topic, p))[1] for p in self._partitions}
        deadline = time.monotonic() + timeout_s
        while True:
            positions = self._consumer.position([TopicPartition(self.topic, p) for p in self._partitions])
            behind = [tp for tp in positions if ends[tp.partition] > 0 and tp.offset < ends[tp.partition]]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise ConsumerError(f"reading {self.topic}: not caught up after {timeout_s:.0f} s")
            self._take(0.5)

    def refresh(self) -> None:
        """Take in whatever has arrived, without waiting."""
        while self._take(0):
            pass

    def close(self) -> None:
        self._consumer.close()
