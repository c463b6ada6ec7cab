"""``mcq purge``: apply retention to what a stopped listener keeps in Kafka -- nothing a
target still needs is ever removed, and what is removed is written to a file first.

* **Dead letters** older than the listener's ``delivery.dead_letter_retention_days`` that
  were resolved (requeued or discarded with ``mcq dlq``). An unresolved one is a change
  its target does not hold: it is kept, whatever its age, and counted. Kafka removes a
  prefix of a partition only, so the purge stops at the first entry it must keep. The
  resolutions of the purged entries go too.
* **Applied positions of deleted keys**: a key the listener applied a delete for (``/-``)
  longer ago than its logical topic keeps tombstones (``delete.retention.ms``). No record
  of that key can reach the listener any more (the cleaner removed them), so the entry
  says nothing; a key created again starts a new one.
* **Heartbeats of instances that are gone**: the last beat of an instance that stopped,
  or stopped beating, longer ago than ``gone_after_s`` (a day by default).

Refused while an instance of the listener runs: it writes applied positions and
heartbeats of its own, and an entry removed beside its write could take a live key away.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer, TopicPartition

from consumers.exceptions import ConsumerError
from consumers.runtime.applied import parse_applied
from consumers.runtime.dlq import DeadLetter, DeadLetters
from consumers.runtime.groups import ListenerGroups
from consumers.runtime.heartbeat import parse_beat
from consumers.runtime.topics import tombstone_retention
from mcq.change import ChangeKey
from mcq.topics.exceptions import TopicReadError
from mcq.topics.read import read_to_end

log = logging.getLogger(__name__)

DAY_S = 86_400.0


@dataclass
class PurgePlan:
    listener: str
    dead_letters: list[DeadLetter] = field(default_factory=list)
    """A prefix of the dead-letter partition: resolved, older than the retention."""
    kept_unresolved: int = 0
    """Dead letters older than the retention kept because no one resolved them."""
    retention_days: float | None = None
    deleted_keys: list[str] = field(default_factory=list)
    beats: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.dead_letters) + len(self.deleted_keys) + len(self.beats)

    def lines(self) -> list[str]:
        if self.retention_days is None:
            dead = "dead letters: kept (no delivery.dead_letter_retention_days)"
        else:
            dead = f"dead letters: {len(self.dead_letters):,} resolved older than {self.retention_days:g} day(s)"
            if self.kept_unresolved:
                dead += (
                    f"; {self.kept_unresolved:,} older but unresolved kept "
                    f"(mcq dlq list {self.listener}: requeue or discard them)"
                )
        return [
            dead,
            f"applied positions: {len(self.deleted_keys):,} of keys deleted longer ago than their topic keeps deletes",
            f"heartbeats: {len(self.beats):,} of instances gone",
        ]


@dataclass
class Purge(ListenerGroups):
    gone_after_s: float = DAY_S

    def plan(self, now: float | None = None) -> PurgePlan:
        """What a purge would remove now; raises :class:`ListenerRunning` while it runs."""
        self.refuse_while_running("purge")
        now = time.time() if now is None else now
        listener = self.registry.listener(self.name)
        assert listener is not None
        plan = PurgePlan(self.name, retention_days=listener.delivery.dead_letter_retention_days)
        try:
            if plan.retention_days is not None:
                self._plan_dead_letters(plan, now - plan.retention_days * DAY_S)
            plan.deleted_keys = self._deleted_keys(now)
            plan.beats = self._gone_beats(now)
        except TopicReadError as exc:
            raise ConsumerError(f"purge {self.name}: {exc}") from None
        return plan

    def _plan_dead_letters(self, plan: PurgePlan, before: float) -> None:
        entries = sorted(DeadLetters(self.settings, self.name).entries(include_resolved=True), key=_order)
        old = [e for e in entries if _failed_at(e) < before]
        plan.kept_unresolved = sum(1 for e in old if e.resolution is None)
        by_partition: dict[int, list[DeadLetter]] = {}
        for e in entries:
            by_partition.setdefault(e.partition, []).append(e)
        for partition_entries in by_partition.values():
            for e in partition_entries:  # a prefix only: Kafka deletes records below an offset
                if e.resolution is None or _failed_at(e) >= before:
                    break
                plan.dead_letters.append(e)

    def _deleted_keys(self, now: float) -> list[str]:
        prefix = self.settings.topic_prefix
        topic_of = {t.ref: t.topic(prefix) for t in self.registry.tables_of(self.name)}
        retention = tombstone_retention(self.settings, sorted(set(topic_of.values())), {})
        last: dict[str, Message] = {}
        for msg in read_to_end(self.settings, self.topics.applied, 120):
            text = (msg.key() or b"").decode()
            if text.startswith("{"):
                last[text] = msg
        out = []
        for text, msg in last.items():
            value = msg.value()
            if value is None or parse_applied(value)[2]:
                continue  # already forgotten, or at the target
            try:
                topic = topic_of.get(ChangeKey.from_text(text).ref)
            except (ValueError, KeyError, TypeError):
                continue
            keep_ms = retention.get(topic) if topic else None
            stamp = msg.timestamp()[1]
            if keep_ms is not None and stamp > 0 and now * 1000 - stamp > keep_ms:
                out.append(text)
        return sorted(out)

    def _gone_beats(self, now: float) -> list[str]:
        """Beats of instances gone for longer than ``gone_after_s``, and beats that are not
        beats of this listener at all (malformed: the monitor skips them)."""
        latest: dict[str, bytes] = {}
        for msg in read_to_end(self.settings, self.topics.heartbeats, 60):
            key = (msg.key() or b"").decode("utf-8", "replace")
            if msg.value() is None:
                latest.pop(key, None)
            else:
                latest[key] = msg.value() or b""
        gone = []
        for key, value in latest.items():
            try:
                beat = parse_beat(key, value, self.name)
            except ValueError:
                gone.append(key)
                continue
            if not beat.alive(now) and now - beat.at > self.gone_after_s:
                gone.append(key)
        return sorted(gone)

    def apply(self, plan: PurgePlan, out: Path) -> int:
        """Write what goes to ``out`` (JSON Lines), then remove it."""
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as f:
            for e in plan.dead_letters:
                f.write(json.dumps(_dead_letter_line(self.topics.dlq, e), sort_keys=True) + "\n")
            for text in plan.deleted_keys:
                f.write(json.dumps({"topic": self.topics.applied, "key": text, "what": "applied position"}) + "\n")
            for key in plan.beats:
                f.write(json.dumps({"topic": self.topics.heartbeats, "key": key, "what": "heartbeat"}) + "\n")
        producer = Producer({**self.settings.kafka.client_config(), "enable.idempotence": True})
        for text in plan.deleted_keys:
            producer.produce(self.topics.applied, key=text.encode(), value=None)
        for key in plan.beats:
            producer.produce(self.topics.heartbeats, key=key.encode(), value=None)
        for e in plan.dead_letters:
            producer.produce(self.topics.dlq_resolved, key=e.id.encode(), value=None)
        if producer.flush(60) != 0:
            raise ConsumerError(f"purge {self.name}: not every removal was written; run the purge again")
        if plan.dead_letters:
            below: dict[int, int] = {}
            for e in plan.dead_letters:
                below[e.partition] = max(below.get(e.partition, 0), e.offset + 1)
            tps = [TopicPartition(self.topics.dlq, p, o) for p, o in sorted(below.items())]
            for tp, future in self.admin.delete_records(tps).items():
                try:
                    future.result(30)
                except Exception as exc:  # KafkaException or a timeout: said, not hidden
                    raise ConsumerError(f"purge {self.name}: deleting {tp.topic}[{tp.partition}]: {exc}") from None
        return plan.total


def _order(e: DeadLetter) -> tuple[int, int]:
    return e.partition, e.offset


def _failed_at(e: DeadLetter) -> float:
    from consumers.runtime.parking import H_FAILED_AT

    return int(e.headers.get(H_FAILED_AT, "0") or 0) / 1000


def _dead_letter_line(topic: str, e: DeadLetter) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": e.partition,
        "offset": e.offset,
        "what": "dead letter",
        "key_hex": e.key.hex() if e.key else None,
        "value_hex": e.value.hex() if e.value else None,
        "headers": e.headers,
        "resolution": e.resolution,
    }
