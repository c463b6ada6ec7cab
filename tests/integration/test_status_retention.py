"""``mcq status`` on the real stack tells a listener that stayed behind longer than a
logical topic keeps its tombstones (``delete.retention.ms``): deletes written while it
was away may be gone before it reads them, and its target would keep those keys. The
retention is made a few seconds so the test waits past it for real. The listener then
catches up without the repair: the line stays (the listener marked what it read late),
until the line's repair (a whole-table refresh) is applied and the target checked
against the changes."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

from click.testing import CliRunner, Result
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from consumers.runtime.acks import AckMark
from consumers.runtime.listener import ListenerRuntime
from consumers.runtime.status import listener_status
from mcq.change import POSITION_HEADER, Change
from mcq.cli import main as cli
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import World, change, expected_state, make_world, produce, target_state
from mcq.testing.logs import log_lines
from mcq.topics.read import watermarks

RETENTION_MS = 4000


def _batch_world(settings: Settings, token: str, tmp: Path) -> World:
    """The test listener as a daily batch listener: stopped, it is IDLE, not DEAD, so
    ``mcq status`` exits 1 only for what this test is about."""
    w = make_world(settings, token, tmp)
    text = w.registry_file.read_text().replace(
        "    owner: tests@example\n", "    owner: tests@example\n    schedule: '0 3 * * *'\n"
    )
    w.registry_file.write_text(text)
    return dataclasses.replace(w, registry=parse_registry(text, str(w.registry_file)))


def _catch_up(w: World) -> list[str]:
    """Run the listener until it has caught up; the lines it reported."""
    with log_lines() as lines:
        runtime = ListenerRuntime(w.settings, w.name, registry=w.registry, http_port=None)
        assert runtime.run(until_caught_up=True) == 0
    return lines


def _keep_deletes(settings: Settings, topic: str, ms: int) -> None:
    admin = AdminClient(settings.kafka.client_config())
    entry = ConfigEntry("delete.retention.ms", str(ms), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _marks(w: World) -> dict[int, AckMark | None]:
    """The offset metadata the listener committed, per partition of the PHONE topic."""
    admin = AdminClient(w.settings.kafka.client_config())
    ask = ConsumerGroupTopicPartitions(w.topics.group, [TopicPartition(w.phone_topic, p) for p in range(3)])
    result = admin.list_consumer_group_offsets([ask])[w.topics.group].result(30)
    return {tp.partition: AckMark.parse(tp.metadata) for tp in result.topic_partitions if tp.offset >= 0}


def _status(w: World, *args: str) -> Result:
    env = {"MCQ_TOPIC_PREFIX": w.settings.topic_prefix}
    return CliRunner().invoke(cli, ["status", w.name, "--registry", str(w.registry_file), *args], env=env)


def _lose_the_delete(w: World, deleted: Change) -> None:
    """What the cleaner does to a listener that stayed away too long, in the small: a
    DELETE and its tombstone it has not read are gone before it reads them. Its commit
    moves past them keeping its metadata, as though they had been removed before it."""
    admin = AdminClient(w.settings.kafka.client_config())
    ask = ConsumerGroupTopicPartitions(w.topics.group, [TopicPartition(w.phone_topic, p) for p in range(3)])
    commits = admin.list_consumer_group_offsets([ask])[w.topics.group].result(30).topic_partitions
    consumer = Consumer({**w.settings.kafka.client_config(), "group.id": w.topics.group, "enable.auto.commit": False})
    try:
        ends = {c.partition: watermarks(consumer, c)[1] for c in commits}
        todo = {c.partition for c in commits if 0 <= c.offset < ends[c.partition]}
        consumer.assign([TopicPartition(w.phone_topic, c.partition, c.offset) for c in commits if c.partition in todo])
        past: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if dict(msg.headers() or []).get(POSITION_HEADER) == str(deleted.position).encode():
                past[partition] = offset + 1  # the DELETE, then its tombstone
            if offset + 1 >= ends[partition]:
                todo.discard(partition)
        skip = [
            TopicPartition(w.phone_topic, c.partition, past[c.partition], metadata=c.metadata)
            for c in commits
            if c.partition in past
        ]
        assert skip and all(tp.metadata for tp in skip), (commits, past)
        consumer.commit(offsets=skip, asynchronous=False)
    finally:
        consumer.close()


def test_status_reports_a_listener_behind_longer_than_its_topic_keeps_deletes(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = _batch_world(settings, token, tmp_path)
    listener = w.registry.listener(w.name)
    assert listener is not None
    first = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(6)]
    produce(w.settings, w.phone_topic, first)
    _catch_up(w)
    marks = _marks(w)
    assert marks and all(m is not None and m.since is not None for m in marks.values()), marks
    _keep_deletes(w.settings, w.phone_topic, RETENTION_MS)

    # caught up: not reported, however much older than the retention its commits are
    time.sleep(RETENTION_MS / 1000 + 0.5)
    idle = _status(w, "--json")
    assert idle.exit_code == 0, (idle.output, idle.stderr)
    assert json.loads(idle.stdout)[0]["tombstones_at_risk"] is None
    assert idle.stderr == ""

    # new changes (a delete among them) on partitions whose last commit is older than the
    # retention: they have waited a moment only, nothing can have been cleaned yet
    later = [change("PHONE", 0, None, "DELETE"), change("PHONE", 1, "+1-518-7654321", "UPDATE")]
    produced_at = time.time()
    produce(w.settings, w.phone_topic, later)
    assert all(m is not None and produced_at - m.at > RETENTION_MS / 1000 for m in marks.values())
    fresh = listener_status(w.settings, w.registry, listener, [], now=produced_at + 1.0)
    assert fresh.pending >= 3 and fresh.tombstones_at_risk is None, fresh

    # once they have waited longer than the topic keeps deletes: exit 1, one line on stderr
    time.sleep(max(0.0, produced_at + RETENTION_MS / 1000 + 1.0 - time.time()))
    risky = _status(w)
    assert risky.exit_code == 1, (risky.output, risky.stderr)
    [line] = risky.stderr.splitlines()
    head = (
        f"mcq status: listener {w.name}: changes waited longer than their topic keeps deletes, on {w.phone_topic} for "
    )
    assert line.startswith(head), line
    assert line.endswith(
        f"(delete.retention.ms {RETENTION_MS} = 4.0 s): deleted keys may remain at its target; repair: "
        f"mcq refresh {w.name} --tname PHONE; then let it catch up (mcq listen {w.name} --until-caught-up)"
    ), line
    as_json = _status(w, "--json")
    assert as_json.exit_code == 1
    in_json = json.loads(as_json.stdout)[0]["tombstones_at_risk"]
    waited = re.compile(r"for [0-9.]+ s \(")  # how long differs between the two calls
    assert waited.sub("", f"mcq status: {in_json}") == waited.sub("", line)

    # the listener catches up without ever seeing the delete (the cleaner took it): nothing
    # is pending any more, and the line stays, from the mark it left as it read the rest
    _lose_the_delete(w, later[0])
    [said] = [x for x in _catch_up(w) if "keeps deletes" in x]
    assert waited.sub("", f"mcq status: {said}") == waited.sub("", line)
    gone = first[0].key.text()
    assert gone in target_state(w.settings, w.table)  # the deleted key stayed at the target
    marked = _status(w, "--json")
    assert marked.exit_code == 1, (marked.output, marked.stderr)
    assert json.loads(marked.stdout)[0]["pending"] == 0
    assert waited.sub("", marked.stderr.strip()) == waited.sub("", line)

    # the repair the line names, run as it says: a whole-table refresh of PHONE for this
    # listener; with its records in the bulk lane the mark is gone, and once applied the
    # deleted key has left the target
    repair = re.search(r"repair: (mcq refresh [^;]+);", line)
    assert repair is not None and repair.group(1) == f"mcq refresh {w.name} --tname PHONE", line
    env = {"MCQ_TOPIC_PREFIX": w.settings.topic_prefix, "MCQ_HOME": str(w.settings.stack.home)}
    args = [*repair.group(1).split()[1:], "--registry", str(w.registry_file)]
    done = CliRunner().invoke(cli, args, env=env)
    assert done.exit_code == 0, done.output
    pending = _status(w, "--json")
    assert pending.exit_code == 0 and pending.stderr == "", (pending.output, pending.stderr)
    assert json.loads(pending.stdout)[0]["pending"] > 0  # the refresh, waiting in the bulk lane
    _catch_up(w)
    assert target_state(w.settings, w.table) == expected_state(first + later)
    healed = _status(w)
    assert healed.exit_code == 0 and healed.stderr == "", (healed.output, healed.stderr)


def test_a_listener_told_to_refresh_on_exposure_repairs_its_target_itself(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """``delivery.on_exposure: refresh``: the listener that finds it waited longer than its
    topic keeps deletes requests the whole-table refresh of that table itself, through its
    own bulk lane; once applied, the deleted key has left the target and status is quiet."""
    w = _batch_world(settings, token, tmp_path)
    text = w.registry_file.read_text().replace(
        "      max_attempts: 3\n", "      max_attempts: 3\n      on_exposure: refresh\n"
    )
    w.registry_file.write_text(text)
    w = dataclasses.replace(w, registry=parse_registry(text, str(w.registry_file)))
    first = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(6)]
    produce(w.settings, w.phone_topic, first)
    _catch_up(w)
    _keep_deletes(w.settings, w.phone_topic, RETENTION_MS)
    time.sleep(RETENTION_MS / 1000 + 0.5)
    later = [change("PHONE", 0, None, "DELETE"), change("PHONE", 1, "+1-518-7654321", "UPDATE")]
    produced_at = time.time()
    produce(w.settings, w.phone_topic, later)
    time.sleep(max(0.0, produced_at + RETENTION_MS / 1000 + 1.0 - time.time()))
    _lose_the_delete(w, later[0])
    said = _catch_up(w)
    assert any("requested a whole-table refresh of PHONE through its bulk lane" in x for x in said), said
    # applied in this run's bulk lane, or the next run's
    healed = said + (_catch_up(w) if first[0].key.text() in target_state(w.settings, w.table) else [])
    assert any("deletes missed on" in x and "repaired" in x for x in healed), healed
    assert target_state(w.settings, w.table) == expected_state(first + later)
    quiet = _status(w)
    assert quiet.exit_code == 0 and quiet.stderr == "", (quiet.output, quiet.stderr)
