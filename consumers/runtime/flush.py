"""``mcq flush``: skip what a stopped listener has pending (the MCQ paper's operators
flushed a listener's queue), every skipped record written to a file first.

Pending is what lies between a consumer group's committed offset and the end of a topic
(or the first record at or after ``before``): the real-time group's logical topics and
retry lane, the bulk group's bulk lane and refresh requests; and the retry records that
wait for their due time in the listener's waiting topic (held before ``before``), which
are tombstoned there once written to the file. The dead letters are not
pending work (``mcq dlq discard`` resolves them). Order, so that nothing is skipped
without a trace: the skipped records go to the file (JSON Lines, fsynced), then each
parked change skipped gets its ``dead:`` mark (its key is not blocked behind a change that
will never be applied), then the groups move. A crash before the move leaves everything
pending; flushing again writes the file again.

A group with live members refuses the move; the plan names the instances. Skipped
changes are never applied: the key's next change is (its state, for projections).
"""

from __future__ import annotations

import base64
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin._listoffsets import OffsetSpec  # .admin re-exports it without __all__

from consumers.exceptions import ConsumerError
from consumers.runtime.applied import AppliedPositions
from consumers.runtime.groups import ListenerGroups
from consumers.runtime.waiting import HeldMessage
from mcq.change import BadChange, ChangeCodec
from mcq.contract import registry_client
from mcq.topics.exceptions import TopicReadError
from mcq.topics.read import assign_now, read_to_end

log = logging.getLogger(__name__)

GTP = tuple[str, str, int]  # (group, topic, partition)


@dataclass
class FlushPlan:
    listener: str
    moves: dict[GTP, tuple[int, int]] = field(default_factory=dict)
    """(group, topic, partition) -> (from: the committed offset, to: where it moves)"""
    waiting_topic: str = ""
    waiting: list[Message] = field(default_factory=list)
    """The waiting records to skip (each stands for a retry-lane record not due yet)."""

    @property
    def pending(self) -> int:
        return sum(to - fr for fr, to in self.moves.values()) + len(self.waiting)

    def lines(self) -> list[str]:
        out = [
            f"{t}[{p}]: skip {to - fr:,} ({fr} -> {to}, group {g})"
            for (g, t, p), (fr, to) in sorted(self.moves.items())
        ]
        if self.waiting:
            out.append(f"{self.waiting_topic}: skip {len(self.waiting):,} retry record(s) waiting for their due time")
        return [*out, f"{self.pending:,} pending record(s) to skip"]


@dataclass
class Flush(ListenerGroups):
    def __post_init__(self) -> None:
        super().__post_init__()
        realtime = [*self.logical_topics(), self.topics.retry]
        self._lanes = {self.topics.group: realtime, self.topics.bulk_group: self.topics.bulk_lane()}

    def plan(self, before_ms: int | None = None) -> FlushPlan:
        """What is pending per partition and lane (written before ``before_ms`` when given);
        raises :class:`ListenerRunning` while the listener runs."""
        self.refuse_while_running("flush")
        plan = FlushPlan(self.name)
        for group, topics in self._lanes.items():
            tps = self.partitions(topics)
            if not tps:
                continue
            start = self.offsets(tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
            end = self.offsets(tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
            upto = end
            if before_ms is not None:
                at = self.offsets(tps, OffsetSpec.for_timestamp(before_ms))  # type: ignore[no-untyped-call]
                upto = {tp: end[tp] if off < 0 else off for tp, off in at.items()}
            committed = self.committed(group, tps)
            for tp in upto:
                fr = committed.get(tp)
                fr = start[tp] if fr is None else max(fr, start[tp])  # never committed: reads from the start
                if upto[tp] > fr:
                    plan.moves[(group, *tp)] = (fr, upto[tp])
        plan.waiting_topic = self.topics.waiting
        plan.waiting = [
            msg
            for msg in self._waiting_records()
            if before_ms is None or msg.timestamp()[1] < before_ms  # held before then
        ]
        return plan

    def _waiting_records(self) -> list[Message]:
        """The live records of the waiting topic (the last of each key, tombstones left out)."""
        try:
            records = read_to_end(self.settings, self.topics.waiting, 60)  # [] when never made
        except TopicReadError as exc:
            raise ConsumerError(f"flush {self.name}: {exc}") from None
        last: dict[bytes, Message] = {}
        for msg in records:
            last[msg.key() or b""] = msg
        return [m for m in last.values() if m.value() is not None and HeldMessage.waiting(m, self.topics.retry)]

    # ------------------------------------------------------------------ doing it

    def apply(self, plan: FlushPlan, out: Path) -> int:
        """Write every skipped record to ``out``, mark skipped parked changes dead, move the
        groups; returns the number of records written."""
        if not plan.pending:
            return 0
        codec = ChangeCodec(registry_client(self.settings))
        producer = Producer({**self.settings.kafka.client_config(), "enable.idempotence": True})
        self._applied: AppliedPositions | None = None  # opened for the first parked change skipped
        self._producer = producer
        written = 0
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as f:
            for (group, topic, partition), (fr, to) in sorted(plan.moves.items()):
                for msg in self._read(topic, partition, fr, to):
                    f.write(json.dumps(self._line(codec, group, msg), sort_keys=True) + "\n")
                    written += 1
                    if written % 10_000 == 0:
                        log.info(f"flush {self.name}: {written:,} of {plan.pending:,} records written")
            for msg in plan.waiting:
                held = HeldMessage.waiting(msg, self.topics.retry)
                assert held is not None  # the plan keeps only waiting records of ours
                f.write(json.dumps(self._line(codec, "waiting", held), sort_keys=True) + "\n")
                written += 1
            f.flush()
            os.fsync(f.fileno())
        for msg in plan.waiting:  # after the file and with the dead marks: never applied, never lost
            producer.produce(plan.waiting_topic, key=msg.key(), value=None, partition=msg.partition() or 0)
        if producer.flush(60) != 0:
            raise ConsumerError(
                f"flush {self.name}: dead marks of skipped parked changes (or the waiting records' tombstones)"
                " not written; nothing moved"
            )
        if self._applied is not None:
            self._applied.close(save=False)
        for group in sorted({g for g, _, _ in plan.moves}):
            self.move(group, {(t, p): to for (g, t, p), (_, to) in plan.moves.items() if g == group})
        return written

    def _line(self, codec: ChangeCodec, group: str, msg: Message | HeldMessage) -> dict[str, Any]:
        """One skipped record as a line of the file; a parked change's key is marked dead."""
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        line: dict[str, Any] = {"listener": self.name, "group": group, "topic": topic, "partition": partition,
                                "offset": offset, "timestamp_ms": msg.timestamp()[1]}  # fmt: skip
        try:
            if msg.value() is None:
                return {**line, "tombstone": True, "key": codec.decode_key(topic, partition, offset, msg.key()).text()}
            change = codec.decode(topic, partition, offset, msg.key(), msg.value())
        except BadChange as exc:
            return {**line, "error": str(exc), "raw_value": base64.b64encode(msg.value() or b"").decode()}
        assert change is not None
        if topic == self.topics.retry:  # its key must not stay blocked behind it
            if self._applied is None:
                self._applied = AppliedPositions(self.settings, self.topics.applied, self._producer)
            self._applied.mark_dead(change.key, change.position)
        return {**line, "key": change.key.text(), "change_type": change.change_type, "position": str(change.position),
                "after": change.after, "before": change.before}  # fmt: skip

    def _read(self, topic: str, partition: int, fr: int, to: int) -> list[Message]:
        """The records at offsets fr..to-1 (those compaction left)."""
        consumer = Consumer({**self.settings.kafka.client_config(), "group.id": f"_mcq-flush-{self.name}",
                             "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
        out = []
        try:
            assign_now(consumer, [TopicPartition(topic, partition, fr)])
            while True:
                msg = consumer.poll(15)
                if msg is None:
                    raise ConsumerError(f"flush {self.name}: reading {topic}[{partition}] stalled at {fr}")
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:  # compaction left nothing more below ``to``
                        break
                    raise ConsumerError(f"flush {self.name}: reading {topic}[{partition}]: {err}")
                if (msg.offset() or 0) >= to:
                    break
                out.append(msg)
                fr = (msg.offset() or 0) + 1
                if fr >= to:
                    break
        finally:
            consumer.close()
        return out
