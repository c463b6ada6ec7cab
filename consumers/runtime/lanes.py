"""A listener's two lanes as Kafka sees them: the real-time and the bulk consumer group,
what each has been given by its group, and how far each is.

A partition given to this instance is read only once what the previous owner applied is
known here (and the retry records it left waiting); one taken away is committed once more
(nothing processed is pending: every batch commits) and forgotten; one lost (the group
gave it to another instance already) is only forgotten. Which lane goes next is the
loop's (consumers/runtime/listener.py); whether each has caught up is answered here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from consumers.runtime.applied import AppliedPositions
from consumers.runtime.offsets import LaneOffsets
from consumers.runtime.waiting import WaitingRoom
from mcq.config import Settings
from mcq.topics.listener import ListenerTopics

log = logging.getLogger(__name__)

KafkaCall = Callable[[str, Callable[[], Any]], Any]


class Lanes:
    """The real-time consumer (``rt``) and the bulk consumer (``bulk``) of one instance."""

    def __init__(
        self,
        settings: Settings,
        topics: ListenerTopics,
        max_poll_interval_s: float,
        instance: str,
        offsets: LaneOffsets,
        waiting_room: WaitingRoom,
        applied: AppliedPositions,
        kafka: KafkaCall,
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.name = topics.listener
        self._offsets = offsets
        self._waiting_room = waiting_room
        self._applied = applied
        self._kafka = kafka
        self._max_poll_interval_s = max_poll_interval_s
        self._instance = instance
        self.rt = self._consumer(topics.group)
        self.bulk = self._consumer(topics.bulk_group)

    def _consumer(self, group: str) -> Consumer:
        return Consumer(
            {
                **self.settings.kafka.client_config(),
                "group.id": group,
                "client.id": f"{group}-{self._instance}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky",
                # a batch (a wait for an unavailable target included) does not poll: how
                # long it may take before the group gives its partitions to another instance
                "max.poll.interval.ms": int(self._max_poll_interval_s * 1000),
                # a killed instance's partitions move to the others within seconds
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 2_000,
                # a fetch left waiting at the broker was now and then answered only at its
                # end (librdkafka's 500 ms) although a record had come: a real-time change
                # then waited 0.5 s (bench/batch_jobs.py; 100 ms: max 0.12 s, idle or loaded)
                "fetch.wait.max.ms": 100,
            }
        )

    # ------------------------------------------------------------------ the groups

    def subscribe(self, realtime_topics: list[str]) -> None:
        """Both lanes join their groups: the real-time lane for ``realtime_topics``."""
        self.rt.subscribe(realtime_topics, **self._rebalance)
        self.bulk.subscribe(self.topics.bulk_lane(), **self._rebalance)

    def resubscribe(self, realtime_topics: list[str]) -> None:
        """The real-time lane for ``realtime_topics`` from now on (the interests changed)."""
        self.rt.subscribe(realtime_topics, **self._rebalance)

    @property
    def _rebalance(self) -> dict[str, Callable[[Consumer, list[TopicPartition]], None]]:
        return {"on_assign": self._on_assign, "on_revoke": self._on_revoke, "on_lost": self._on_lost}

    def lane(self, consumer: Consumer) -> str:
        return "bulk" if consumer is self.bulk else "realtime"

    def assigned(self) -> int:
        """How many partitions this instance holds, in both lanes."""
        return len(self.rt.assignment()) + len(self.bulk.assignment())

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # what the previous owner applied is known before its partitions are read here
        self._kafka("reading the applied positions", self._applied.catch_up)
        retry = [tp.partition for tp in partitions if tp.topic == self.topics.retry]
        if retry:  # and the retry records it left waiting
            self._kafka("reading the waiting retry records", lambda: self._waiting_room.assign(retry))
        consumer.incremental_assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # offsets are committed at the end of every batch, so nothing processed is pending;
        # commit once more in case the last commit failed (the next owner starts there)
        lane = self.lane(consumer)
        handled = [(tp.topic, tp.partition) for tp in partitions if (tp.topic, tp.partition) in self._offsets.done]
        if handled:
            self._offsets.commit(consumer, self._offsets.commit_of(handled), lane)
        self._forget(partitions, lane)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # the group gave them to another instance already: nothing may be committed for them
        lane = self.lane(consumer)
        log.info(
            f"listener {self.name}: {lane} lane: {len(partitions)} partition(s) taken away by the group "
            "(this instance lost its membership: a batch past max_poll_interval_s, a session timed out or a "
            "broker restarted); read again from the group's commit when assigned again"
        )
        self._forget(partitions, lane)

    def _forget(self, partitions: list[TopicPartition], lane: str) -> None:
        self._waiting_room.revoke([tp.partition for tp in partitions if tp.topic == self.topics.retry])
        for tp in partitions:
            self._offsets.forget((tp.topic, tp.partition), lane)

    # ------------------------------------------------------------------ how far

    @staticmethod
    def take(consumer: Consumer, most: int, timeout: float) -> list[Message]:
        """Wait up to ``timeout`` for the first record, then take what is already fetched
        (consume() alone would wait for a full batch or the whole timeout)."""
        first = consumer.poll(timeout)
        if first is None:
            return []
        return [first, *consumer.consume(most - 1, 0)] if most > 1 else [first]

    def realtime_backlog(self) -> bool:
        """Whether a real-time partition has records we have not processed, by the high
        watermark of the last fetch: no broker round trip."""
        assigned = list(self.rt.assignment())
        self._offsets.learn(self.rt, None, assigned)
        for tp in assigned:
            key = (tp.topic, tp.partition)
            _, high = self.rt.get_watermark_offsets(tp, cached=True)
            if high > 0 and high > self._offsets.done.get(key, self._offsets.committed_or_zero(self.rt, tp)):
                return True
        return False

    def caught_up(self) -> bool:
        """Everything that was pending when we first saw each partition is handled, and no
        waiting retry record is due (one that comes due later waits for the next run)."""
        return (
            self.lane_caught_up("realtime")
            and self.lane_caught_up("bulk")
            and not self._waiting_room.has_due(time.time())
        )

    def lane_caught_up(self, lane: str) -> bool:
        consumer = self.bulk if lane == "bulk" else self.rt
        assigned = list(consumer.assignment())
        if not assigned:
            return False
        self._offsets.learn(consumer, lane, assigned)  # (parked changes not due yet wait in the waiting room)
        for tp in assigned:
            key = (tp.topic, tp.partition)
            if self._offsets.committed_or_zero(consumer, tp) < self._offsets.ends[lane][key]:
                return False
        return True

    def close(self) -> None:
        """Leave both groups at once: partitions move without waiting for a session timeout."""
        for consumer in (self.rt, self.bulk):
            try:
                consumer.close()
            except KafkaException as exc:
                log.warning(f"listener {self.name}: closing a consumer: {exc}")
