"""Deletes a listener may have missed: changes it read that waited longer than their topic
keeps tombstones (consumers/runtime/acks.py).

Judged by a batch's first record per logical partition this listener had been reading
before, against the commit (or the last batch) it follows. If so: one line, and a mark in
the applied topic (flushed with the batch, before its commit) that ``mcq status`` reports
until a whole-table refresh of the table has been applied here; with
``delivery.on_exposure: refresh`` the listener asks for that refresh itself, in its own
bulk lane.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from consumers.runtime.acks import ExposureMark, exposure_line, waited_past_retention
from consumers.runtime.applied import AppliedPositions
from consumers.runtime.definition import ListenerDefinition
from consumers.runtime.delivery import Item
from consumers.runtime.offsets import LaneOffsets
from consumers.runtime.parking import H_REQUEST
from consumers.runtime.topics import tombstone_retention
from mcq.change import Change, ChangeCodec, ChangeKey, Position
from mcq.registry.model import LogicalTable
from mcq.topics.listener import ListenerTopics

log = logging.getLogger(__name__)

TP = tuple[str, int]


class ExposureWatch:
    """One listener's judge of exposure: what it needs from the loop, and the topics'
    tombstone retention, read once per topic."""

    def __init__(
        self,
        definition: ListenerDefinition,
        topics: ListenerTopics,
        offsets: LaneOffsets,
        applied: AppliedPositions,
        codec: ChangeCodec,
        producer: Producer,
    ) -> None:
        self.definition = definition
        self.settings = definition.settings
        self.name = definition.name
        self.topics = topics
        self._offsets = offsets
        self._applied = applied
        self._codec = codec
        self._producer = producer
        self._retention: dict[str, int | None] = {}  # delete.retention.ms per topic, read once

    def judge(self, consumer: Consumer, firsts: dict[TP, Message]) -> None:
        """Whether the changes read now, by each partition's ``firsts`` record, waited
        longer than their topic keeps tombstones; marked (and a refresh asked) if so."""
        registry = self.definition.registry
        tables = {t.topic(self.settings.topic_prefix): t for t in registry.tables_of(self.name)}
        now = time.time()
        for tp, msg in firsts.items():
            table = tables.get(tp[0])
            if table is None:
                continue  # the retry lane and the bulk lane keep their records until consumed
            self._offsets.committed_or_zero(consumer, TopicPartition(*tp))  # what the commit says, first time here
            if tp not in self._offsets.watched:
                continue
            stamp = msg.timestamp()[1]
            retention = tombstone_retention(self.settings, [tp[0]], self._retention)[tp[0]]
            found = waited_past_retention(
                self._offsets.done[tp],
                self._offsets.acks.get(tp),
                msg.offset(),
                stamp / 1000 if stamp > 0 else None,
                now,
                retention,
            )
            if found is None or retention is None:
                continue
            mark = ExposureMark(tp[0], found[0], found[1], retention, table.tname, table.subtype)
            line = exposure_line(self.name, [mark.exposure(table)])
            if self._applied.mark_exposed(mark):
                if line:
                    log.warning(line)
                if self.definition.delivery.on_exposure == "refresh":
                    self.request_whole_table(table)

    def request_whole_table(self, table: LogicalTable) -> None:
        """A whole-table refresh of ``table`` for this listener only: a request in its own
        bulk lane (flushed with the batch), resolved as an explicit refresh request is. Its
        deletes carry the newest position this listener applied of the table, so every key
        the target holds that has no state any more goes."""
        topic = table.topic(self.settings.topic_prefix)
        keys = [k for k in self._applied.present_keys(table.tname) if k.subtype == table.subtype]
        newest = max((p for k in keys if (p := self._applied.get(k)) is not None), default=Position(0, 0))
        request = Change(
            ChangeKey(table.tname, table.subtype),
            "UPDATE",
            newest,
            datetime.now(UTC),
            topic,
            origin=f"listener {self.name}: delivery.on_exposure: refresh",
        )
        key, value = self._codec.encode(topic, request)
        self._producer.produce(self.topics.bulk, key=key, value=value, headers=[(H_REQUEST, b"refresh")])
        log.info(
            f"listener {self.name}: requested a whole-table refresh of {table.ref} through its bulk lane "
            "(delivery.on_exposure: refresh); applied, it repairs the deletes it may have missed"
        )

    def clear(self, requests: list[Item]) -> None:
        """A whole-table refresh applied here repairs what its tables' topics may have lost:
        their exposure marks are cleared, once the refresh's changes have been applied."""
        for request in requests:
            assert request.change is not None
            for table in self.definition.refresher.whole_tables(request.change.key):
                topic = table.topic(self.settings.topic_prefix)
                if self._applied.clear_exposed(topic):
                    log.info(
                        f"listener {self.name}: whole-table refresh of {table.ref} applied; "
                        f"deletes missed on {topic} repaired, no longer reported"
                    )
