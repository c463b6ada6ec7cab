"""The delivery policy of a listener: what happens to each change of a batch between
"news for this listener" and "the target holds it" -- the MCQ paper's Hold_Until and
put-back count, AQ's exception queue and expiration.

* a change not newer than what was applied for its key is skipped (a parked one whose
  key has since been applied from a newer change is superseded);
* a batch is applied in rounds of at most one change per key, each key's changes in
  source order, so an older change never reaches the target after a newer one;
* a change behind its key's parked change, or delayed by its interest, is queued in the
  retry lane; one not applied within its interest's ``expire_after_s`` is dead-lettered;
* a failing change is retried in place with back-off, then parked in the retry lane with
  a hold-until time, and dead-lettered after ``max_attempts`` rounds (a rejected one at
  once); an unavailable target is waited for (:mod:`consumers.runtime.target`).

Records go to Kafka through the producer it is given; the runtime flushes them before it
commits the batch's offsets (the acknowledgement).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from consumers.exceptions import AdapterError, ChangeFailed, ChangeRejected, TargetUnavailable
from consumers.runtime.applied import state_digest
from consumers.runtime.history import Steps
from consumers.runtime.parking import SUPERSEDED, Origin, backoff_s, failure_headers, headers_of
from mcq.change import POSITION_HEADER, Change, ChangeKey, Position

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from confluent_kafka import Message, Producer

    from consumers.runtime.applied import AppliedPositions
    from consumers.runtime.health import ListenerMetrics
    from consumers.runtime.heartbeat import Counters
    from consumers.runtime.target import TargetWatch
    from consumers.runtime.turns import RealtimeTurns
    from consumers.runtime.view import ListenerView, Verdict
    from mcq.registry.model import Delivery as DeliveryPolicy
    from mcq.topics.listener import ListenerTopics

KafkaCall = Callable[[str, Callable[[], None]], None]
"""(what, call): make a Kafka request named ``what``."""


@dataclass
class Item:
    """One record of a batch on its way through the loop (a refresh request becomes one
    item per key it names, each with the request's record)."""

    msg: Message
    origin: Origin
    change: Change | None = None
    retry_lane: bool = False
    verdict: Verdict | None = None


@dataclass
class Tally:
    """What became of changes: the counters a heartbeat carries and the metrics."""

    name: str
    counters: Counters
    metrics: ListenerMetrics
    last_applied_at: float | None = field(default=None)

    def count(self, outcome: str, n: int = 1) -> None:
        setattr(self.counters, outcome, getattr(self.counters, outcome) + n)
        self.metrics.count(outcome, n)

    def applied(self, n: int, lane: str) -> None:
        self.last_applied_at = time.time()
        self.metrics.applied_at(self.last_applied_at)
        self.count("applied", n)
        if lane == "bulk":
            self.counters.bulk_applied += n


class Delivery:
    """One listener instance's delivery of the changes of its batches."""

    def __init__(
        self,
        topics: ListenerTopics,
        policy: DeliveryPolicy,
        view: ListenerView,
        applied: AppliedPositions,
        producer: Producer,
        target: TargetWatch,
        tally: Tally,
        stop: threading.Event,
        kafka: KafkaCall | None = None,
        steps: Steps | None = None,
    ) -> None:
        self.name = topics.listener
        self.topics = topics
        self.policy = policy  # replaced when the registry changes (ListenerRuntime._reload_registry)
        self.view = view  # likewise
        self.applied = applied
        self.undone: list[Item] = []
        """What a batch cut short by a stop left unhandled: its offsets are not committed."""
        self._producer = producer
        self._target = target
        self._tally = tally
        self._stop = stop
        self._kafka: KafkaCall = kafka or (lambda what, call: call())
        """How a Kafka request is made: the runtime's waits out a broker restart (``outage.py``)."""
        self.step = steps or Steps(self.name, None)
        """Records what became of each change in its key's history (``mcq trace``)."""
        self.turns: RealtimeTurns | None = None
        """The real-time lane's turns between the chunks of a bulk batch (set by the runtime)."""

    # ------------------------------------------------------------------ judging

    def candidate(self, item: Item, todo: dict[str, list[Item]]) -> None:
        """Keep a change if it is news for this listener: of a table it covers, and newer
        than what it applied for the key."""
        change = item.change
        assert change is not None
        key = change.key
        if not self.view.covers(key):
            self._tally.count("filtered")
            self.step(item, "filtered", f"{key.ref} is not among its interests")
            return
        applied = self.applied.get(key)
        # a refresh repairs: it re-applies the state the listener already applied
        lenient = change.cause in ("refresh", "tombstone")
        if lenient and applied is not None and _repairs_a_read(change, applied):
            change = item.change = dataclasses.replace(change, position=applied)
        if applied is not None and (change.position < applied or (change.position == applied and not lenient)):
            self._tally.count("superseded" if item.retry_lane else "skipped")
            self.step(item, "superseded" if item.retry_lane else "skipped", f"{applied} was applied already")
            return
        parked = self.applied.parked(key)
        if item.retry_lane and parked is not None and parked > change.position:
            self._tally.count("superseded")  # a newer change of the key waits behind it and carries the state
            self.step(item, "superseded", f"a newer change ({parked}) waits behind it and carries the state")
            return
        todo.setdefault(key.text(), []).append(item)

    def apply_in_rounds(self, todo: dict[str, list[Item]], lane: str) -> None:
        """Apply a batch in rounds holding at most one change per key, each key's changes in
        source order: a change that fails is parked before the next change of its key is
        judged, and that one then queues behind it — an older change of a key never reaches
        the target after a newer one, even through retries in place."""
        from consumers.runtime.target import Abandon

        queues = [
            sorted(items, key=lambda i: i.change.position if i.change else Position(0, 0)) for items in todo.values()
        ]
        try:
            while queues:
                round_ = [q.pop(0) for q in queues]
                queues = [q for q in queues if q]
                self._apply([d for item in round_ if (d := self._decide(item)) is not None], lane)
        except Abandon:
            self.undone = [*self.undone, *(i for q in queues for i in q)]  # not handled: read again
            raise

    def _decide(self, item: Item) -> Item | None:
        """What the newest change of a key is to this listener: a wait behind the key's
        parked change, nothing (outside its view), a delay, an expiry, or work."""
        change = item.change
        assert change is not None
        key = change.key
        if self._superseded(item):  # a real-time turn inside this bulk batch applied a newer change
            self._tally.count("superseded")
            self.step(item, "superseded", "a newer change was applied")
            return None
        if not item.retry_lane and self.applied.blocked(key):
            self._queue(item, "waiting", f"waiting behind a parked change of {key}", time.time())
            return None
        # a refresh's delete is said even to a target the listener thinks has nothing: it repairs
        present = self.applied.present(key) or (change.cause == "refresh" and change.change_type == "DELETE")
        seen, verdict = self.view.see(change, present)
        if seen is None:
            self._tally.count("absent_deletes" if change.state is None else "filtered")
            self.step(
                item,
                "filtered",
                "a delete of what the target does not hold" if change.state is None else "outside its view",
            )
            self._settled(key, change.position)  # the target holds what the view wants of the key: nothing
            return None
        if self._invisible(seen):
            self._tally.count("filtered")
            self.step(item, "filtered", "no column it sees changed")
            return None
        item = Item(item.msg, item.origin, seen, item.retry_lane, verdict)
        due = _due_at(seen, verdict.delay_s)
        if due is not None and due > time.time():
            self._queue(item, "delayed", f"delayed {verdict.delay_s:g} s after its commit", due)
            return None
        if self._expired(item):
            return None
        return item

    def _invisible(self, seen: Change) -> bool:
        """Housekeeping per listener: an update from the source whose state, as this
        listener's view gives it, is the one the target got last (it changed only columns
        the listener does not see). Not while the key has a dead letter: the update then
        carries the state the target lacks."""
        if seen.change_type != "UPDATE" or seen.cause != "source" or self.applied.dead(seen.key) is not None:
            return False
        held = self.applied.digest(seen.key)
        return held != 0 and held == state_digest(seen.after)

    def _expired(self, item: Item) -> bool:
        """AQ's expiration: a change not applied in time goes to the dead-letter topic."""
        assert item.change is not None and item.verdict is not None
        limit = item.verdict.expire_after_s
        deadline = _due_at(item.change, limit)
        if deadline is None or deadline > time.time():
            return False
        late = time.time() - item.change.entry_time.timestamp()
        self.dead_letter(item, f"expired: not applied within {limit:g} s of its commit ({late:.1f} s ago)", "expired")
        return True

    def _overdue(self, item: Item) -> bool:
        assert item.change is not None
        deadline = _due_at(item.change, item.verdict.expire_after_s if item.verdict else None)
        return deadline is not None and deadline <= time.time()

    def _any_overdue(self, items: list[Item]) -> bool:
        return any(self._overdue(i) for i in items)

    # ------------------------------------------------------------------ applying

    def _apply(self, items: list[Item], lane: str) -> None:
        """Apply items in calls of the adapter: all at once in the real-time lane; in the bulk
        lane in chunks between which the real-time lane gets its turns (turns.py)."""
        start = 0
        turns = self.turns if lane == "bulk" else None
        while start < len(items):
            items = items[:start] + [i for i in items[start:] if not self._expired(i)]
            if start >= len(items):
                break
            self.undone = items[start:]
            if turns is not None and turns.offer():
                items = items[:start] + self._not_superseded(items[start:])  # judged again: the turn applied
                if start >= len(items):
                    break
                self.undone = items[start:]
            chunk = items[start : start + turns.chunk(len(items) - start)] if turns is not None else items[start:]
            began = time.monotonic()
            outcomes = self._target.try_batch([i.change for i in chunk if i.change is not None])
            if turns is not None:
                turns.measured(len(chunk), time.monotonic() - began)
            done: list[Item] = []  # applied: recorded together, before a failure's retries
            for item, outcome in zip(chunk, outcomes, strict=True):
                if isinstance(outcome, TargetUnavailable):
                    self._applied(done, lane)
                    done = []
                    self._target.wait(outcome, give_up=partial(self._any_overdue, items[start:]))
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
        self.undone = []

    def _still_news(self, items: list[Item]) -> list[Item]:
        """After a wait for the target: the changes no other instance applied a newer
        change of meanwhile (this one may have been removed from the group while it
        waited, and its partitions' changes applied elsewhere)."""
        self._kafka("reading the applied positions", self.applied.refresh)
        return self._not_superseded(items)

    def _not_superseded(self, items: list[Item]) -> list[Item]:
        """The changes whose key has not had a newer change applied since they were judged."""
        out = []
        for item in items:
            if self._superseded(item):
                self._tally.count("superseded")
                self.step(item, "superseded", "a newer change was applied")
                continue
            out.append(item)
        return out

    def _superseded(self, item: Item) -> bool:
        assert item.change is not None
        applied = self.applied.get(item.change.key)
        return applied is not None and applied > item.change.position

    def _applied(self, items: list[Item], lane: str) -> None:
        """Remember changes the target took; the metrics once for all of them."""
        if not items:
            return
        for item in items:
            assert item.change is not None
            key, position = item.change.key, item.change.position
            present = item.change.change_type != "DELETE"
            self.applied.record(key, position, present, state_digest(item.change.after) if present else 0)
            self._settled(key, position)
            self.step(item, "applied", f"{item.change.change_type} accepted ({lane} lane)")
        self._tally.applied(len(items), lane)

    def _settled(self, key: ChangeKey, position: Position) -> None:
        """The target holds the listener's view of the key as of a change newer than the
        key's dead-lettered one (applied, or nothing to do): its dead letters are resolved
        as superseded (``mcq dlq list`` says so, ``mcq status`` stops alerting). Flushed
        with the batch, before its offsets are committed."""
        dead = self.applied.dead(key)
        if dead is None or dead >= position:
            return
        value = {
            "action": "superseded",
            "at": time.time(),
            "position": str(position),
            "reason": f"a newer change of {key} was applied ({position})",
        }
        self._producer.produce(
            self.topics.dlq_resolved, key=f"{SUPERSEDED}{key.text()}".encode(), value=json.dumps(value).encode()
        )
        self.applied.clear_dead(key)

    # ------------------------------------------------------------------ failing

    def _failed(self, item: Item, error: AdapterError, lane: str) -> None:
        """Retry in place with back-off; then park, or dead-letter after max attempts."""
        assert item.change is not None
        policy = self.policy
        self._tally.count("failed")
        if isinstance(error, ChangeFailed):
            for attempt in range(policy.retries_in_place):
                if self._stop.wait(backoff_s(attempt, policy.backoff_initial_s, policy.backoff_max_s)):
                    break
                if self._expired(item):
                    return
                outcome = self._target.try_batch([item.change])[0]
                if outcome is None:
                    self._applied([item], lane)
                    return
                if isinstance(outcome, TargetUnavailable):
                    self._target.wait(outcome, give_up=lambda: self._overdue(item))
                    if self._expired(item):
                        return
                    return self._failed(item, ChangeFailed(str(error)), lane)
                self._tally.count("failed")
                error = outcome
                if isinstance(error, ChangeRejected):
                    break
        attempts = item.origin.attempts + 1
        if isinstance(error, ChangeRejected) or attempts >= policy.max_attempts:
            self.dead_letter(item, str(error), "rejected" if isinstance(error, ChangeRejected) else "failed", attempts)
            return
        hold = min(policy.park_max_s, policy.park_initial_s * 2 ** (attempts - 1))
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
        self._tally.count("parked")
        self.step(item, "parked", f"{error} (attempt {attempts} of {policy.max_attempts}, held {hold:.0f} s)")
        log.warning(
            f"listener {self.name}: parked {item.change.key} at {item.change.position} from {item.origin.where} "
            f"(attempt {attempts} of {policy.max_attempts}, hold {hold:.0f} s): {error}"
        )

    def _queue(self, item: Item, kind: str, why: str, until: float) -> None:
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
        self._tally.count("queued")
        self.step(item, "delayed", why)

    def dead_letter(self, item: Item, error: str, kind: str, attempts: int | None = None) -> None:
        """Into the dead-letter topic with its reason (AQ's exception queue)."""
        attempts = attempts if attempts is not None else item.origin.attempts + 1
        position = str(item.change.position) if item.change is not None else headers_of(item.msg).get(POSITION_HEADER)
        key = item.change.key if item.change is not None else None
        self._producer.produce(
            self.topics.dlq,
            key=item.msg.key(),
            value=item.msg.value(),
            headers=failure_headers(
                self.name,
                item.origin,
                attempts,
                error,
                kind,
                None,
                position,
                key.text() if key is not None else None,
            ),
        )
        if item.change is not None:
            self.applied.mark_dead(item.change.key, item.change.position)
        self._tally.count("dead_lettered")
        self.step(item, "dead-lettered", f"{kind}: {error}")
        what = f"{item.change.key} at {item.change.position}" if item.change is not None else "a record"
        log.error(
            f"listener {self.name}: dead-lettered {what} from {item.origin.where} ({kind}) "
            f"after {attempts} attempt(s): {error}"
        )


def _repairs_a_read(change: Change, applied: Position) -> bool:
    """A refresh from the topics of a key last refreshed from the source: the key holds the
    read's position, newer than any the topics had for it then, so the topics' state
    (a repair: ``mcq reconcile --repair``, ``mcq refresh``) would be skipped, and refused by
    a target that keeps positions, for ever. It takes the read's position instead: the
    topics' last state is what a listener's target mirrors. (While the normaliser lags
    behind the read, the topics' state may be older than the read's; the change it lacks
    is then skipped as older than the read, and the next reconcile repairs the key.)"""
    return (
        change.cause == "refresh" and applied.of_a_read and not change.position.of_a_read and change.position < applied
    )


def _due_at(change: Change, seconds: float | None) -> float | None:
    return change.entry_time.timestamp() + seconds if seconds else None
