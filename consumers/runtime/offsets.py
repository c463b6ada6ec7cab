"""Where a listener instance stands on each partition it handles, and its acknowledgement.

Per partition: the next offset to process (first learnt from the group's commit, asked
for all new partitions at once), the offset metadata to commit with it
(:mod:`consumers.runtime.acks`), whether it was read here before (a commit with a mark:
how long its changes waited is judged), and for a run ``--until-caught-up`` where the
partition ended when it was first seen. The commit itself is the acknowledgement: made
after the batch's records are in Kafka and the target took its changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from consumers.runtime.acks import AckMark
from consumers.runtime.pacing import membership_lost
from mcq.topics.read import RenewingAdmin, all_watermarks

log = logging.getLogger(__name__)

TP = tuple[str, int]
Ask = Callable[[str, Callable[[], Any]], Any]
"""Runs a Kafka call, waiting out a broker that does not answer (the runtime's)."""


class LaneOffsets:
    """The offsets of both lanes of one listener instance."""

    def __init__(self, name: str, admin: RenewingAdmin, ask: Ask) -> None:
        self.name = name
        self.done: dict[TP, int] = {}  # next offset to process, per partition handled here
        self.acks: dict[TP, str] = {}  # the offset metadata committed with it
        self.watched: set[TP] = set()  # read here before (a commit with a mark)
        self.ends: dict[str, dict[TP, int]] = {"realtime": {}, "bulk": {}}  # where it ended when first seen
        self._admin = admin  # offsets without waiting behind a fetch
        self._ask = ask

    def learn(self, consumer: Consumer, lane: str | None, tps: list[TopicPartition]) -> None:
        """What the group committed, and (for ``lane``) where each partition ended, for the
        partitions not seen yet -- asked for all of them at once."""
        new = [tp for tp in tps if (tp.topic, tp.partition) not in self.done]
        ends = [tp for tp in tps if lane is not None and (tp.topic, tp.partition) not in self.ends[lane]]
        if new or ends:  # (called at every step: nothing to ask, most of the time)
            self._ask("reading committed offsets", partial(self._learn_now, consumer, lane, new, ends))

    def _learn_now(
        self, consumer: Consumer, lane: str | None, new: list[TopicPartition], ends: list[TopicPartition]
    ) -> None:
        marks = all_watermarks(self._admin, list({(t.topic, t.partition): t for t in new + ends}.values()))
        for tp in ends:
            self.ends[lane][(tp.topic, tp.partition)] = marks[(tp.topic, tp.partition)][1]  # type: ignore[index]
        if not new:
            return
        for committed in consumer.committed([TopicPartition(t.topic, t.partition) for t in new], timeout=10):
            key = (committed.topic, committed.partition)
            self.done[key] = committed.offset if committed.offset >= 0 else marks[key][0]
            if committed.offset >= 0 and committed.metadata:
                self.acks[key] = committed.metadata  # committed again unchanged until records are handled
                if AckMark.parse(committed.metadata) is not None:
                    self.watched.add(key)  # read here before: how long its changes waited is judged

    def committed_or_zero(self, consumer: Consumer, tp: TopicPartition) -> int:
        """The next offset to process on ``tp``, learnt from the group the first time."""
        key = (tp.topic, tp.partition)
        if key not in self.done:
            self.learn(consumer, None, [tp])
        return self.done[key]

    def handled(self, tp: TP, offset: int, mark: AckMark) -> None:
        """Records up to ``offset`` are handled; ``mark`` goes with the next commit."""
        self.done[tp] = offset + 1
        self.acks[tp] = mark.text()

    def commit_of(self, partitions: list[TP]) -> list[TopicPartition]:
        """What to commit for partitions handled here: the next offset and its metadata."""
        out = []
        for topic, partition in partitions:
            ack = self.acks.get((topic, partition))
            offset = self.done[(topic, partition)]
            out.append(
                TopicPartition(topic, partition, offset, metadata=ack)
                if ack
                else TopicPartition(topic, partition, offset)  # metadata=None is refused
            )
        return out

    def commit(self, consumer: Consumer, offsets: list[TopicPartition], lane: str) -> bool:
        """Whether the group took the commit; False when it had removed this instance
        (said by the caller); another refusal is said here. Either way the next owner
        re-reads from the last commit, and the applied positions make the repeats harmless."""
        if not offsets:
            return True
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            if membership_lost(exc):
                return False
            log.warning(f"listener {self.name}: {lane} commit not taken ({exc.args[0]}); records will be re-read")
        return True

    def forget(self, tp: TP, lane: str) -> None:
        """A partition this instance no longer handles."""
        self.done.pop(tp, None)
        self.acks.pop(tp, None)
        self.watched.discard(tp)
        self.ends[lane].pop(tp, None)
