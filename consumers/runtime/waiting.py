"""Retry-lane records that are not due yet (a parked change's hold, an interest's delay),
each waiting by its own due time: one key's hour-long hold, or a 30-day delay, never holds
another key's 5-second retry behind it.

A record of the retry lane read before it is due moves into the listener's *waiting*
topic (compacted, ``<prefix>.listener.NAME.waiting``, partition for partition with the
retry topic), keyed by where it was in the retry lane (``partition:offset``); the retry
lane's offset then moves past it. The producer is flushed before that commit (as for
every record a batch produces), so a record is never only in memory.

The instance that holds retry partition p holds waiting partition p: when assigned, it
reads it whole into a time-ordered heap. A record that comes due goes through delivery
like any retry-lane record; its waiting record is tombstoned with the batch's outcome
(flushed before the batch's commit). A crash between the two brings the record back
once, as a redelivery does: it is then not newer than what was applied (skipped), or
superseded, or fails and parks again.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Message, Producer

from consumers.exceptions import ConsumerError, KafkaUnavailable
from mcq.config import Settings
from mcq.topics.exceptions import TopicReadError
from mcq.topics.read import read_to_end

H_RETRY_KEY = "mcq.retry_key"
"""The retry record's own Kafka key, kept on its waiting record (whose key says where it was)."""
H_DUE = "mcq.due"
H_TOMBSTONE = "mcq.tombstone"
"""On a waiting record whose retry record had no value (a delete's tombstone)."""


class HeldMessage:
    """A waiting record as the listener's batch reads a Kafka message: the retry record it
    stands for (topic, partition, offset, key, value, headers), due at ``due``."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value", "due")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        timestamp: int,
        due: float,
    ) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers, self._timestamp = key, value, headers, timestamp
        self.due = due

    @classmethod
    def of(cls, msg: Message, due: float) -> HeldMessage:
        return cls(
            msg.topic() or "",
            msg.partition() or 0,
            msg.offset() or 0,
            msg.key(),
            msg.value(),
            raw_headers(msg),
            msg.timestamp()[1],
            due,
        )

    @classmethod
    def waiting(cls, msg: Message, retry_topic: str) -> HeldMessage | None:
        """The retry record a waiting record stands for, due when its header says (None:
        not a waiting record of ours)."""
        partition, _, offset = (msg.key() or b"").decode(errors="replace").partition(":")
        headers = raw_headers(msg)
        found = dict(headers)
        try:
            due = float((found.get(H_DUE) or b"0").decode())
            where = (int(partition), int(offset))
        except ValueError:
            return None
        kept = [(k, v) for k, v in headers if k not in (H_RETRY_KEY, H_DUE, H_TOMBSTONE)]
        value = None if found.get(H_TOMBSTONE) else msg.value()
        retry_key = found.get(H_RETRY_KEY) or None
        return cls(retry_topic, where[0], where[1], retry_key, value, kept, msg.timestamp()[1], due)

    @property
    def where(self) -> str:
        return f"{self._partition}:{self._offset}"

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]]:
        return list(self._headers)

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)

    def error(self) -> None:
        return None


class WaitingRoom:
    """The waiting records of the retry partitions this instance holds."""

    def __init__(self, settings: Settings, topic: str, retry_topic: str, producer: Producer) -> None:
        self.settings = settings
        self.topic = topic
        self.retry_topic = retry_topic
        self._producer = producer
        self._records: dict[tuple[int, int], HeldMessage] = {}  # (retry partition, offset) -> record
        self._heap: list[tuple[float, int, int]] = []  # (due, partition, offset); stale entries skipped
        self._partitions: set[int] = set()

    def __len__(self) -> int:
        return len(self._records)

    # ------------------------------------------------------------------ holding

    def hold(self, msg: Message, due: float) -> None:
        """Keep a retry-lane record until ``due`` (epoch s); the caller flushes the producer
        before it commits past the record."""
        held = HeldMessage.of(msg, due)
        headers: list[tuple[str, str | bytes | None]] = [
            *held.headers(),
            (H_RETRY_KEY, held.key() or b""),
            (H_DUE, repr(due).encode()),
        ]
        value = held.value()
        if value is None:  # a delete's tombstone: kept as an empty value, said by a header
            headers.append((H_TOMBSTONE, b"1"))
        self._producer.produce(
            self.topic, key=held.where.encode(), value=value or b"", headers=headers, partition=held.partition()
        )
        self._keep(held)

    def take_due(self, now: float, most: int) -> list[HeldMessage]:
        """Up to ``most`` records due by ``now``, the earliest first (taken: :meth:`done`
        tombstones them once handled, :meth:`put_back` returns those left unhandled)."""
        out: list[HeldMessage] = []
        while self._heap and len(out) < most and self._heap[0][0] <= now:
            _, partition, offset = heapq.heappop(self._heap)
            held = self._records.pop((partition, offset), None)
            if held is not None:
                out.append(held)
        return out

    def next_due(self) -> float | None:
        """When the earliest record comes due (epoch s), if any waits."""
        while self._heap and (self._heap[0][1], self._heap[0][2]) not in self._records:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def has_due(self, now: float) -> bool:
        """Whether a record is due by ``now`` (a run until caught up handles it before it ends)."""
        due = self.next_due()
        return due is not None and due <= now

    def done(self, handled: Iterable[HeldMessage]) -> None:
        """These records' outcomes are in the batch: their waiting records go (flushed with it)."""
        for held in handled:
            self._producer.produce(self.topic, key=held.where.encode(), value=None, partition=held.partition())

    def put_back(self, held: Iterable[HeldMessage]) -> None:
        """Records taken but not handled (a stop while the target was down): due again."""
        for h in held:
            self._keep(h)

    def _keep(self, held: HeldMessage) -> None:
        self._records[(held.partition(), held.offset())] = held
        heapq.heappush(self._heap, (held.due, held.partition(), held.offset()))

    # ------------------------------------------------------------------ partitions

    def assign(self, partitions: list[int], timeout_s: float = 60.0) -> None:
        """Read the waiting records of newly held retry partitions."""
        new = sorted(set(partitions) - self._partitions)
        if not new:
            return
        self._partitions.update(new)
        for msg in _read_partitions(self.settings, self.topic, new, timeout_s).values():
            held = None if msg is None else HeldMessage.waiting(msg, self.retry_topic)
            if held is not None:
                self._keep(held)

    def revoke(self, partitions: list[int]) -> None:
        """Retry partitions another instance holds now: their waiting records are its."""
        gone = set(partitions)
        self._partitions -= gone
        for key in [k for k in self._records if k[0] in gone]:
            del self._records[key]


def raw_headers(msg: Message) -> list[tuple[str, bytes]]:
    """A record's headers as (name, bytes) pairs."""
    raw: Any = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(str(k), v if isinstance(v, bytes) else (v or "").encode()) for k, v in pairs]


def _read_partitions(
    settings: Settings, topic: str, partitions: list[int], timeout_s: float
) -> dict[str, Message | None]:
    """The last record of every key of these partitions of ``topic`` (None: tombstoned)."""
    try:
        records = read_to_end(settings, topic, timeout_s, partitions)
    except TopicReadError as exc:
        raise (KafkaUnavailable if exc.retriable else ConsumerError)(f"waiting records: {exc}") from None
    return {(m.key() or b"").decode(): m if m.value() is not None else None for m in records}
