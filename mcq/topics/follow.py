"""Following topics into memory: read them to their end, then keep up with them.

Three stores hold the last state per key of a topic inside a process -- the registry
(:mod:`mcq.registry.store`), a listener's applied positions
(:mod:`consumers.runtime.applied`) and an adapter's projection of logical tables
(:mod:`consumers.projection`). Each folds records its own way; the reading is this one
class: a consumer of a group that never commits, every partition assigned (from where a
snapshot ended, or from the beginning), the ends asked for all partitions at once through
the admin client (a consumer's own offset queries wait behind its fetch, one by one), and
what was fetched taken in one call.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from mcq.config import Settings
from mcq.topics.exceptions import TopicReadError
from mcq.topics.named import named_topics
from mcq.topics.read import RenewingAdmin, all_watermarks, assign_now, take_fetched

TP = tuple[str, int]


class TopicFollower:
    """Reads ``topics`` into ``fold``, one record at a time, in each partition's order."""

    def __init__(
        self,
        settings: Settings,
        topics: list[str],
        fold: Callable[[Message], None],
        name: str,
        *,
        required: bool = False,
    ) -> None:
        """``name`` says whose reader it is (in its group's name and its errors); ``required``:
        a topic that does not exist is an error (otherwise it is read as empty)."""
        self.name = name
        self.topics = topics
        self._fold = fold
        self._consumer = Consumer(
            {
                **settings.kafka.client_config(),
                "group.id": f"_mcq-{name}-{uuid.uuid4().hex}",  # never commits: reads the topics whole
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "allow.auto.create.topics": False,  # a consumer's default, said: metadata by name never creates
            }
        )
        # asked through the consumer itself: it knows the leaders when start() assigns the
        # partitions (a consumer that does not waits 500 ms before reading: assign_now)
        meta, _ = named_topics(self._consumer, topics)  # by name, never creating them
        missing = [t for t in topics if t not in meta]
        if missing and required:
            answer = self._consumer.list_topics(topic=missing[0], timeout=15).topics.get(missing[0])  # why missing
            self._consumer.close()
            why = answer.error if answer is not None and answer.error is not None else "no such topic"
            raise TopicReadError(f"{name}: topic {missing[0]} is missing: {why}")
        self.partitions = [TopicPartition(t, p) for t in topics if t not in missing for p in sorted(meta[t].partitions)]
        self.admin = RenewingAdmin(settings.kafka.client_config())
        self.next: dict[TP, int] = {}
        """The next offset to read per partition: every record before it has been folded."""
        self.read = 0
        """Records folded since this follower started."""

    def start(self, at: dict[TP, int] | None = None) -> None:
        """Assign every partition, from ``at`` (where a snapshot ended) or the beginning."""
        if at:
            self.next.update(at)
        assign_now(self._consumer, [TopicPartition(t, p, self.next.get((t, p), -2)) for t, p in self._keys()])

    def _keys(self) -> list[TP]:
        return [(tp.topic, tp.partition) for tp in self.partitions]

    def unread(self, key: TP) -> range | None:
        """The offsets of ``key`` not read yet, as far as the consumer's last fetch knows
        (no broker round trip); None when it has fetched nothing of it yet."""
        low, high = self._consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
        if high < 0:
            return None
        start = self.next.get(key)
        if start is None:  # nothing read yet: it reads from the beginning (start() without a snapshot end)
            if low < 0:
                return None
            start = low
        return range(start, high)

    def skip_to(self, key: TP, offset: int) -> bool:
        """Go on reading ``key`` at ``offset``, the records before it not read: for a caller
        that knows them already. False (nothing changed) when the consumer cannot seek yet."""
        try:
            self._consumer.seek(TopicPartition(key[0], key[1], offset))
        except KafkaException:
            return False
        self.next[key] = offset
        return True

    def take(self, timeout_s: float) -> bool:
        """Fold in what the consumer has fetched (waiting up to ``timeout_s`` for the
        first record); False if nothing came."""
        records = take_fetched(self._consumer, timeout_s)
        for msg in records or ():
            self.next[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
            self.read += 1
            self._fold(msg)
        return records is not None

    def refresh(self) -> None:
        """Fold in whatever has arrived, without waiting."""
        while self.take(0):
            pass

    def marks(self) -> dict[TP, tuple[int, int]]:
        """(low, high) watermark of every partition, in one request."""
        return all_watermarks(self.admin, self.partitions)

    def catch_up(self, timeout_s: float = 60.0, need: dict[TP, int] | None = None) -> None:
        """Read to every partition's end as of now (and at least to the offsets ``need``
        names). Raises :class:`TopicReadError` (retriable) when that takes longer."""
        ends = {key: high for key, (_, high) in self.marks().items()}
        for key, offset in (need or {}).items():
            ends[key] = max(ends.get(key, 0), offset)
        deadline = time.monotonic() + timeout_s
        while True:
            # the consumer's position passes records that are not data (transaction markers)
            at = {(tp.topic, tp.partition): tp.offset for tp in self._consumer.position(self.partitions)}
            behind = [k for k, end in ends.items() if end > 0 and max(self.next.get(k, 0), at.get(k, 0)) < end]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise TopicReadError(
                    f"{self.name}: reading {', '.join(sorted({t for t, _ in behind}))}: "
                    f"not at the end of {len(behind)} partition(s) after {timeout_s:.0f} s",
                    retriable=True,
                )
            self.take(0.5)

    def close(self) -> None:
        self._consumer.close()
