"""``mcq replay``: a stopped listener replayed from the earliest record or from a time
applies its changes again -- a target that lost rows (restored from an old backup) ends
equal to the source again, which moving the consumer group back alone does not do (the
applied positions would skip every change as a duplicate). Refused while the listener
runs; bad input names what and where and changes nothing."""

from __future__ import annotations

import random
import time
from pathlib import Path

import psycopg
from click.testing import CliRunner
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers.runtime.groups import ListenerRunning
from consumers.runtime.replay import Replay
from mcq.change import Change
from mcq.cli import main
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import (
    World,
    caught_up,
    change,
    expected_state,
    make_world,
    produce,
    running,
    target_state,
    wait_for,
)


def _workload(rnd: random.Random, keys: range, n: int) -> list[Change]:
    """Inserts of every key, then random updates and deletes (a deleted key may come back)."""
    out = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in keys]
    live = set(keys)
    for i in range(n):
        pid = rnd.choice(list(keys))
        if pid in live and rnd.random() < 0.2:
            out.append(change("PHONE", pid, None, "DELETE"))
            live.discard(pid)
        else:
            out.append(change("PHONE", pid, f"+1-555-{i:07d}", "INSERT" if pid not in live else "UPDATE"))
            live.add(pid)
    return out


def _lose_rows(w: World, keys: set[str] | None = None) -> None:
    """The target restored from an old backup: the rows of ``keys`` (all rows) gone."""
    with psycopg.connect(w.settings.vendor.dsn(), autocommit=True) as conn:
        if keys is None:
            conn.execute(f"TRUNCATE {w.table}")
        else:
            conn.execute(f"DELETE FROM {w.table} WHERE change_key = ANY(%s)", (sorted(keys),))


def _committed(w: World) -> dict[tuple[str, int], int]:
    admin = AdminClient(w.settings.kafka.client_config())
    tps = [TopicPartition(w.phone_topic, p) for p in range(3)]
    done = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(w.topics.group, tps)])
    return {(tp.topic, tp.partition): tp.offset for tp in done[w.topics.group].result().topic_partitions}


def test_a_replay_from_earliest_applies_everything_again_and_restores_a_target_that_lost_its_rows(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    changes = _workload(random.Random(5), range(60), 240)
    produce(w.settings, w.phone_topic, changes)
    first = caught_up(w)
    want = expected_state(changes)
    assert target_state(w.settings, w.table) == want

    _lose_rows(w)
    again = caught_up(w)  # nothing new to read: the lost rows stay lost
    assert again.counters.applied == 0 and target_state(w.settings, w.table) == {}

    replay = Replay(w.settings, w.registry, w.name)
    plan = replay.plan("earliest")
    assert {tp for tp in plan.offsets} == {(w.phone_topic, p) for p in range(3)}
    assert all(to == 0 for _, to in plan.offsets.values())
    assert len(plan.keys) == 60  # every key the listener ever applied, present or not
    assert {k for k, present in plan.keys.items() if present} == set(want)
    replay.apply(plan)

    replayed = caught_up(w)
    assert replayed.counters.skipped == first.counters.skipped  # nothing taken for a duplicate
    assert replayed.counters.applied == first.counters.applied
    assert target_state(w.settings, w.table) == want


def test_a_replay_from_a_time_applies_only_what_came_after_it(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    before = _workload(random.Random(7), range(40), 80)
    produce(w.settings, w.phone_topic, before)
    caught_up(w)
    time.sleep(1.0)
    since_ms = int(time.time() * 1000)
    time.sleep(1.0)
    later = [change("PHONE", pid, f"+1-777-{pid:07d}", "INSERT") for pid in range(100, 110)]
    later += [change("PHONE", pid, None, "DELETE") for pid in range(100, 103)]
    produce(w.settings, w.phone_topic, later)
    caught_up(w)
    want = expected_state(before + later)
    assert target_state(w.settings, w.table) == want

    changed_later = {c.key.text() for c in later}
    _lose_rows(w, changed_later)  # a backup from before the time replayed from
    assert target_state(w.settings, w.table) == {k: v for k, v in want.items() if k not in changed_later}
    replay = Replay(w.settings, w.registry, w.name)
    plan = replay.plan(since_ms)
    assert len(plan.keys) == 40 + 10  # every key of the topic: those not replayed keep position 0 until changed
    replay.apply(plan)
    replayed = caught_up(w)
    assert replayed.counters.applied == len(later)  # only what came after the time
    assert target_state(w.settings, w.table) == want


def test_a_replay_is_refused_while_the_listener_runs_and_bad_input_names_what_and_where(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    produce(w.settings, w.phone_topic, [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(10)])
    caught_up(w)
    committed = _committed(w)
    env = {"MCQ_TOPIC_PREFIX": w.settings.topic_prefix}
    cli = CliRunner()
    reg = ["--registry", str(w.registry_file)]

    with running(w):
        replay = Replay(w.settings, w.registry, w.name)
        wait_for("the listener in its group", lambda: bool(replay.live_members()), 60)
        out = cli.invoke(main, ["replay", w.name, "--from", "earliest", *reg], env=env)
        assert out.exit_code == 1, out.output
        assert "the listener is running" in out.output and "stop it first" in out.output
        try:
            replay.plan("earliest")
            raise AssertionError("planned while running")
        except ListenerRunning:
            pass

    bad = tmp_path / "offsets.csv"
    bad.write_text(f"# topic,partition,offset\n{w.phone_topic},0,0\n{w.phone_topic},one,3\n")
    out = cli.invoke(main, ["replay", w.name, "--from", str(bad), *reg], env=env)
    assert out.exit_code == 2 and f"{bad}:3: partition and offset must be whole numbers" in out.output, out.output
    out = cli.invoke(main, ["replay", "Nobody", "--from", "earliest", *reg], env=env)
    assert out.exit_code == 2 and "no listener named Nobody" in out.output, out.output
    out = cli.invoke(main, ["replay", w.name, "--from", "yesterday", *reg], env=env)
    assert out.exit_code == 2 and "'yesterday' is neither" in out.output, out.output
    out = cli.invoke(main, ["replay", w.name, "--from", "earliest", "--dry-run", *reg], env=env)
    assert out.exit_code == 0 and "dry run: nothing changed" in out.output, out.output
    assert _committed(w) == committed  # none of the above moved anything

    good = tmp_path / "good.csv"
    good.write_text(f"{w.phone_topic},0,0\n{w.phone_topic},1,0\n{w.phone_topic},2,0\n")
    out = cli.invoke(main, ["replay", w.name, "--from", str(good), *reg], env=env)
    assert out.exit_code == 0 and "applied positions reset" in out.output, out.output
    assert all(offset == 0 for offset in _committed(w).values())
