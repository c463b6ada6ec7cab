"""The listener's delivery policy and its wait for the target, run on plain objects (no
Kafka, no target): what becomes of each change of a batch."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from consumers.exceptions import AdapterError, ChangeFailed, ChangeRejected, TargetUnavailable
from consumers.runtime.delivery import Delivery, Item, Tally
from consumers.runtime.health import ListenerMetrics
from consumers.runtime.heartbeat import Counters
from consumers.runtime.parking import H_ATTEMPTS, H_ERROR_KIND, Origin
from consumers.runtime.target import Abandon, TargetWatch
from consumers.runtime.turns import RealtimeTurns
from consumers.runtime.view import ListenerView
from mcq.change import Change, ChangeKey, Position
from mcq.registry import parse_registry
from mcq.registry.model import Delivery as Policy
from mcq.testing.logs import log_lines
from mcq.topics.listener import ListenerTopics

REGISTRY = """
tables:
  - {tname: PERSON, subtype: Telephone}
listeners:
  - {name: LDAP, owner: idm@example, adapter: {type: table}}
interests:
  - {listener: LDAP, tname: PERSON, subtype: Telephone}
"""
FAST = {"backoff_initial_s": 0.001, "backoff_max_s": 0.001}


@dataclass
class Msg:
    """A consumed record, as much of one as the policy reads."""

    offset_: int
    topic_: str = "t.PERSON.Telephone"

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v"

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.offset_

    def headers(self) -> list[tuple[str, bytes]]:
        return []


@dataclass
class Applied:
    """Applied positions in a dict, with the park and dead marks."""

    at: dict[str, tuple[Position, bool]] = field(default_factory=dict)
    parks: dict[str, Position] = field(default_factory=dict)
    deads: dict[str, Position] = field(default_factory=dict)
    digests: dict[str, int] = field(default_factory=dict)

    def get(self, key: ChangeKey) -> Position | None:
        return self.at[key.text()][0] if key.text() in self.at else None

    def present(self, key: ChangeKey) -> bool:
        return key.text() in self.at and self.at[key.text()][1]

    def blocked(self, key: ChangeKey) -> bool:
        parked, applied = self.parks.get(key.text()), self.get(key)
        return parked is not None and not (applied is not None and applied >= parked)

    def parked(self, key: ChangeKey) -> Position | None:
        return self.parks.get(key.text())

    def record(self, key: ChangeKey, position: Position, present: bool = True, digest: int = 0) -> None:
        self.at[key.text()] = (position, present)
        self.digests[key.text()] = digest

    def digest(self, key: ChangeKey) -> int:
        return self.digests.get(key.text(), 0) if self.present(key) else 0

    def mark_parked(self, key: ChangeKey, position: Position) -> None:
        self.parks[key.text()] = position

    def mark_dead(self, key: ChangeKey, position: Position) -> None:
        self.deads[key.text()] = position

    def dead(self, key: ChangeKey) -> Position | None:
        return self.deads.get(key.text())

    def clear_dead(self, key: ChangeKey) -> None:
        self.deads.pop(key.text(), None)

    def refresh(self) -> None:
        pass


@dataclass
class Producer:
    sent: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def produce(self, topic: str, key: bytes, value: bytes, headers: Any) -> None:
        pairs = headers.items() if isinstance(headers, dict) else headers
        self.sent.append((topic, {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in pairs}))


@dataclass
class Target:
    """Answers each change from a script: None (taken) or an error, per phone number."""

    answers: dict[str, list[AdapterError | None]]
    up_after: int = 0
    took: list[Change] = field(default_factory=list)

    def apply_batch(self, changes: list[Change]) -> list[AdapterError | None]:
        out: list[AdapterError | None] = []
        for change in changes:
            script = self.answers.get((change.after or {}).get("phone", ""), [])
            outcome = script.pop(0) if script else None
            if outcome is None:
                self.took.append(change)
            out.append(outcome)
        return out

    def open(self) -> None:
        if self.up_after > 0:
            self.up_after -= 1
            raise TargetUnavailable("connection refused")

    def ready(self) -> bool:
        return True


def change(pid: int, phone: str, at: int) -> Change:
    return Change(
        key=ChangeKey("PERSON", "Telephone", pid),
        change_type="UPDATE",
        position=Position(at, at),
        entry_time=datetime.now(UTC),
        source_table="campus.phones",
        after={"person_id": str(pid), "phone": phone},
    )


@dataclass
class Rig:
    """A delivery policy over plain objects, and what it touched."""

    target: Target
    policy: dict[str, Any] = field(default_factory=dict)
    applied: Applied = field(default_factory=Applied)
    producer: Producer = field(default_factory=Producer)
    tally: Tally = field(default_factory=lambda: Tally("LDAP", Counters(), ListenerMetrics("LDAP")))
    lines: list[str] = field(default_factory=list)
    kafka_calls: list[str] = field(default_factory=list)

    def kafka(self, what: str, call: Callable[[], None]) -> None:
        """The runtime's wait for a broker that does not answer: here, a note of what was asked."""
        self.kafka_calls.append(what)
        call()

    def run(self, *changes: Change) -> None:
        stop = threading.Event()
        watch = TargetWatch("LDAP", self.target, stop)  # type: ignore[arg-type]
        job = Delivery(
            ListenerTopics("t", "LDAP"), Policy(**{**FAST, **self.policy}),
            ListenerView(parse_registry(REGISTRY, "r.yaml"), "LDAP"), self.applied, self.producer,  # type: ignore[arg-type]
            watch, self.tally, stop, self.kafka,
        )  # fmt: skip
        todo: dict[str, list[Item]] = {}
        for i, c in enumerate(changes):
            job.candidate(Item(Msg(i), Origin("t.PERSON.Telephone", 0, i), c), todo)  # type: ignore[arg-type]
        with log_lines() as said:
            job.apply_in_rounds(todo, "realtime")
        self.lines.extend(said)

    def sent(self) -> list[tuple[str, str, str]]:
        """(lane topic's last part, attempts, error kind) of every record produced."""
        return [(topic.rsplit(".", 1)[1], h[H_ATTEMPTS], h[H_ERROR_KIND]) for topic, h in self.producer.sent]

    def took(self) -> list[tuple[str, str]]:
        return [((c.after or {})["person_id"], (c.after or {})["phone"]) for c in self.target.took]


def test_a_change_that_keeps_failing_is_retried_in_place_then_parked_with_its_attempt() -> None:
    rig = Rig(Target({"555-1": [ChangeFailed("locked")] * 3}), {"retries_in_place": 2})
    rig.run(change(1, "555-1", 10))
    assert rig.sent() == [("retry", "1", "failed")]
    assert rig.applied.parks == {ChangeKey("PERSON", "Telephone", 1).text(): Position(10, 10)}
    c = rig.tally.counters
    assert (c.failed, c.parked, c.applied) == (3, 1, 0)
    assert len(rig.lines) == 1 and "parked" in rig.lines[0] and "attempt 1 of 5" in rig.lines[0]


def test_a_change_that_succeeds_on_a_retry_in_place_is_applied_not_parked() -> None:
    rig = Rig(Target({"555-1": [ChangeFailed("locked")]}))
    rig.run(change(1, "555-1", 10))
    assert rig.sent() == [] and rig.tally.counters.applied == 1
    assert rig.applied.get(ChangeKey("PERSON", "Telephone", 1)) == Position(10, 10)


def test_a_rejected_change_is_dead_lettered_at_once() -> None:
    rig = Rig(Target({"bad": [ChangeRejected("no such attribute")]}), {"retries_in_place": 3})
    rig.run(change(1, "bad", 10))
    assert rig.sent() == [("dlq", "1", "rejected")]
    assert rig.tally.counters.dead_lettered == 1 and rig.tally.counters.failed == 1


def test_the_last_attempt_goes_to_the_dead_letters() -> None:
    rig = Rig(Target({"555-1": [ChangeFailed("locked")] * 5}), {"retries_in_place": 0, "max_attempts": 1})
    rig.run(change(1, "555-1", 10))
    assert rig.sent() == [("dlq", "1", "failed")]


def test_a_keys_next_change_queues_behind_its_parked_change_never_overtakes_it() -> None:
    rig = Rig(Target({"old": [ChangeFailed("locked")] * 5}), {"retries_in_place": 0})
    rig.run(change(1, "new", 20), change(1, "old", 10), change(2, "other", 15))
    assert rig.sent() == [("retry", "1", "failed"), ("retry", "0", "waiting")]  # "new" waits behind "old"
    assert rig.took() == [("2", "other")]


def test_a_change_not_newer_than_what_was_applied_is_skipped() -> None:
    rig = Rig(Target({}))
    rig.applied.record(ChangeKey("PERSON", "Telephone", 1), Position(30, 30))
    rig.run(change(1, "stale", 20))
    assert rig.took() == [] and rig.tally.counters.skipped == 1


def test_a_repair_from_the_topics_takes_over_a_key_last_refreshed_from_the_source() -> None:
    """A source read stamps its states with the WAL position before the read (LSN 0), newer
    than the change the topics hold for the key: their state, sent to repair the target,
    is applied at the read's position, not skipped for ever."""
    rig = Rig(Target({}))
    key = ChangeKey("PERSON", "Telephone", 1)
    read = Position(5_000, 0)  # mcq refresh --from source
    rig.applied.record(key, read)
    repair = dataclasses.replace(change(1, "from the topics", 20), cause="refresh")
    rig.run(repair)
    assert rig.took() == [("1", "from the topics")]
    assert [c.position for c in rig.target.took] == [read] and rig.applied.get(key) == read
    # an older source read, or a change that is no refresh, is still skipped
    rig.run(dataclasses.replace(repair, position=Position(4_000, 0)), change(1, "late change", 30))
    assert rig.took() == [("1", "from the topics")] and rig.tally.counters.skipped == 2
    # and after a real change newer than the read, a refresh older than it is skipped as before
    rig.run(change(1, "newer change", 6_000))
    rig.run(dataclasses.replace(repair, position=Position(5_500, 7)))
    assert rig.took()[-1] == ("1", "newer change") and rig.tally.counters.skipped == 3


def test_an_unavailable_target_is_waited_for_said_once_and_its_return_said_once() -> None:
    rig = Rig(Target({"555-1": [TargetUnavailable("connection refused")]}, up_after=2))
    rig.run(change(1, "555-1", 10))
    assert rig.took() == [("1", "555-1")]  # applied once it was back
    assert rig.sent() == []  # nothing parked while the target was down
    said = [line.split(": ")[1] for line in rig.lines]
    assert len(said) == 2 and said[0] == "target unavailable, waiting"
    assert said[1].startswith("target available again after ")


def test_after_a_wait_for_the_target_the_applied_positions_are_read_through_the_broker_restart_wait() -> None:
    """Another instance may have applied the batch's keys meanwhile: the positions are read
    again, and a broker restarting at that moment is waited out, not the listener's end."""
    rig = Rig(Target({"555-1": [TargetUnavailable("connection refused")]}, up_after=1))
    rig.run(change(1, "555-1", 10))
    assert rig.kafka_calls == ["reading the applied positions"]
    assert rig.took() == [("1", "555-1")]


def test_a_stop_while_the_target_is_down_abandons_the_batch() -> None:
    stop = threading.Event()
    stop.set()
    watch = TargetWatch("LDAP", Target({}, up_after=99), stop, lambda line: None)  # type: ignore[arg-type]
    with pytest.raises(Abandon):
        watch.wait(None)
    assert not watch.up


def test_a_realtime_turn_inside_a_bulk_batch_supersedes_the_older_bulk_changes_of_its_key() -> None:
    """Between the chunks of a bulk batch the real-time lane applies a newer change of a key the
    bulk batch still holds (in the round being applied, and in a later round): neither older
    change reaches the target after it."""
    rig = Rig(Target({}))
    stop = threading.Event()
    watch = TargetWatch("LDAP", rig.target, stop)  # type: ignore[arg-type]
    job = Delivery(
        ListenerTopics("t", "LDAP"), Policy(**FAST), ListenerView(parse_registry(REGISTRY, "r.yaml"), "LDAP"),
        rig.applied, rig.producer, watch, rig.tally, stop,  # type: ignore[arg-type]
    )  # fmt: skip
    looks: list[int] = []

    def realtime_turn() -> bool:
        looks.append(1)
        if len(looks) != 2:
            return False  # nothing fetched before the first chunk; the live change before the second
        live: dict[str, list[Item]] = {}
        job.candidate(
            Item(Msg(99, "t.PERSON.Telephone"), Origin("t.PERSON.Telephone", 0, 99), change(2, "live", 50)), live
        )  # type: ignore[arg-type]
        job.apply_in_rounds(live, "realtime")
        return True

    job.turns = RealtimeTurns(realtime_turn, every_s=0)
    job.turns.measured(1, 0.01)  # 10 ms per change, and no time between turns: one change per call
    job.turns.measured(2, 0.02)
    bulk: dict[str, list[Item]] = {}
    for i, c in enumerate([change(1, "bulk", 10), change(2, "bulk", 20), change(2, "bulk later", 22)]):
        job.candidate(Item(Msg(i, "t.LDAP.bulk"), Origin("t.LDAP.bulk", 0, i), c), bulk)  # type: ignore[arg-type]
    job.apply_in_rounds(bulk, "bulk")
    assert rig.took() == [("1", "bulk"), ("2", "live")]
    assert rig.applied.get(ChangeKey("PERSON", "Telephone", 2)) == Position(50, 50)
    assert rig.tally.counters.superseded == 2 and job.undone == []


def test_the_realtime_lane_gets_no_turn_inside_its_own_batch() -> None:
    rig = Rig(Target({}))
    offered = []
    stop = threading.Event()
    job = Delivery(
        ListenerTopics("t", "LDAP"), Policy(**FAST), ListenerView(parse_registry(REGISTRY, "r.yaml"), "LDAP"),
        rig.applied, rig.producer, TargetWatch("LDAP", rig.target, stop), rig.tally, stop,  # type: ignore[arg-type]
    )  # fmt: skip
    job.turns = RealtimeTurns(lambda: offered.append(1) or True, every_s=0)
    job.turns.measured(1, 0.01)
    job.turns.measured(2, 0.02)
    todo: dict[str, list[Item]] = {}
    for i in range(3):
        job.candidate(Item(Msg(i), Origin("t.PERSON.Telephone", 0, i), change(i, "x", 10 + i)), todo)  # type: ignore[arg-type]
    job.apply_in_rounds(todo, "realtime")
    assert offered == [] and len(rig.took()) == 3
