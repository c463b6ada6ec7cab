"""``mcq status``: the process monitor's report, per listener: instances alive and their
last heartbeat, pending changes (lag) per topic and in total, the age of the oldest
pending change, what the instances applied, parked, failed and dead-lettered, and the
dead letters nobody has requeued or discarded yet (the dead-letter depth).

A real-time listener with no live instance is DEAD; a listener whose oldest pending
change is older than its ``stuck_after_s`` (plus, for a batch listener, the time between
two of its scheduled runs) is STUCK. Either makes ``mcq status`` exit non-zero, and so
does a listener whose unresolved dead letters reach its
``delivery.alert_after_dead_letters`` (the Cerebrum daemon's "report after N failed"):
each dead letter is a change its target does not hold, so its target is not the
source's last state until someone requeues or discards it. So does a listener whose
changes have waited on a compacted topic longer than the topic keeps tombstones
(``delete.retention.ms``): deletes written meanwhile may be gone before it reads them,
and its target would keep those keys (consumers/runtime/acks.py says how that is judged
and what repairs it) -- judged live from what is pending, and from the marks the listener
left in its applied topic when it read such changes (reported until a whole-table refresh
repairs the target, however caught up it is): one line per listener.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import KafkaException
from croniter import croniter

from consumers.runtime.acks import (
    AckMark,
    Exposure,
    ExposureMark,
    behind_too_long,
    exposure_line,
    fold_mark,
    merge_exposures,
    oldest_pending_since,
)
from consumers.runtime.dlq import DeadLetters
from consumers.runtime.heartbeat import Beat, read_beats
from consumers.runtime.parking import headers_of
from consumers.runtime.topics import tombstone_retention
from consumers.runtime.waiting import H_DUE
from mcq.config import Settings
from mcq.registry.model import Listener, Registry
from mcq.topics.listener import ListenerTopics
from mcq.topics.read import read_to_end, watermarks

try:  # confluent-kafka >= 2.x
    from confluent_kafka import ConsumerGroupTopicPartitions
except ImportError:  # pragma: no cover
    from confluent_kafka.admin import ConsumerGroupTopicPartitions  # type: ignore[attr-defined,no-redef]


@dataclass
class TopicLag:
    topic: str
    lane: str
    pending: int
    oldest_at: float | None = None


@dataclass
class PartitionLag:
    """Where a group stands in one partition, and the first record waiting after it."""

    topic: str
    partition: int
    committed: int
    """The committed offset; negative when the group never committed here."""
    pending: int
    mark: AckMark | None = None
    """What the commit says besides the offset (consumers/runtime/acks.py)."""
    first_offset: int | None = None
    first_at: float | None = None

    @property
    def since(self) -> float | None:
        """When the oldest pending record was written, or the earliest it can have been."""
        return oldest_pending_since(self.committed, self.mark, self.first_offset, self.first_at)


@dataclass
class ListenerStatus:
    name: str
    schedule: str
    verdict: str
    reason: str
    alive: list[Beat] = field(default_factory=list)
    last_heartbeat: float | None = None
    lags: list[TopicLag] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    """Entries of the dead-letter topic not yet requeued or discarded (``mcq dlq list NAME``)."""
    alert_after_dead_letters: int | None = None
    """The listener's threshold (``delivery.alert_after_dead_letters``); None: never alert."""
    tombstones_at_risk: str | None = None
    """One line when changes waited on a compacted topic longer than it keeps tombstones:
    deletes may be lost to its target; it names the statement that repairs it."""
    partitions: list[PartitionLag] = field(default_factory=list)
    """Where its groups stand in each partition of its lanes (the console's listener page)."""
    last_applied_at: float | None = None
    waiting: int = 0
    """Parked or delayed changes waiting for their due time (consumers/runtime/waiting.py)."""
    next_due: float | None = None
    """When the earliest of them comes due (epoch s)."""
    """When an instance last applied a change (the newest of their heartbeats says)."""

    @property
    def failed(self) -> int:
        """Failed delivery attempts, summed over the instances' last heartbeats."""
        return self.counters.get("failed", 0)

    @property
    def dead_letter_alert(self) -> str | None:
        """One line when the unresolved dead letters reach the threshold, else None."""
        limit = self.alert_after_dead_letters
        if limit is None or self.dead_letters < limit:
            return None
        return (
            f"listener {self.name}: {self.dead_letters} unresolved dead letter(s), "
            f"alert threshold {limit}; inspect with: mcq dlq list {self.name}"
        )

    @property
    def pending(self) -> int:
        return sum(x.pending for x in self.lags)

    @property
    def oldest_pending_age_s(self) -> float | None:
        stamps = [x.oldest_at for x in self.lags if x.oldest_at is not None]
        return time.time() - min(stamps) if stamps else None

    @property
    def failing(self) -> bool:
        """DEAD, STUCK, dead letters at the alert threshold or deletes at risk: ``mcq status`` exits 1."""
        return (
            self.verdict in ("DEAD", "STUCK")
            or self.dead_letter_alert is not None
            or self.tombstones_at_risk is not None
        )


def _lags(settings: Settings, group: str, lane: str, topics: list[str]) -> tuple[list[TopicLag], list[PartitionLag]]:
    """Pending changes per topic of a lane, and per partition with what its commit says."""
    admin = AdminClient(settings.kafka.client_config())
    consumer = Consumer(
        {**settings.kafka.client_config(), "group.id": f"_mcq-status-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    try:
        meta = consumer.list_topics(timeout=10).topics
        partitions = [
            TopicPartition(t, p) for t in topics if t in meta and meta[t].error is None for p in meta[t].partitions
        ]
        committed: dict[tuple[str, int], TopicPartition] = {}
        if partitions:
            try:
                futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)])
                for tp in futures[group].result().topic_partitions:
                    committed[(tp.topic, tp.partition)] = tp
            except KafkaException:
                pass  # no such group yet: nothing committed
        start: list[TopicPartition] = []
        by_topic: dict[str, TopicLag] = {t: TopicLag(t, lane, 0) for t in topics}
        by_partition: dict[tuple[str, int], PartitionLag] = {}
        for tp in partitions:
            low, high = watermarks(consumer, tp)
            done = committed.get((tp.topic, tp.partition))
            offset = done.offset if done is not None else -1
            at = low if offset < low else offset
            part = PartitionLag(tp.topic, tp.partition, offset, max(0, high - at))
            part.mark = AckMark.parse(done.metadata) if done is not None and offset >= 0 else None
            by_partition[(tp.topic, tp.partition)] = part
            if high > at:
                by_topic[tp.topic].pending += high - at
                start.append(TopicPartition(tp.topic, tp.partition, at))
        if start:  # the oldest pending change of each partition: the record at the committed offset
            consumer.assign(start)
            todo = {(tp.topic, tp.partition) for tp in start}
            deadline = time.monotonic() + 10
            while todo and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                key = (msg.topic() or "", msg.partition() or 0)
                if key in todo:
                    todo.discard(key)
                    stamp = msg.timestamp()[1] / 1000
                    lag = by_topic[key[0]]
                    lag.oldest_at = stamp if lag.oldest_at is None else min(lag.oldest_at, stamp)
                    by_partition[key].first_offset = msg.offset()
                    by_partition[key].first_at = stamp if msg.timestamp()[1] > 0 else None
        return list(by_topic.values()), list(by_partition.values())
    finally:
        consumer.close()


def _exposures(
    settings: Settings,
    registry: Registry,
    partitions: list[PartitionLag],
    now: float,
    known: dict[str, int | None],
) -> list[Exposure]:
    """The topics on which a listener's changes waited longer than the topic keeps tombstones."""
    judged = [p for p in partitions if p.pending > 0 and p.mark is not None]
    if not judged:
        return []
    retention = tombstone_retention(settings, sorted({p.topic for p in judged}), known)
    worst: dict[str, float] = {}
    for part in judged:
        waited = behind_too_long(part.pending, part.since, now, retention[part.topic])
        if waited is not None:
            worst[part.topic] = max(waited, worst.get(part.topic, 0.0))
    tables = {t.topic(settings.topic_prefix): t for t in registry.tables}
    return [Exposure(t, worst[t], retention[t] or 0, tables.get(t)) for t in sorted(worst)]


def _marked(settings: Settings, registry: Registry, applied_topic: str) -> list[Exposure]:
    """The exposures a listener marked in its applied topic when it read changes that had
    waited longer than their topic keeps tombstones (until a whole-table refresh clears them)."""
    marks: dict[str, ExposureMark] = {}
    for msg in read_to_end(settings, applied_topic):
        fold_mark(marks, (msg.key() or b"").decode(errors="replace"), msg.value())
    tables = {t.topic(settings.topic_prefix): t for t in registry.tables}
    return [
        m.exposure(tables.get(m.topic) or (registry.table(m.tname, m.subtype) if m.tname else None))
        for m in marks.values()
    ]


def _schedule_gap_s(listener: Listener) -> float:
    if listener.realtime:
        return 0.0
    now = datetime.now(UTC)
    it = croniter(listener.schedule, now)
    a = it.get_prev(datetime)
    b = it.get_prev(datetime)
    return (a - b).total_seconds()


def waiting_records(settings: Settings, topic: str) -> tuple[int, float | None]:
    """How many retry records wait in a listener's waiting topic, and the earliest due time."""
    latest: dict[bytes, Message] = {}
    for msg in read_to_end(settings, topic, 30):
        latest[msg.key() or b""] = msg
    dues = []
    for msg in latest.values():
        if msg.value() is None:
            continue
        due = dict(headers_of(msg)).get(H_DUE)
        try:
            dues.append(float(due) if due else 0.0)
        except ValueError:
            dues.append(0.0)
    return len(dues), min(dues) if dues else None


def listener_status(
    settings: Settings,
    registry: Registry,
    listener: Listener,
    beats: list[Beat],
    now: float | None = None,
    retentions: dict[str, int | None] | None = None,
) -> ListenerStatus:
    """``retentions``: the topics' tombstone retention already read (filled as it is read)."""
    now = now or time.time()
    topics = ListenerTopics(settings.topic_prefix, listener.name)
    realtime = [*sorted({t.topic(settings.topic_prefix) for t in registry.tables_of(listener.name)}), topics.retry]
    rt_lags, rt_parts = _lags(settings, topics.group, "realtime", realtime)
    bulk_lags, bulk_parts = _lags(settings, topics.bulk_group, "bulk", topics.bulk_lane())
    lags = rt_lags + bulk_lags
    live = _exposures(settings, registry, rt_parts + bulk_parts, now, {} if retentions is None else retentions)
    exposures = merge_exposures(live, _marked(settings, registry, topics.applied))
    mine = [b for b in beats if b.listener == listener.name]
    alive = [b for b in mine if b.alive(now)]
    counters: dict[str, int] = {}
    for beat in mine:
        for k, v in beat.counters.items():
            counters[k] = counters.get(k, 0) + v
    status = ListenerStatus(
        listener.name,
        listener.schedule,
        "OK",
        "",
        alive,
        max((b.at for b in mine), default=None),
        lags,
        counters,
        dead_letters=len(DeadLetters(settings, listener.name).entries()),
        alert_after_dead_letters=listener.delivery.alert_after_dead_letters,
        tombstones_at_risk=exposure_line(listener.name, exposures),
        partitions=rt_parts + bulk_parts,
        last_applied_at=max((b.last_applied_at for b in mine if b.last_applied_at), default=None),
    )
    status.waiting, status.next_due = waiting_records(settings, topics.waiting)
    age = status.oldest_pending_age_s
    limit = listener.delivery.stuck_after_s + _schedule_gap_s(listener)
    if listener.realtime and not alive:
        status.verdict = "DEAD"
        timeout = listener.delivery.heartbeat_timeout_s
        status.reason = (
            f"no heartbeat for {now - status.last_heartbeat:.0f} s (timeout {timeout:.0f} s)"
            if status.last_heartbeat
            else "never started"
        )
    elif age is not None and age > limit:
        status.verdict = "STUCK"
        status.reason = f"oldest pending change is {age:.0f} s old (limit {limit:.0f} s)"
    elif waiting := [b for b in alive if b.state == "target-unavailable"]:
        status.verdict = "WAITING"
        status.reason = f"target unavailable: {waiting[0].detail}" if waiting[0].detail else "target unavailable"
    elif not alive:
        status.verdict = "IDLE"
        status.reason = f"batch listener, runs {listener.schedule}"
    return status


def status_report(settings: Settings, registry: Registry, names: list[str] | None = None) -> list[ListenerStatus]:
    wanted = [x for x in registry.listeners if not names or x.name in names]
    beats = [
        beat
        for x in wanted
        for beat in read_beats(settings, ListenerTopics(settings.topic_prefix, x.name).heartbeats, x.name)
    ]
    retentions: dict[str, int | None] = {}  # read once per topic, whichever listeners share it
    return [listener_status(settings, registry, x, beats, retentions=retentions) for x in wanted]
