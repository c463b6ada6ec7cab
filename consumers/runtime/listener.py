"""``mcq listen NAME``: the listener loop (the paper's Get_Changes / Ack_Change).

Two consumer groups per listener, both named after it:

* the **real-time lane** (``<prefix>.<NAME>``): the logical topics of its interests and
  its retry topic;
* the **bulk lane** (``<prefix>.<NAME>.bulk``): its bulk topic and the shared refresh
  requests, consumed only while the real-time lane has nothing waiting (it goes on
  fetching meanwhile, but is not read), a small batch at a time, so a mass load never
  delays a password change by more than one bulk batch.

Per batch: decode, keep the changes an interest (and its rule) selects, skip those not
newer than what was applied for their key, apply the rest through the adapter, then
flush what the batch produced (parked changes, dead letters, applied positions) and
only then commit the offsets: the commit is the acknowledgement, and a change is never
acknowledged before the target, the retry lane or the dead-letter topic holds it. Each
commit carries when it was made and how old what is left after it is (its offset
metadata, consumers/runtime/acks.py), so ``mcq status`` can tell a listener that stayed
behind longer than a topic keeps its tombstones. The listener judges the same when it
reads a partition it had been reading before: changes that waited that long leave a mark
in its applied topic (flushed before the commit past them) that ``mcq status`` reports
until a whole-table refresh of the table has been applied here.

A failing change is retried in place with back-off and jitter, then parked in the retry
lane with a hold-until time, and dead-lettered after ``max_attempts`` delivery rounds.
A parked change whose key has since been applied from a newer change is superseded.
An unavailable target is waited for, change by change, with nothing parked.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from consumers import state_snapshot
from consumers.adapter import Adapter, make_adapter
from consumers.exceptions import (
    AdapterError,
    ChangeFailed,
    ChangeRejected,
    ConsumerError,
    ListenerConfigError,
    TargetUnavailable,
)
from consumers.projection import StateStore
from consumers.runtime.acks import AckMark, ExposureMark, exposure_line, waited_past_retention
from consumers.runtime.applied import AppliedPositions
from consumers.runtime.health import HealthServer, ListenerMetrics
from consumers.runtime.heartbeat import Counters, Heartbeat
from consumers.runtime.outage import Stopped, until_kafka_answers
from consumers.runtime.pacing import BatchPacer, membership_lost
from consumers.runtime.parking import Origin, backoff_s, failure_headers, headers_of, hold_until_ms
from consumers.runtime.refresh import RefreshResolver
from consumers.runtime.topics import tombstone_retention
from consumers.runtime.view import ListenerView, Verdict
from mcq.change import POSITION_HEADER, BadChange, Change, ChangeCodec, Position
from mcq.config import Settings
from mcq.contract import SchemaRegistryUnavailable, register_topic, registry_client
from mcq.registry.model import Listener, Registry
from mcq.registry.store import RegistryReader
from mcq.topics.exceptions import TopicSettingsError
from mcq.topics.listener import ListenerTopics, interest_topics
from mcq.topics.plan import apply_topics, plan_topics
from mcq.topics.read import RenewingAdmin, all_watermarks

Report = Callable[[str], None]
TP = tuple[str, int]
_T = TypeVar("_T")
# while the target is down: one line when it goes, one when it is back, and this reminder
WAIT_REMINDER_S = 60.0


@dataclass
class _Item:
    """One record of a batch on its way through the loop (a refresh request becomes one
    item per key it names, each with the request's record)."""

    msg: Message
    origin: Origin
    change: Change | None = None
    retry_lane: bool = False
    verdict: Verdict | None = None


class ListenerRuntime:
    """One instance of one listener."""

    def __init__(
        self,
        settings: Settings,
        name: str,
        *,
        registry: Registry | None = None,
        registry_topic: str | None = None,
        adapter: Adapter | None = None,
        http_host: str = "127.0.0.1",
        http_port: int | None = 0,
        report: Report = print,
    ) -> None:
        self.settings = settings
        self.name = name
        self.report = report
        self.topics = ListenerTopics(settings.topic_prefix, name)
        self._reader: RegistryReader | None = None
        if registry is None:  # the shared store: interests added later reach us
            self._reader = RegistryReader(settings, registry_topic)
            self._reader.catch_up()
            registry = self._reader.registry()
        self.registry = registry
        self.listener = self._listener(registry)
        self.delivery = self.listener.delivery
        self.view = ListenerView(registry, name)
        self.refresher = RefreshResolver(registry, self.view, self._open_store)
        self.adapter = adapter or make_adapter(self.listener, settings)
        self.adapter.bind(registry)
        self.counters = Counters()
        self.metrics = ListenerMetrics(name)
        self._stop = threading.Event()
        self._held: dict[TP, float] = {}  # retry-lane partitions paused until (epoch s)
        self._admin = RenewingAdmin(settings.kafka.client_config())  # offsets without waiting behind a fetch
        self._target_up = True
        self._down_since: float | None = None  # since when the target is down (said), until a change is applied
        self._reminded_at = 0.0
        self._wait_attempt = 0
        self._last_tick = time.monotonic()
        self._last_applied_at: float | None = None
        self._realtime_topics: list[str] = []
        self._bulk_busy = False
        self._undone: list[_Item] = []
        self._ends: dict[str, dict[TP, int]] = {"realtime": {}, "bulk": {}}
        self._done: dict[TP, int] = {}  # next offset to process, per partition handled here
        self._acks: dict[TP, str] = {}  # the offset metadata committed with it (consumers/runtime/acks.py)
        self._watched: set[TP] = set()  # read before (a commit with a mark): waits judged (_judge_waits)
        self._retention: dict[str, int | None] = {}  # delete.retention.ms per topic, read once
        interval = self.delivery.max_poll_interval_s
        self._pace = {
            "realtime": BatchPacer(self.delivery.batch_size, interval),
            "bulk": BatchPacer(self.delivery.bulk_batch_size, interval),
        }
        self._waited_s = 0.0  # time spent waiting for the target, since the listener started
        self._health: HealthServer | None = None
        if http_port is not None:
            self._health = HealthServer(http_host, http_port, self.live, self.ready, self.metrics.registry)

    # ------------------------------------------------------------------ registry

    def _listener(self, registry: Registry) -> Listener:
        listener = registry.listener(self.name)
        if listener is None:
            known = ", ".join(x.name for x in registry.listeners) or "none"
            raise ListenerConfigError(f"no listener named {self.name!r} in the registry (known: {known})")
        return listener

    def realtime_topics(self) -> list[str]:
        return [*interest_topics(self.registry, self.topics), self.topics.retry]

    def _open_store(self, refs: list[str]) -> StateStore:
        return StateStore(self.settings, self.registry, refs)

    def _reload_registry(self) -> None:
        if self._reader is None or not self._reader.poll(0):
            return
        try:
            registry = self._reader.registry()
            listener = self._listener(registry)
        except (ListenerConfigError, ValueError) as exc:
            self.report(f"listener {self.name}: registry change not taken ({exc}); keeping the previous one")
            return
        self.registry, self.listener, self.delivery = registry, listener, listener.delivery
        self.view = ListenerView(registry, self.name)
        self.refresher.close()
        self.refresher = RefreshResolver(registry, self.view, self._open_store)
        self.adapter.bind(registry)
        topics = self.realtime_topics()
        if topics != self._realtime_topics:
            self._ensure_topics()
            self.report(f"listener {self.name}: interests changed, subscribing to {', '.join(topics)}")
            self._realtime_topics = topics
            self._rt.subscribe(topics, **self._rebalance)

    # ------------------------------------------------------------------ probes

    def live(self) -> bool:
        """The loop turns (a wait for an unavailable target turns it too)."""
        return time.monotonic() - self._last_tick < max(60.0, 3 * self.delivery.heartbeat_timeout_s)

    def ready(self) -> bool:
        return self._target_up and bool(self._rt_assignment or self._bulk_assignment)

    @property
    def _rt_assignment(self) -> list[TopicPartition]:
        return list(self._rt.assignment()) if hasattr(self, "_rt") else []

    @property
    def _bulk_assignment(self) -> list[TopicPartition]:
        return list(self._bulk.assignment()) if hasattr(self, "_bulk") else []

    def stop(self) -> None:
        """Stop taking new work; the batch in flight finishes (or is abandoned) and commits."""
        self._stop.set()

    # ------------------------------------------------------------------ set-up

    def _ensure_topics(self) -> None:
        names = {t.topic(self.settings.topic_prefix) for t in self.registry.tables_of(self.name)}
        logical = [s for s in plan_topics(self.registry, self.settings.topic_prefix) if s.name in names]
        try:
            report = apply_topics(self.settings, [*logical, *self.topics.specs()])
        except TopicSettingsError as exc:
            raise ListenerConfigError(f"listener {self.name}: {exc}") from None
        for line in report.drift:
            self.report(f"listener {self.name}: topic drift (left as it is): {line}")
        # bulk work is written as change records: its subjects exist before anyone writes
        # (parked and dead changes keep their original bytes and schema ids)
        register_topic(registry_client(self.settings), self.topics.bulk)

    def _consumer(self, group: str, extra: dict[str, Any] | None = None) -> Consumer:
        return Consumer(
            {
                **self.settings.kafka.client_config(),
                "group.id": group,
                "client.id": f"{group}-{self._heartbeat.instance}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky",
                # a batch (a wait for an unavailable target included) does not poll: how
                # long it may take before the group gives its partitions to another instance
                "max.poll.interval.ms": int(self.delivery.max_poll_interval_s * 1000),
                # a killed instance's partitions move to the others within seconds
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 2_000,
                # a fetch left waiting at the broker was now and then answered only at its
                # end (librdkafka's 500 ms) although a record had come: a real-time change
                # then waited 0.5 s (bench/batch_jobs.py; 100 ms: max 0.12 s, idle or loaded)
                "fetch.wait.max.ms": 100,
                **(extra or {}),
            }
        )

    def _kafka(self, what: str, call: Callable[[], _T]) -> _T:
        """``call()``, waiting out a broker that does not answer (its restart): the
        listener stays up, says so once, and goes on when the broker is back."""

        def tick() -> None:
            self._last_tick = time.monotonic()

        try:
            return until_kafka_answers(
                what, call, stop=self._stop, report=lambda line: self.report(f"listener {self.name}: {line}"), tick=tick
            )
        except Stopped:
            raise _Abandon() from None

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # what the previous owner applied is known before its partitions are read here
        self._kafka("reading the applied positions", self.applied.catch_up)
        consumer.incremental_assign(partitions)

    @property
    def _rebalance(self) -> dict[str, Callable[[Consumer, list[TopicPartition]], None]]:
        return {"on_assign": self._on_assign, "on_revoke": self._on_revoke, "on_lost": self._on_lost}

    def _lane(self, consumer: Consumer) -> str:
        return "bulk" if consumer is getattr(self, "_bulk", None) else "realtime"

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # offsets are committed at the end of every batch, so nothing processed is pending;
        # commit once more in case the last commit failed (the next owner starts there)
        lane = self._lane(consumer)
        mine = self._offsets([(tp.topic, tp.partition) for tp in partitions if (tp.topic, tp.partition) in self._done])
        if mine:
            self._commit(consumer, mine, lane)
        self._forget(partitions, lane)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # the group gave them to another instance already: nothing may be committed for them
        lane = self._lane(consumer)
        self.report(
            f"listener {self.name}: {lane} lane: {len(partitions)} partition(s) taken away by the group "
            "(this instance lost its membership: a batch past max_poll_interval_s, a session timed out or a "
            "broker restarted); read again from the group's commit when assigned again"
        )
        self._forget(partitions, lane)

    def _forget(self, partitions: list[TopicPartition], lane: str) -> None:
        for tp in partitions:
            self._held.pop((tp.topic, tp.partition), None)
            self._done.pop((tp.topic, tp.partition), None)
            self._acks.pop((tp.topic, tp.partition), None)
            self._watched.discard((tp.topic, tp.partition))
            self._ends[lane].pop((tp.topic, tp.partition), None)

    # ------------------------------------------------------------------ the loop

    def run(self, until_caught_up: bool = False) -> int:
        """Run until stopped (SIGTERM/SIGINT) or, with ``until_caught_up``, until what was
        pending at start has been handled. Returns the process exit code."""
        self._ensure_topics()
        self._producer = Producer({**self.settings.kafka.client_config(), "enable.idempotence": True, "linger.ms": 5})
        self._heartbeat = Heartbeat(
            self._producer,
            self.topics.heartbeats,
            self.name,
            self.delivery.heartbeat_interval_s,
            self.delivery.heartbeat_timeout_s,
        )
        self.codec = ChangeCodec(registry_client(self.settings))
        snapshot = state_snapshot.path_of(self.settings, self.name, "applied")
        self.applied = AppliedPositions(self.settings, self.topics.applied, self._producer, snapshot)
        self.applied.catch_up()
        self._rt = self._consumer(self.topics.group)
        self._bulk = self._consumer(self.topics.bulk_group)
        self._realtime_topics = self.realtime_topics()
        self._rt.subscribe(self._realtime_topics, **self._rebalance)
        self._bulk.subscribe(self.topics.bulk_lane(), **self._rebalance)
        if self._health:
            self._health.start()
        self.report(
            f"listener {self.name} ({self.listener.adapter.type}, instance {self._heartbeat.instance}): "
            f"real-time lane {', '.join(self._realtime_topics)}; bulk lane {', '.join(self.topics.bulk_lane())}"
            + (f"; health {self._health.address}" if self._health else "")
        )
        clean = False  # an error ends the run: the applied positions' snapshot is not saved
        try:
            self._wait_for_target(None)
            if self.settings.state_dir is not None:
                self.report(f"listener {self.name}: applied positions: {self.applied.restored}")
            note = self.adapter.started_from()
            if note:
                self.report(f"listener {self.name}: {note}")
            self._beat("running", force=True)
            while not self._stop.is_set():
                self._last_tick = time.monotonic()
                self._reload_registry()
                self._release_held()
                self._beat("running")
                # a batch that reached the ends ends the run at once (not after an empty poll)
                if self._step() and not until_caught_up:
                    continue
                if until_caught_up and self._caught_up():
                    self.report(f"listener {self.name}: caught up; {self.summary()}")
                    break
            clean = True
        except _Abandon:
            self.report(f"listener {self.name}: stopped while the target was unavailable; the rest is left for later")
            clean = True
        finally:
            self._shutdown(clean)
        return 0

    def _step(self) -> bool:
        """One batch from the real-time lane, else from the bulk lane; True if work was done."""
        # while the bulk lane has work, only take what the real-time lane has fetched already
        # The bulk consumer is left to fetch meanwhile, never paused: pausing drops what it
        # has fetched, and fetching it again after every real-time batch loaded the broker
        # enough to delay real-time changes by 0.5 s now and then (bench/batch_jobs.py);
        # what it may hold is bounded by queued.max.messages.kbytes.
        msgs = self._take(self._rt, self._pace["realtime"].size, 0 if self._bulk_busy else 0.25)
        if msgs:
            self._process(self._rt, msgs, "realtime")
            return True
        if self._realtime_backlog():
            self._bulk_busy = False  # the next real-time poll may wait for the fetch in flight
            return False
        msgs = self._take(self._bulk, self._pace["bulk"].size, 0.05)
        self._bulk_busy = bool(msgs)
        if msgs:
            self._process(self._bulk, msgs, "bulk")
            return True
        return False

    @staticmethod
    def _take(consumer: Consumer, most: int, timeout: float) -> list[Message]:
        """Wait up to ``timeout`` for the first record, then take what is already fetched
        (consume() alone would wait for a full batch or the whole timeout)."""
        first = consumer.poll(timeout)
        if first is None:
            return []
        return [first, *consumer.consume(most - 1, 0)] if most > 1 else [first]

    def _realtime_backlog(self) -> bool:
        """Whether a real-time partition (a retry partition on hold aside) has records we
        have not processed, by the high watermark of the last fetch: no broker round trip."""
        self._learn(self._rt, None, list(self._rt_assignment))
        for tp in self._rt_assignment:
            key = (tp.topic, tp.partition)
            if key in self._held:
                continue
            _, high = self._rt.get_watermark_offsets(tp, cached=True)
            if high > 0 and high > self._done.get(key, self._committed_or_zero(self._rt, tp)):
                return True
        return False

    def _committed_or_zero(self, consumer: Consumer, tp: TopicPartition) -> int:
        key = (tp.topic, tp.partition)
        if key not in self._done:
            self._learn(consumer, None, [tp])
        return self._done[key]

    def _learn(self, consumer: Consumer, lane: str | None, tps: list[TopicPartition]) -> None:
        """What the group committed, and (for ``lane``) where each partition ended, for the
        partitions not seen yet -- asked for all of them at once."""
        new = [tp for tp in tps if (tp.topic, tp.partition) not in self._done]
        ends = [tp for tp in tps if lane is not None and (tp.topic, tp.partition) not in self._ends[lane]]
        if new or ends:  # (called at every step: nothing to ask, most of the time)
            self._kafka("reading committed offsets", partial(self._learn_now, consumer, lane, new, ends))

    def _learn_now(
        self, consumer: Consumer, lane: str | None, new: list[TopicPartition], ends: list[TopicPartition]
    ) -> None:
        marks = all_watermarks(self._admin, list({(t.topic, t.partition): t for t in new + ends}.values()))
        for tp in ends:
            self._ends[lane][(tp.topic, tp.partition)] = marks[(tp.topic, tp.partition)][1]  # type: ignore[index]
        if not new:
            return
        for committed in consumer.committed([TopicPartition(t.topic, t.partition) for t in new], timeout=10):
            key = (committed.topic, committed.partition)
            self._done[key] = committed.offset if committed.offset >= 0 else marks[key][0]
            if committed.offset >= 0 and committed.metadata:
                self._acks[key] = committed.metadata  # committed again unchanged until records are handled
                if AckMark.parse(committed.metadata) is not None:
                    self._watched.add(key)  # read here before: how long its changes waited is judged

    def _caught_up(self) -> bool:
        """Everything that was pending when we first saw each partition is handled."""
        for lane, consumer in (("realtime", self._rt), ("bulk", self._bulk)):
            assigned = list(consumer.assignment())
            if not assigned:
                return False
            self._learn(consumer, lane, [tp for tp in assigned if (tp.topic, tp.partition) not in self._held])
            for tp in assigned:
                key = (tp.topic, tp.partition)
                if key in self._held:
                    continue  # parked changes not yet due wait for the next run
                if self._committed_or_zero(consumer, tp) < self._ends[lane][key]:
                    return False
        return True

    def _release_held(self) -> None:
        now = time.time()
        due = [tp for tp, until in self._held.items() if until <= now]
        for topic, partition in due:
            del self._held[(topic, partition)]
            self._rt.resume([TopicPartition(topic, partition)])

    # ------------------------------------------------------------------ a batch

    def _process(self, consumer: Consumer, msgs: list[Message], lane: str) -> None:
        """Decode, judge each change against this listener's view and what it applied, apply
        the newest change per key, then flush and commit (the acknowledgement)."""
        started, waited = time.monotonic(), self._waited_s
        self.applied.refresh()  # what the other instances resolved meanwhile
        todo: dict[str, list[_Item]] = {}  # key text -> the key's changes in this batch
        blocked: set[TP] = set()
        last: dict[TP, int] = {}
        stamps: dict[TP, int] = {}  # timestamp (ms) of the last record handled, per partition
        firsts: dict[TP, Message] = {}  # the first record handled, per partition
        requests: list[_Item] = []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal():
                    raise ConsumerError(f"listener {self.name}: consuming {msg.topic()}[{msg.partition()}]: {err}")
                if err.code() == KafkaError._MAX_POLL_EXCEEDED:
                    continue  # said by the refused commit and the partitions taken away
                self.report(f"listener {self.name}: {lane} lane: {err.str()}")
                continue
            tp = (msg.topic() or "", msg.partition() or 0)
            if tp in blocked:
                continue  # behind a change on hold: read again after the hold
            item = _Item(msg, Origin.of(msg), retry_lane=tp[0] == self.topics.retry)
            if item.retry_lane:
                until = hold_until_ms(msg) / 1000
                if until > time.time():
                    consumer.pause([TopicPartition(*tp)])
                    consumer.seek(TopicPartition(tp[0], tp[1], msg.offset() or 0))
                    self._held[tp] = until
                    blocked.add(tp)
                    continue
            last[tp] = msg.offset() or 0
            stamps[tp] = msg.timestamp()[1]
            firsts.setdefault(tp, msg)
            try:
                item.change = self._decode(msg)
            except BadChange as exc:
                self._dead_letter(item, str(exc), "bad-record")
                continue
            if item.change is None:
                continue
            if item.origin.topic == self.topics.refresh:
                requests.append(item)
                continue
            if item.origin.topic == self.topics.bulk:  # a refresh's state or delete (mcq refresh)
                item.change = dataclasses.replace(item.change, cause="refresh")
            self._candidate(item, todo)
        self._judge_waits(consumer, firsts)
        if requests:
            self.refresher.prepare([r.change for r in requests if r.change is not None])
            present = list(self.applied.present_keys())
            for request in requests:
                assert request.change is not None
                for change in self.refresher.resolve(request.change, present):
                    self._candidate(_Item(request.msg, request.origin, change, request.retry_lane), todo)
        try:
            self._apply_in_rounds(todo, lane)
            self._clear_exposures(requests)
        except _Abandon:
            # stopping while the target is down: acknowledge only what was handled
            for item in self._undone:
                tp = (item.msg.topic() or "", item.msg.partition() or 0)
                last[tp] = min(last[tp], (item.msg.offset() or 0) - 1)
                stamps[tp] = min(stamps[tp], item.msg.timestamp()[1])  # what is left starts here
            raise
        finally:
            self._flush()
            now = time.time()
            for tp, offset in last.items():
                self._done[tp] = offset + 1
                self._acks[tp] = AckMark(now, stamps[tp] / 1000 if stamps[tp] > 0 else None).text()
            taken = self._commit(consumer, self._offsets(list(last)), lane)
            self._paced(lane, taken, time.monotonic() - started, self._waited_s - waited)

    def _paced(self, lane: str, taken: bool, took_s: float, waited_s: float) -> None:
        """Judge the batch's length against the poll interval once its commit is answered."""
        pacer, work_s = self._pace[lane], took_s - waited_s
        if taken:
            pacer.done(work_s)
            return
        self.metrics.removed.labels(listener=self.name, lane=lane).inc()
        halved = pacer.removed(work_s)
        self.report(
            f"listener {self.name}: {lane} lane: the group removed this instance during a batch of {took_s:.0f} s "
            f"({waited_s:.0f} s of it waiting for the target; max_poll_interval_s {pacer.interval_s:g}): its "
            "commit was refused, and its records are read again (the applied positions skip what it applied)"
            + (f"; batches of at most {pacer.size} from now on" if halved else "")
        )

    def _judge_waits(self, consumer: Consumer, firsts: dict[TP, Message]) -> None:
        """Whether the changes read now on a logical partition this listener had been reading
        before waited longer than their topic keeps tombstones (consumers/runtime/acks.py):
        judged against the commit (or the last batch) they follow, by their first record.
        If so, one line, and a mark in the applied topic (flushed with the batch, before
        its commit) that ``mcq status`` reports until a whole-table refresh clears it."""
        tables = {t.topic(self.settings.topic_prefix): t for t in self.registry.tables_of(self.name)}
        now = time.time()
        for tp, msg in firsts.items():
            table = tables.get(tp[0])
            if table is None:
                continue  # the retry lane and the bulk lane keep their records until consumed
            self._committed_or_zero(consumer, TopicPartition(*tp))  # what the commit says, first time here
            if tp not in self._watched:
                continue
            stamp = msg.timestamp()[1]
            retention = tombstone_retention(self.settings, [tp[0]], self._retention)[tp[0]]
            found = waited_past_retention(
                self._done[tp], self._acks.get(tp), msg.offset(), stamp / 1000 if stamp > 0 else None, now, retention
            )
            if found is None or retention is None:
                continue
            mark = ExposureMark(tp[0], found[0], found[1], retention, table.tname, table.subtype)
            line = exposure_line(self.name, [mark.exposure(table)])
            if self.applied.mark_exposed(mark) and line:
                self.report(line)

    def _clear_exposures(self, requests: list[_Item]) -> None:
        """A whole-table refresh applied here repairs what its tables' topics may have lost:
        their exposure marks are cleared, once the refresh's changes have been applied."""
        for request in requests:
            assert request.change is not None
            for table in self.refresher.whole_tables(request.change.key):
                topic = table.topic(self.settings.topic_prefix)
                if self.applied.clear_exposed(topic):
                    self.report(
                        f"listener {self.name}: whole-table refresh of {table.ref} applied; "
                        f"deletes missed on {topic} repaired, no longer reported"
                    )

    def _candidate(self, item: _Item, todo: dict[str, list[_Item]]) -> None:
        """Keep a change if it is news for this listener: of a table it covers, and newer
        than what it applied for the key."""
        change = item.change
        assert change is not None
        key = change.key
        if not self.view.covers(key):
            self._count("filtered")
            return
        applied = self.applied.get(key)
        # a refresh repairs: it re-applies the state the listener already applied
        lenient = change.cause in ("refresh", "tombstone")
        if applied is not None and (change.position < applied or (change.position == applied and not lenient)):
            self._count("superseded" if item.retry_lane else "skipped")
            return
        parked = self.applied.parked(key)
        if item.retry_lane and parked is not None and parked > change.position:
            self._count("superseded")  # a newer change of the key waits behind it and carries the state
            return
        todo.setdefault(key.text(), []).append(item)

    def _apply_in_rounds(self, todo: dict[str, list[_Item]], lane: str) -> None:
        """Apply a batch in rounds holding at most one change per key, each key's changes in
        source order: a change that fails is parked before the next change of its key is
        judged, and that one then queues behind it — an older change of a key never reaches
        the target after a newer one, even through retries in place."""
        queues = [
            sorted(items, key=lambda i: i.change.position if i.change else Position(0, 0)) for items in todo.values()
        ]
        try:
            while queues:
                round_ = [q.pop(0) for q in queues]
                queues = [q for q in queues if q]
                self._apply([d for item in round_ if (d := self._decide(item)) is not None], lane)
        except _Abandon:
            self._undone = [*self._undone, *(i for q in queues for i in q)]  # not handled: read again
            raise

    def _decide(self, item: _Item) -> _Item | None:
        """What the newest change of a key is to this listener: a wait behind the key's
        parked change, nothing (outside its view), a delay, an expiry, or work."""
        change = item.change
        assert change is not None
        key = change.key
        if not item.retry_lane and self.applied.blocked(key):
            self._queue(item, "waiting", f"waiting behind a parked change of {key}", time.time())
            return None
        # a refresh's delete is said even to a target the listener thinks has nothing: it repairs
        present = self.applied.present(key) or (change.cause == "refresh" and change.change_type == "DELETE")
        seen, verdict = self.view.see(change, present)
        if seen is None:
            self._count("filtered")
            return None
        item = _Item(item.msg, item.origin, seen, item.retry_lane, verdict)
        due = self._due_at(seen, verdict.delay_s)
        if due is not None and due > time.time():
            self._queue(item, "delayed", f"delayed {verdict.delay_s:g} s after its commit", due)
            return None
        if self._expired(item):
            return None
        return item

    @staticmethod
    def _due_at(change: Change, seconds: float | None) -> float | None:
        return change.entry_time.timestamp() + seconds if seconds else None

    def _expired(self, item: _Item) -> bool:
        """AQ's expiration: a change not applied in time goes to the dead-letter topic."""
        assert item.change is not None and item.verdict is not None
        limit = item.verdict.expire_after_s
        deadline = self._due_at(item.change, limit)
        if deadline is None or deadline > time.time():
            return False
        late = time.time() - item.change.entry_time.timestamp()
        self._dead_letter(item, f"expired: not applied within {limit:g} s of its commit ({late:.1f} s ago)", "expired")
        return True

    def _queue(self, item: _Item, kind: str, why: str, until: float) -> None:
        """Into the retry lane behind the key's parked changes (or until a delay is over);
        the key is blocked until the retry lane has resolved it."""
        assert item.change is not None
        self._producer.produce(
            self.topics.retry,
            key=item.msg.key(),
            value=item.msg.value(),
            headers=failure_headers(
                self.name, item.origin, item.origin.attempts, why, kind, int(until * 1000), str(item.change.position)
            ),
        )
        self.applied.mark_parked(item.change.key, item.change.position)
        self._count("queued")

    def _decode(self, msg: Message) -> Change | None:
        """Decode a record; while the schema registry does not answer, wait for it."""
        attempt = 0
        while True:
            try:
                if msg.value() is None:
                    return self._tombstone(msg)
                return self.codec.decode(msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key(),
                                         msg.value())  # fmt: skip
            except SchemaRegistryUnavailable as exc:
                self.report(f"listener {self.name}: {exc}; retrying")
                self._last_tick = time.monotonic()
                if self._stop.wait(backoff_s(attempt, 0.5, 15.0)):
                    raise _Abandon() from None
                attempt += 1

    def _tombstone(self, msg: Message) -> Change:
        """A tombstone is a delete: compaction may have removed the DELETE record before it
        (a listener that was behind sees only the tombstone). Its position is in a header;
        without one (written before positions were), it stands at the key's applied position."""
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        key = self.codec.decode_key(topic, partition, offset, msg.key())
        text = headers_of(msg).get(POSITION_HEADER)
        try:
            position = Position.parse(text) if text else (self.applied.get(key) or Position(0, 0))
        except ValueError:
            where = f"{topic}[{partition}]@{offset}"
            raise BadChange(where, f"header {POSITION_HEADER} is not a position: {text!r}") from None
        stamp = msg.timestamp()[1]
        return Change(
            key=key,
            change_type="DELETE",
            position=position,
            entry_time=datetime.fromtimestamp(stamp / 1000, UTC) if stamp > 0 else datetime.now(UTC),
            source_table=key.ref,
            origin="tombstone",
            cause="tombstone",
            topic=topic,
            partition=partition,
            offset=offset,
        )

    def _apply(self, items: list[_Item], lane: str) -> None:
        start = 0
        while start < len(items):
            items = items[:start] + [i for i in items[start:] if not self._expired(i)]
            if start >= len(items):
                break
            self._undone = items[start:]
            changes = [i.change for i in items[start:] if i.change is not None]
            outcomes = self._try_batch(changes)
            done: list[_Item] = []  # applied: recorded together, before a failure's retries
            for item, outcome in zip(items[start:], outcomes, strict=True):
                if isinstance(outcome, TargetUnavailable):
                    self._applied(done, lane)
                    done = []
                    self._wait_for_target(outcome, give_up=partial(self._any_overdue, items[start:]))
                    items = items[:start] + self._still_news(items[start:])
                    break
                start += 1
                if outcome is None:
                    done.append(item)
                    continue
                self._applied(done, lane)
                done = []
                self._failed(item, outcome, lane)
            self._applied(done, lane)
        self._undone = []

    def _still_news(self, items: list[_Item]) -> list[_Item]:
        """After a wait for the target: the changes no other instance applied a newer
        change of meanwhile (this one may have been removed from the group while it
        waited, and its partitions' changes applied elsewhere)."""
        self.applied.refresh()
        out = []
        for item in items:
            assert item.change is not None
            applied = self.applied.get(item.change.key)
            if applied is not None and applied > item.change.position:
                self._count("superseded")
                continue
            out.append(item)
        return out

    def _try_batch(self, changes: list[Change]) -> list[AdapterError | None]:
        """The adapter's outcomes; an adapter that raises 'unavailable' (e.g. on reconnecting) instead of
        answering it per change is taken at its word for the whole batch."""
        try:
            outcomes = self.adapter.apply_batch(changes)
        except TargetUnavailable as exc:
            return [exc] * len(changes)
        if self._down_since is not None and not any(isinstance(o, TargetUnavailable) for o in outcomes):
            self._target_proven()  # it took (or judged) every change: the outage is over
        return outcomes

    def _any_overdue(self, items: list[_Item]) -> bool:
        return any(self._overdue(i) for i in items)

    def _overdue(self, item: _Item) -> bool:
        assert item.change is not None
        deadline = self._due_at(item.change, item.verdict.expire_after_s if item.verdict else None)
        return deadline is not None and deadline <= time.time()

    def _applied(self, items: list[_Item], lane: str) -> None:
        """Remember changes the target took; the metrics once for all of them."""
        if not items:
            return
        for item in items:
            assert item.change is not None
            self.applied.record(item.change.key, item.change.position, present=item.change.change_type != "DELETE")
        self._last_applied_at = time.time()
        self.metrics.applied_at(self._last_applied_at)
        self._count("applied", len(items))
        if lane == "bulk":
            self.counters.bulk_applied += len(items)

    def _failed(self, item: _Item, error: AdapterError, lane: str) -> None:
        """Retry in place with back-off; then park, or dead-letter after max attempts."""
        assert item.change is not None
        self._count("failed")
        if isinstance(error, ChangeFailed):
            for attempt in range(self.delivery.retries_in_place):
                if self._stop.wait(backoff_s(attempt, self.delivery.backoff_initial_s, self.delivery.backoff_max_s)):
                    break
                if self._expired(item):
                    return
                outcome = self._try_batch([item.change])[0]
                if outcome is None:
                    self._applied([item], lane)
                    return
                if isinstance(outcome, TargetUnavailable):
                    self._wait_for_target(outcome, give_up=lambda: self._overdue(item))
                    if self._expired(item):
                        return
                    return self._failed(item, ChangeFailed(str(error)), lane)
                self._count("failed")
                error = outcome
                if isinstance(error, ChangeRejected):
                    break
        attempts = item.origin.attempts + 1
        if isinstance(error, ChangeRejected) or attempts >= self.delivery.max_attempts:
            self._dead_letter(item, str(error), "rejected" if isinstance(error, ChangeRejected) else "failed", attempts)
            return
        hold = min(self.delivery.park_max_s, self.delivery.park_initial_s * 2 ** (attempts - 1))
        until_ms = int((time.time() + hold) * 1000)
        self._producer.produce(
            self.topics.retry,
            key=item.msg.key(),
            value=item.msg.value(),
            headers=failure_headers(
                self.name, item.origin, attempts, str(error), "failed", until_ms, str(item.change.position)
            ),
        )
        self.applied.mark_parked(item.change.key, item.change.position)
        self._count("parked")
        self.report(
            f"listener {self.name}: parked {item.change.key} at {item.change.position} from {item.origin.where} "
            f"(attempt {attempts} of {self.delivery.max_attempts}, hold {hold:.0f} s): {error}"
        )

    def _dead_letter(self, item: _Item, error: str, kind: str, attempts: int | None = None) -> None:
        attempts = attempts if attempts is not None else item.origin.attempts + 1
        position = str(item.change.position) if item.change is not None else headers_of(item.msg).get(POSITION_HEADER)
        self._producer.produce(
            self.topics.dlq,
            key=item.msg.key(),
            value=item.msg.value(),
            headers=failure_headers(self.name, item.origin, attempts, error, kind, None, position),
        )
        if item.change is not None:
            self.applied.mark_dead(item.change.key, item.change.position)
        self._count("dead_lettered")
        what = f"{item.change.key} at {item.change.position}" if item.change is not None else "a record"
        self.report(
            f"listener {self.name}: dead-lettered {what} from {item.origin.where} ({kind}) "
            f"after {attempts} attempt(s): {error}"
        )

    def _wait_for_target(self, error: TargetUnavailable | None, give_up: Callable[[], bool] | None = None) -> None:
        """Back off until the target answers; the loop's work stays where it is. ``give_up``
        ends the wait early (a change that has expired meanwhile goes to the dead letters).

        One line when the target goes, a slow reminder, and one line once a change has been
        applied again (not when it merely answers: a full disk lets the directory be probed
        and refuses every write). A wait that follows an answer with no change applied since
        continues the same outage and its back-off."""
        began = time.monotonic()
        try:
            self._wait(error, give_up)
        finally:
            self._waited_s += time.monotonic() - began

    def _wait(self, error: TargetUnavailable | None, give_up: Callable[[], bool] | None) -> None:
        while True:
            if give_up is not None and give_up():
                return
            if error is None:
                try:
                    self.adapter.open()
                    if self.adapter.ready():
                        break
                    error = TargetUnavailable("not ready")
                except TargetUnavailable as exc:
                    error = exc
            now = time.monotonic()
            if self._down_since is None:
                self.report(f"listener {self.name}: target unavailable, waiting: {error}")
                self._down_since = self._reminded_at = now
                self._wait_attempt = 0
            elif now - self._reminded_at >= WAIT_REMINDER_S:  # the change of state, then a slow reminder
                self.report(
                    f"listener {self.name}: still waiting for the target ({now - self._down_since:.0f} s): {error}"
                )
                self._reminded_at = now
            self._set_target_up(False)
            self._last_tick = time.monotonic()
            self._beat("target-unavailable", detail=str(error))
            if self._stop.wait(backoff_s(self._wait_attempt, 0.5, 15.0)):
                raise _Abandon()
            self._wait_attempt += 1
            error = None
        self._set_target_up(True)

    def _set_target_up(self, up: bool) -> None:
        self._target_up = up
        self.metrics.target_up.labels(listener=self.name).set(1 if up else 0)

    def _target_proven(self) -> None:
        """The target answered a batch: an outage said before is over."""
        if self._down_since is not None:
            self.report(
                f"listener {self.name}: target available again after {time.monotonic() - self._down_since:.0f} s"
            )
            self._down_since = None

    def _flush(self) -> None:
        """Everything produced for this batch is in Kafka before its offsets are committed."""
        left = self._producer.flush(60)
        if left:
            raise ConsumerError(f"listener {self.name}: {left} record(s) not delivered to Kafka after 60 s")

    def _offsets(self, partitions: list[TP]) -> list[TopicPartition]:
        """What to commit for partitions handled here: the next offset and its metadata."""
        out = []
        for topic, partition in partitions:
            ack = self._acks.get((topic, partition))
            offset = self._done[(topic, partition)]
            out.append(
                TopicPartition(topic, partition, offset, metadata=ack)
                if ack
                else TopicPartition(topic, partition, offset)  # metadata=None is refused
            )
        return out

    def _commit(self, consumer: Consumer, offsets: list[TopicPartition], lane: str) -> bool:
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
            self.report(f"listener {self.name}: {lane} commit not taken ({exc.args[0]}); records will be re-read")
        return True

    def _count(self, outcome: str, n: int = 1) -> None:
        setattr(self.counters, outcome, getattr(self.counters, outcome) + n)
        self.metrics.count(outcome, n)

    def _beat(self, state: str, force: bool = False, detail: str | None = None) -> None:
        self._heartbeat.beat(
            state,
            self.counters,
            len(self._rt_assignment) + len(self._bulk_assignment),
            self._health.address if self._health else None,
            self._last_applied_at,
            force=force,
            detail=detail,
        )

    def summary(self) -> str:
        c = self.counters
        return (
            f"applied {c.applied} ({c.bulk_applied} bulk), skipped {c.skipped}, filtered {c.filtered}, "
            f"failed attempts {c.failed}, parked {c.parked}, queued {c.queued}, superseded {c.superseded}, "
            f"dead-lettered {c.dead_lettered}"
        )

    def _shutdown(self, clean: bool) -> None:
        delivered = False
        try:
            self._beat("stopped", force=True)
            delivered = self._producer.flush(15) == 0
        finally:
            for consumer in (self._rt, self._bulk):
                try:
                    consumer.close()  # leaves the group at once: partitions move without waiting for a timeout
                except KafkaException as exc:
                    self.report(f"listener {self.name}: closing a consumer: {exc}")
            self.applied.close(save=clean and delivered)
            self.adapter.close()
            if self._reader:
                self._reader.close()
            if self._health:
                self._health.stop()
            self.report(f"listener {self.name}: stopped; {self.summary()}")


def _position(item: _Item) -> Position:
    return item.change.position if item.change is not None else Position(0, 0)


class _Abandon(Exception):
    """Stop was asked while the target is down: the batch in flight is left uncommitted."""


@contextmanager
def stop_on_signals(runtime: ListenerRuntime) -> Iterator[None]:
    """SIGTERM/SIGINT ask the runtime to stop after the batch in flight."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum: int, frame: object) -> None:
        runtime.report(f"listener {runtime.name}: {signal.Signals(signum).name}: stopping after the batch in flight")
        runtime.stop()

    for s in previous:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
