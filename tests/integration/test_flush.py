"""``mcq flush``: what a stopped listener had pending is written to a file, record by
record, and never applied; what comes after is. A skipped parked change leaves its key
unblocked. Refused while the listener runs, and without --yes."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers.runtime.applied import AppliedPositions
from consumers.runtime.flush import Flush
from consumers.runtime.topics import live_members
from mcq.change import Change, ChangeCodec
from mcq.cli import main
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.stack import Stack
from mcq.testing.listeners import (
    caught_up,
    change,
    expected_state,
    make_world,
    produce,
    running,
    target_state,
    wait_for,
)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _written(changes: list[Change]) -> set[tuple[str, str, str]]:
    return {(c.key.text(), c.change_type, str(c.position)) for c in changes}


def test_flushed_changes_are_written_to_the_file_and_never_applied_and_later_ones_are(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    first = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(10)]
    produce(w.settings, w.phone_topic, first)
    caught_up(w)
    assert target_state(w.settings, w.table) == expected_state(first)

    skipped = [change("PHONE", pid, f"+1-999-{pid:07d}") for pid in range(5)]
    skipped += [change("PHONE", pid, f"+1-999-{pid:07d}", "INSERT") for pid in range(20, 25)]
    skipped += [change("PHONE", 9, None, "DELETE")]  # and its tombstone
    produce(w.settings, w.phone_topic, skipped)
    parked = change("PHONE", 7, "+1-000-0000000")
    # a change waiting in the retry lane: the runtime parks a logical record's bytes as they are
    key, value = ChangeCodec(registry_client(w.settings)).encode(w.phone_topic, parked)
    producer = Producer(w.settings.kafka.client_config())
    producer.produce(w.topics.retry, key=key, value=value)
    assert producer.flush(30) == 0

    job = Flush(w.settings, w.registry, w.name)
    plan = job.plan()
    assert plan.pending == len(skipped) + 1 + 1  # the tombstone, the parked change
    out = tmp_path / "flushed.jsonl"
    assert job.apply(plan, out) == plan.pending
    lines = _lines(out)
    assert {(str(li["key"]), str(li["change_type"]), str(li["position"])) for li in lines if "change_type" in li} == (
        _written([*skipped, parked])
    )
    assert [li["key"] for li in lines if li.get("tombstone")] == [change("PHONE", 9, None).key.text()]
    positions = AppliedPositions(w.settings, w.topics.applied, Producer(w.settings.kafka.client_config()))
    positions.catch_up()
    try:
        assert f"dead:{parked.key.text()}" in positions.marked()
        assert not positions.blocked(parked.key)
    finally:
        positions.close(save=False)

    later = [change("PHONE", pid, f"+1-777-{pid:07d}") for pid in (1, 7, 8)]
    produce(w.settings, w.phone_topic, later)
    run = caught_up(w)
    assert run.counters.applied == len(later)
    assert target_state(w.settings, w.table) == expected_state(first + later)  # none of the skipped


def test_a_flush_before_a_time_skips_only_what_was_written_before_it(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    old = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(10)]
    produce(w.settings, w.phone_topic, old)
    time.sleep(1.0)
    since_ms = int(time.time() * 1000)
    time.sleep(1.0)
    new = [change("PHONE", pid, f"+1-519-{pid:07d}", "INSERT") for pid in range(10, 15)]
    produce(w.settings, w.phone_topic, new)

    job = Flush(w.settings, w.registry, w.name)
    plan = job.plan(since_ms)
    assert plan.pending == len(old)
    job.apply(plan, tmp_path / "old.jsonl")
    assert {str(li["key"]) for li in _lines(tmp_path / "old.jsonl")} == {c.key.text() for c in old}
    run = caught_up(w)
    assert run.counters.applied == len(new)
    assert target_state(w.settings, w.table) == expected_state(new)


def test_a_flush_is_refused_while_the_listener_runs_and_without_yes(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    env = {"MCQ_TOPIC_PREFIX": w.settings.topic_prefix, "MCQ_HOME": str(w.settings.stack.home)}
    reg = ["--registry", str(w.registry_file)]
    cli = CliRunner()
    with running(w):
        admin = AdminClient(w.settings.kafka.client_config())
        wait_for("the listener in its group", lambda: bool(live_members(admin, w.topics)), 60)
        out = cli.invoke(main, ["flush", w.name, "--yes", *reg], env=env)
        assert out.exit_code == 1 and "the listener is running" in out.output, out.output

    produce(w.settings, w.phone_topic, [change("PHONE", pid, "+1-518-0000000", "INSERT") for pid in range(4)])
    admin = AdminClient(w.settings.kafka.client_config())
    tps = [TopicPartition(w.phone_topic, p) for p in range(3)]

    def committed() -> list[int]:
        done = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(w.topics.group, tps)])
        return sorted(tp.offset for tp in done[w.topics.group].result().topic_partitions)

    before = committed()
    out = cli.invoke(main, ["flush", w.name, *reg], env=env)
    assert out.exit_code == 2 and "add --yes" in out.output, out.output
    out = cli.invoke(main, ["flush", w.name, "--dry-run", *reg], env=env)
    assert out.exit_code == 0 and "4 pending record(s) to skip" in out.output, out.output
    out = cli.invoke(main, ["flush", w.name, "--before", "soon", *reg], env=env)
    assert out.exit_code == 2 and "'soon' is neither" in out.output, out.output
    assert committed() == before  # nothing moved
    out = cli.invoke(main, ["flush", w.name, "--yes", "--out", str(tmp_path / "f.jsonl"), *reg], env=env)
    assert out.exit_code == 0 and "skipped 4 record(s)" in out.output, out.output
    assert len(_lines(tmp_path / "f.jsonl")) == 4
