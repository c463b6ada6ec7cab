"""``mcq listen NAME``: the listener loop (the paper's Get_Changes / Ack_Change).

Two consumer groups per listener, both named after it:

* the **real-time lane** (``<prefix>.<NAME>``): the logical topics of its interests and
  its retry topic;
* the **bulk lane** (``<prefix>.<NAME>.bulk``): its bulk topic and the shared refresh
  requests, consumed only while the real-time lane has nothing waiting (it goes on
  fetching meanwhile, but is not read), a small batch at a time; a real-time record that
  comes while a bulk batch is handled is handled inside it, within about one 2 ms chunk
  of bulk work (consumers/runtime/turns.py), so a mass load never delays a password change by more
  than one bulk chunk.

Per batch: decode, keep the changes an interest (and its rule) selects, skip those not
newer than what was applied for their key, apply the rest through the adapter, then
flush what the batch produced (parked changes, dead letters, applied positions) and
only then commit the offsets: the commit is the acknowledgement, and a change is never
acknowledged before the target, the retry lane or the dead-letter topic holds it. A batch
cut short by an unexpected error (not the target's refusal or outage, which delivery
handles) is not acknowledged at all: the error ends the run and the batch is read again. Each
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

This module is the loop: which lane goes next, the batch, the probes. Each piece of state
the loop shares is an object of its own: the listener's definition, followed in the
registry (:mod:`consumers.runtime.definition`); the two consumers, their groups and how
far each is (:mod:`consumers.runtime.lanes`); deletes it may have missed
(:mod:`consumers.runtime.exposure`); its topics and history writer
(:mod:`consumers.runtime.setup`). What a batch's changes go through is
:mod:`consumers.runtime.delivery` (retry, park, dead letter, expiry, supersession); the
target's availability :mod:`consumers.runtime.target`; the offsets and their commit
:mod:`consumers.runtime.offsets`; decoding :mod:`consumers.runtime.decoding`; liveness
:mod:`consumers.runtime.heartbeat`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, Message, Producer

from consumers import state_snapshot
from consumers.adapter import Adapter, make_adapter
from consumers.exceptions import (
    ConsumerError,
)
from consumers.runtime.acks import AckMark
from consumers.runtime.applied import AppliedPositions
from consumers.runtime.decoding import RecordDecoder
from consumers.runtime.definition import ListenerDefinition
from consumers.runtime.delivery import Delivery, Item, Tally
from consumers.runtime.exposure import ExposureWatch
from consumers.runtime.health import HealthServer, ListenerMetrics
from consumers.runtime.heartbeat import Counters, Heartbeat
from consumers.runtime.history import Steps
from consumers.runtime.lanes import Lanes
from consumers.runtime.offsets import LaneOffsets
from consumers.runtime.outage import FLUSH_WAIT_S, Stopped, flushed, until_kafka_answers
from consumers.runtime.pacing import BatchPacer
from consumers.runtime.parking import H_REQUEST, Origin, headers_of, hold_until_ms
from consumers.runtime.setup import ensure_topics, history_writer
from consumers.runtime.target import Abandon, TargetWatch
from consumers.runtime.turns import RealtimeTurns
from consumers.runtime.view import ListenerView
from consumers.runtime.waiting import HeldMessage, WaitingRoom
from mcq import signals
from mcq.change import BadChange, ChangeCodec
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.registry.model import Delivery as DeliveryPolicy
from mcq.registry.model import Listener, Registry
from mcq.topics.listener import ListenerTopics
from mcq.topics.read import RenewingAdmin

log = logging.getLogger(__name__)

TP = tuple[str, int]
_T = TypeVar("_T")


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
    ) -> None:
        self.settings = settings
        self.name = name
        self.topics = ListenerTopics(settings.topic_prefix, name)
        self.definition = ListenerDefinition(settings, name, registry, registry_topic)
        self.adapter = adapter or make_adapter(self.listener, settings)
        self.adapter.bind(self.registry)
        self.counters = Counters()
        self.metrics = ListenerMetrics(name)
        self._stop = threading.Event()
        self._admin = RenewingAdmin(settings.kafka.client_config())  # offsets without waiting behind a fetch
        self._last_tick = time.monotonic()
        self._realtime_topics: list[str] = []
        self._bulk_busy = False
        self._fetch_in_flight = False  # the real-time lane's watermark is ahead of what it handed us
        self._until_caught_up = False
        self._offsets = LaneOffsets(name, self._admin, self._kafka)
        self.tally = Tally(name, self.counters, self.metrics)
        self.target = TargetWatch(name, self.adapter, self._stop, on_wait=self._waiting, on_state=self._target_state)
        interval = self.delivery.max_poll_interval_s
        self._pace = {
            "realtime": BatchPacer(self.delivery.batch_size, interval),
            "bulk": BatchPacer(self.delivery.bulk_batch_size, interval),
        }
        self._health: HealthServer | None = None
        if http_port is not None:
            self._health = HealthServer(http_host, http_port, self.live, self.ready, self.metrics.registry)

    # ------------------------------------------------------------------ registry

    @property
    def registry(self) -> Registry:
        return self.definition.registry

    @property
    def listener(self) -> Listener:
        return self.definition.listener

    @property
    def delivery(self) -> DeliveryPolicy:
        return self.definition.delivery

    @property
    def view(self) -> ListenerView:
        return self.definition.view

    def realtime_topics(self) -> list[str]:
        return self.definition.realtime_topics(self.topics)

    def _reload_registry(self) -> None:
        if not self.definition.follow():
            return
        self._deliver.policy, self._deliver.view = self.delivery, self.view  # (the loop runs: run() made it)
        self.adapter.bind(self.registry)
        topics = self.realtime_topics()
        if topics != self._realtime_topics:
            ensure_topics(self.settings, self.registry, self.topics)
            log.info(f"listener {self.name}: interests changed, subscribing to {', '.join(topics)}")
            self._realtime_topics = topics
            self.lanes.resubscribe(topics)

    # ------------------------------------------------------------------ probes

    def live(self) -> bool:
        """The loop turns (a wait for an unavailable target turns it too)."""
        return time.monotonic() - self._last_tick < max(60.0, 3 * self.delivery.heartbeat_timeout_s)

    def ready(self) -> bool:
        return self.target.up and self._assigned() > 0

    def _assigned(self) -> int:
        return self.lanes.assigned() if hasattr(self, "lanes") else 0

    def stop(self) -> None:
        """Stop taking new work; the batch in flight finishes (or is abandoned) and commits."""
        self._stop.set()

    def _tick(self) -> None:
        self._last_tick = time.monotonic()

    def _waiting(self, why: str) -> None:
        """A turn of a wait for the target: the loop is alive, its heartbeat says why it waits."""
        self._tick()
        self._beat("target-unavailable", detail=why)

    def _target_state(self, up: bool) -> None:
        self.metrics.target_up.labels(listener=self.name).set(1 if up else 0)

    def _kafka(self, what: str, call: Callable[[], _T]) -> _T:
        """``call()``, waiting out a broker that does not answer (its restart): the
        listener stays up, says so once, and goes on when the broker is back."""
        try:
            return until_kafka_answers(what, call, stop=self._stop, who=f"listener {self.name}", tick=self._tick)
        except Stopped:
            raise Abandon() from None

    # ------------------------------------------------------------------ the loop

    def run(self, until_caught_up: bool = False) -> int:
        """Run until stopped (SIGTERM/SIGINT) or, with ``until_caught_up``, until what was
        pending at start has been handled. Returns the process exit code."""
        ensure_topics(self.settings, self.registry, self.topics)
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
        self._waiting_room = WaitingRoom(self.settings, self.topics.waiting, self.topics.retry, self._producer)
        self._decoder = RecordDecoder(self.name, self.codec, self.applied.get, self._stop, self._tick)
        self._deliver = Delivery(
            self.topics, self.delivery, self.view, self.applied, self._producer, self.target, self.tally, self._stop,
            self._kafka, Steps(self.name, history_writer(self.settings, self.delivery, self.topics, self._producer)),
        )  # fmt: skip
        self.turns = self._deliver.turns = RealtimeTurns(self._realtime_turn)
        self._exposure = ExposureWatch(
            self.definition, self.topics, self._offsets, self.applied, self.codec, self._producer
        )
        self.lanes = Lanes(
            self.settings, self.topics, self.delivery.max_poll_interval_s, self._heartbeat.instance, self._offsets,
            self._waiting_room, self.applied, self._kafka,
        )  # fmt: skip
        self._rt, self._bulk = self.lanes.rt, self.lanes.bulk
        self._realtime_topics = self.realtime_topics()
        self.lanes.subscribe(self._realtime_topics)
        if self._health:
            self._health.start()
        log.info(
            f"listener {self.name} ({self.listener.adapter.type}, instance {self._heartbeat.instance}): "
            f"real-time lane {', '.join(self._realtime_topics)}; bulk lane {', '.join(self.topics.bulk_lane())}"
            + (f"; health {self._health.address}" if self._health else "")
        )
        self._until_caught_up = until_caught_up
        clean = False  # an error ends the run: the applied positions' snapshot is not saved
        try:
            self.target.wait(None)
            if self.settings.state_dir is not None:
                log.info(f"listener {self.name}: applied positions: {self.applied.restored}")
            note = self.adapter.started_from()
            if note:
                log.info(f"listener {self.name}: {note}")
            self._beat("running", force=True)
            while not self._stop.is_set():
                self._last_tick = time.monotonic()
                self._reload_registry()
                self._beat("running")
                # a batch that reached the ends ends the run at once (not after an empty poll)
                if self._step() and not until_caught_up:
                    continue
                if until_caught_up and self.lanes.caught_up():
                    log.info(f"listener {self.name}: caught up; {self.summary()}")
                    break
            clean = True
        except Abandon:
            log.warning(f"listener {self.name}: stopped while the target was unavailable; the rest is left for later")
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
        # no wait either for a run until caught up whose real-time lane is (its bulk lane's turn)
        # A real-time record the watermark has announced is waited for once, by the next poll
        # only, and the bulk lane's batch comes next if it did not arrive (a watermark that no
        # record follows, such as a transaction's marker, holds nothing up for good). A wait
        # kept up while the bulk lane had work starved it for as long as real-time records came
        # less than the wait apart: a steady trickle of them held a refresh for good.
        held = self._waiting_room.take_due(time.time(), self._pace["realtime"].size)
        if held:  # retry records come due, each by its own time
            self._process(self._rt, held, "realtime")  # type: ignore[arg-type]  # they read as messages
            return True
        drained = self._until_caught_up and self.lanes.lane_caught_up("realtime")
        announced, self._fetch_in_flight = self._fetch_in_flight, False
        wait = announced or not (self._bulk_busy or drained)
        msgs = self.lanes.take(self._rt, self._pace["realtime"].size, 0.25 if wait else 0)
        if msgs:
            self._process(self._rt, msgs, "realtime")
            return True
        if not announced and self.lanes.realtime_backlog():
            self._fetch_in_flight = True
            return False
        msgs = self.lanes.take(self._bulk, self._pace["bulk"].size, 0.05)
        self._bulk_busy = bool(msgs)
        if msgs:
            self._process(self._bulk, msgs, "bulk")
            return True
        return False

    def _realtime_turn(self) -> bool:
        """Inside a bulk batch: a batch of what the real-time lane has fetched already, if
        anything (turns.py). The bulk batch's unhandled changes are its own again afterwards."""
        if self._stop.is_set():
            return False  # stopping after the batch in flight: no new one inside it
        msgs = self.lanes.take(self._rt, self._pace["realtime"].size, 0)
        if not msgs:
            return False
        self.metrics.turns.labels(listener=self.name).inc()
        undone = self._deliver.undone
        try:
            self._process(self._rt, msgs, "realtime")
        finally:
            self._deliver.undone = undone
        return True

    # ------------------------------------------------------------------ a batch

    def _process(self, consumer: Consumer, msgs: list[Message], lane: str) -> None:
        """Decode, judge each change against this listener's view and what it applied, apply
        the newest change per key, then flush and commit (the acknowledgement)."""
        started, waited = time.monotonic(), self.target.waited_s
        turns = self.turns if lane == "bulk" else None
        turns_began = turns.spent_s if turns is not None else 0.0
        if turns is not None:
            turns.start()
        # what the other instances resolved meanwhile (a broker restarting is waited for)
        self._kafka("reading the applied positions", self.applied.refresh)
        todo: dict[str, list[Item]] = {}  # key text -> the key's changes in this batch
        held: list[HeldMessage] = []  # retry records that came due in the waiting room
        last: dict[TP, int] = {}
        stamps: dict[TP, int] = {}  # timestamp (ms) of the last record handled, per partition
        firsts: dict[TP, Message] = {}  # the first record handled, per partition
        requests: list[Item] = []
        for msg in msgs:
            if turns is not None:
                turns.offer()
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal():
                    raise ConsumerError(f"listener {self.name}: consuming {msg.topic()}[{msg.partition()}]: {err}")
                if err.code() == KafkaError._MAX_POLL_EXCEEDED:
                    continue  # said by the refused commit and the partitions taken away
                log.warning(f"listener {self.name}: {lane} lane: {err.str()}")
                continue
            tp = (msg.topic() or "", msg.partition() or 0)
            retry_lane = tp[0] == self.topics.retry
            item = Item(msg, Origin.of(msg, retry_lane), retry_lane=retry_lane)
            if isinstance(msg, HeldMessage):
                held.append(msg)  # came due in the waiting room: its retry offset was committed then
            else:
                last[tp] = msg.offset() or 0
                stamps[tp] = msg.timestamp()[1]
                firsts.setdefault(tp, msg)
                if item.retry_lane and (until := hold_until_ms(msg) / 1000) > time.time():
                    self._waiting_room.hold(msg, until)  # waits by its own time, no other record behind it
                    continue
            try:
                item.change = self._decoder.decode(msg)
            except BadChange as exc:
                self._deliver.dead_letter(item, str(exc), "bad-record")
                continue
            if item.change is None:
                continue
            if item.origin.topic == self.topics.refresh or (
                item.origin.topic == self.topics.bulk and headers_of(msg).get(H_REQUEST) == "refresh"
            ):
                requests.append(item)
                continue
            if item.origin.topic == self.topics.bulk:  # a refresh's state or delete (mcq refresh)
                item.change = dataclasses.replace(item.change, cause="refresh")
            self._deliver.candidate(item, todo)
        self._exposure.judge(consumer, firsts)
        if requests:
            refresher = self.definition.refresher
            refresher.prepare([r.change for r in requests if r.change is not None])
            for request in requests:
                assert request.change is not None
                present = self.applied.present_keys(request.change.key.tname)
                for change in refresher.resolve(request.change, present):
                    self._deliver.candidate(Item(request.msg, request.origin, change, request.retry_lane), todo)
        outcome = "failed"  # an unexpected error: nothing of this batch is acknowledged, it is read again
        try:
            self._deliver.apply_in_rounds(todo, lane)
            if turns is not None:
                turns.offer()  # before this batch's flush and commit
            self._exposure.clear(requests)
            outcome = "handled"
        except Abandon:
            # stopping while the target is down: acknowledge only what was handled
            for item in self._deliver.undone:
                if isinstance(item.msg, HeldMessage):
                    continue  # back to the waiting room below
                tp = (item.msg.topic() or "", item.msg.partition() or 0)
                last[tp] = min(last[tp], (item.msg.offset() or 0) - 1)
                stamps[tp] = min(stamps[tp], item.msg.timestamp()[1])  # what is left starts here
            outcome = "stopped"
            raise
        finally:
            if held:
                left = {id(i.msg) for i in self._deliver.undone} if outcome == "stopped" else set()
                if outcome == "failed":
                    left = {id(m) for m in held}  # read again from the waiting topic by the next run
                self._waiting_room.done(m for m in held if id(m) not in left)
                self._waiting_room.put_back(m for m in held if id(m) in left)
            if outcome != "failed":
                if turns is not None and outcome == "handled":  # not while a stop unwinds the batch
                    self._flush_with_turns(turns)
                self._flush()
                now = time.time()
                for tp, offset in last.items():
                    self._offsets.handled(tp, offset, AckMark(now, stamps[tp] / 1000 if stamps[tp] > 0 else None))
                taken = self._offsets.commit(consumer, self._offsets.commit_of(list(last)), lane)
                took = time.monotonic() - started
                if turns is not None:  # the turns' own batches are not this batch's work
                    took -= turns.spent_s - turns_began
                self._paced(lane, taken, took, self.target.waited_s - waited)

    def _paced(self, lane: str, taken: bool, took_s: float, waited_s: float) -> None:
        """Judge the batch's length against the poll interval once its commit is answered."""
        pacer, work_s = self._pace[lane], took_s - waited_s
        if taken:
            pacer.done(work_s)
            return
        self.metrics.removed.labels(listener=self.name, lane=lane).inc()
        halved = pacer.removed(work_s)
        log.warning(
            f"listener {self.name}: {lane} lane: the group removed this instance during a batch of {took_s:.0f} s "
            f"({waited_s:.0f} s of it waiting for the target; max_poll_interval_s {pacer.interval_s:g}): its "
            "commit was refused, and its records are read again (the applied positions skip what it applied)"
            + (f"; batches of at most {pacer.size} from now on" if halved else "")
        )

    def _flush_with_turns(self, turns: RealtimeTurns) -> None:
        """A bulk batch's wait for its records' delivery, in slices with the real-time lane's
        turns between them (a turn's own flush delivers them too); the flush that follows
        then finds little or nothing left to wait for, and handles a broker that does not answer."""
        give_up_at = time.monotonic() + 1.0
        while self._producer.flush(0.0005) > 0 and time.monotonic() < give_up_at:
            turns.offer()

    def _flush(self) -> None:
        """Everything produced for this batch is in Kafka before its offsets are committed; a
        broker restarting meanwhile is waited for (up to ``FLUSH_WAIT_S``), as every other call."""
        give_up_at = time.monotonic() + FLUSH_WAIT_S
        self._kafka(
            "delivering the batch's records", lambda: flushed(self._producer, give_up_at, f"listener {self.name}")
        )

    def _beat(self, state: str, force: bool = False, detail: str | None = None) -> None:
        self._heartbeat.beat(
            state,
            self.counters,
            self._assigned(),
            self._health.address if self._health else None,
            self.tally.last_applied_at,
            force=force,
            detail=detail,
        )

    def summary(self) -> str:
        c = self.counters
        return (
            f"applied {c.applied} ({c.bulk_applied} bulk), skipped {c.skipped}, filtered {c.filtered}, "
            f"deletes of keys not held {c.absent_deletes}, "
            f"failed attempts {c.failed}, parked {c.parked}, queued {c.queued}, superseded {c.superseded}, "
            f"dead-lettered {c.dead_lettered}"
        )

    def _shutdown(self, clean: bool) -> None:
        delivered = False
        try:
            self._beat("stopped", force=True)
            delivered = self._producer.flush(15) == 0
        finally:
            self.lanes.close()
            self.applied.close(save=clean and delivered)
            self.adapter.close()
            self.definition.close()
            if self._health:
                self._health.stop()
            log.info(f"listener {self.name}: stopped; {self.summary()}")


def stop_on_signals(runtime: ListenerRuntime) -> AbstractContextManager[None]:
    """SIGTERM/SIGINT ask the runtime to stop after the batch in flight."""
    return signals.stop_on_signals(runtime.stop, log.info, f"listener {runtime.name}", "the batch in flight")
