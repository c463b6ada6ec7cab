"""A listener's applied positions restored from the last run's snapshot end equal to those
read from the whole applied topic, after another instance wrote more; a scheduled run
that starts from the snapshot still skips every change it applied before."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers.runtime.acks import ExposureMark
from consumers.runtime.applied import AppliedPositions
from consumers.runtime.listener import ListenerRuntime
from mcq.change import Position
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import World, change, expected_state, make_world, produce, target_state
from mcq.testing.logs import log_lines
from mcq.topics.plan import apply_topics
from mcq.topics.read import all_watermarks
from tests.support.applied import KEYS, Write, oracle, view_of


def _write(a: AppliedPositions, rnd: random.Random, n: int, clock: list[int]) -> list[Write]:
    """Random writes as a listener makes them: mostly newer positions, some stale ones
    (another instance's late write), presence flips at the same position, park/dead marks."""
    done = []
    for _ in range(n):
        key = rnd.choice(KEYS)
        clock[0] += 10
        roll = rnd.random()
        if roll < 0.1:
            a.mark_parked(key, Position(clock[0], 1))
            done.append(("park", key, Position(clock[0], 1), True))
        elif roll < 0.15:
            a.mark_dead(key, Position(clock[0] - 5, 1))
            done.append(("dead", key, Position(clock[0] - 5, 1), True))
        else:
            pos = Position(clock[0] - rnd.choice([0, 0, 0, 400]), 1)  # now and then an older one
            present = rnd.random() > 0.2
            a.record(key, pos, present)
            done.append(("applied", key, pos, present))
            if rnd.random() < 0.05:
                a.record(key, pos, False)  # at the same position, the key leaves the target
                done.append(("applied", key, pos, False))
    return done


def test_applied_positions_restored_from_a_snapshot_end_equal_to_a_whole_read_of_the_topic(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    apply_topics(w.settings, w.topics.specs())
    snapshot = tmp_path / "state" / "T.applied"
    producer = Producer({**w.settings.kafka.client_config(), "enable.idempotence": True})
    rnd, clock = random.Random(17), [1000]

    first = AppliedPositions(w.settings, w.topics.applied, producer, snapshot)
    first.catch_up()
    assert first.restored == "read whole: no snapshot yet"
    writes = _write(first, rnd, 1500, clock)
    exposed = ExposureMark(w.phone_topic, 1.0, 99.0, 60_000, "PHONE")
    kept = ExposureMark(w.room_topic, 2.0, 88.0, 60_000, "ROOM")
    assert first.mark_exposed(exposed) and first.mark_exposed(kept)
    assert producer.flush(30) == 0
    first.close(save=True)
    assert snapshot.is_file() and snapshot.stat().st_mode & 0o777 == 0o600
    admin = AdminClient(w.settings.kafka.client_config())
    marks = all_watermarks(admin, [TopicPartition(w.topics.applied, p) for p in range(3)])
    ends = {p: high for (_, p), (_, high) in marks.items() if high > 0}

    other = AppliedPositions(w.settings, w.topics.applied, producer)  # another instance, meanwhile
    other.catch_up()
    writes += _write(other, rnd, 1500, clock)
    assert other.clear_exposed(w.phone_topic)  # a whole-table refresh repaired it
    assert producer.flush(30) == 0
    other.close(save=False)

    restored = AppliedPositions(w.settings, w.topics.applied, producer, snapshot)
    assert restored.restored.startswith("restored "), restored.restored
    assert restored.positions() == ends  # it reads only what was written after the snapshot
    restored.catch_up()
    whole = AppliedPositions(w.settings, w.topics.applied, producer)
    whole.catch_up()
    try:
        want = oracle(writes)
        assert {text: v[:2] for text, v in view_of(whole).items() if v[0] is not None} == want
        assert view_of(restored) == view_of(whole)  # positions, presence, park marks, blocked keys
        assert restored.exposed() == whole.exposed() == {w.room_topic: kept}  # the other one was cleared
    finally:
        restored.close(save=False)
        whole.close(save=False)


def test_a_snapshot_saved_while_another_instance_wrote_in_between_still_holds_its_writes(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """At close an instance moves past its own writes without reading them back, unless
    records it has not read lie between them: the other instance's writes must then be
    read before the snapshot is saved, or the next run would never see them."""
    w = make_world(settings, token, tmp_path)
    apply_topics(w.settings, w.topics.specs())
    snapshot = tmp_path / "state" / "T.applied"
    producer = Producer({**w.settings.kafka.client_config(), "enable.idempotence": True})
    rnd, clock = random.Random(23), [1000]
    mine = AppliedPositions(w.settings, w.topics.applied, producer, snapshot)
    other = AppliedPositions(w.settings, w.topics.applied, producer)
    mine.catch_up()
    other.catch_up()
    for _ in range(3):  # interleaved on every partition
        for who in (mine, other):
            _write(who, rnd, 200, clock)
            assert producer.flush(30) == 0
    mine.close(save=True)
    other.close(save=False)

    restored = AppliedPositions(w.settings, w.topics.applied, producer, snapshot)
    whole = AppliedPositions(w.settings, w.topics.applied, producer)
    whole.catch_up()
    try:
        assert restored.restored.startswith("restored "), restored.restored
        admin = AdminClient(w.settings.kafka.client_config())
        marks = all_watermarks(admin, [TopicPartition(w.topics.applied, p) for p in range(3)])
        assert restored.positions() == {p: high for (_, p), (_, high) in marks.items() if high > 0}
        assert view_of(restored) == view_of(whole)  # without reading anything more
    finally:
        restored.close(save=False)
        whole.close(save=False)


def _run(w: World, lines: list[str]) -> ListenerRuntime:
    with log_lines() as said:
        runtime = ListenerRuntime(w.settings, w.name, registry=w.registry, http_port=None)
        assert runtime.run(until_caught_up=True) == 0
    lines.extend(said)
    return runtime


def test_a_scheduled_run_starts_from_the_applied_snapshot_and_still_skips_every_change_it_applied(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    w = dataclasses.replace(w, settings=w.settings.model_copy(update={"state_dir": tmp_path / "state"}))
    first = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(80)]
    produce(w.settings, w.phone_topic, first)
    lines: list[str] = []
    _run(w, lines)
    assert any("applied positions: read whole: no snapshot yet" in line for line in lines), lines
    assert (tmp_path / "state" / f"{w.settings.topic_prefix}.{w.name}.applied").is_file()

    later = [change("PHONE", pid, None, "DELETE") for pid in range(10)]
    later += [change("PHONE", pid, f"+1-518-{pid + 1:07d}", "UPDATE") for pid in range(10, 40)]
    produce(w.settings, w.phone_topic, later)
    # the whole topic is read again (a replay): what the last run applied must be skipped
    admin = AdminClient(w.settings.kafka.client_config())
    start = [TopicPartition(w.phone_topic, p, 0) for p in range(3)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(w.topics.group, start)])[w.topics.group].result()

    lines.clear()
    again = _run(w, lines)
    assert any("applied positions: restored 80 keys from" in line for line in lines), lines
    assert again.counters.skipped == len(first)  # none of them applied twice
    assert target_state(w.settings, w.table) == expected_state(first + later)
