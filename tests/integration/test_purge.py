"""``mcq purge``: resolved dead letters older than the listener's retention, applied
positions of keys deleted longer ago than their topic keeps deletes, and heartbeats of
instances gone are removed, each written to a file first; an unresolved dead letter, a
key at the target, a recent delete and a live instance's heartbeat are kept."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from consumers.runtime.dlq import DeadLetters
from consumers.runtime.parking import H_FAILED_AT, H_TOPIC
from consumers.runtime.purge import Purge
from consumers.runtime.topics import live_members
from mcq.change import ChangeKey
from mcq.cli import main
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import World, make_world, running, wait_for
from mcq.topics.listener import ListenerTopics
from mcq.topics.plan import apply_topics
from mcq.topics.read import read_to_end

DAY_MS = 86_400_000


def _retention(w: World, days: int) -> World:
    text = w.registry_file.read_text().replace(
        "stuck_after_s: 600", f"stuck_after_s: 600\n      dead_letter_retention_days: {days}"
    )
    w.registry_file.write_text(text)
    registry = parse_registry(text, str(w.registry_file))
    return World(w.settings, w.name, w.table, registry, w.registry_file, w.topics)


def _key(pid: int) -> str:
    return ChangeKey("PHONE", None, pid, None, None, "office").text()


def test_purge_removes_only_what_no_one_needs_and_writes_it_to_a_file(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = _retention(make_world(settings, token, tmp_path), 7)
    t: ListenerTopics = w.topics
    apply_topics(w.settings, t.specs())
    now_ms = int(time.time() * 1000)
    producer = Producer(w.settings.kafka.client_config())
    # dead letters: two old resolved, one old unresolved, one recent resolved (in this order)
    for age_days in (10, 9, 8, 1):
        headers = [(H_FAILED_AT, str(now_ms - age_days * DAY_MS).encode()), (H_TOPIC, w.phone_topic.encode())]
        producer.produce(t.dlq, key=b"k", value=b"v", headers=headers)
    # applied positions: deleted two days ago, at the target, deleted just now; a mark
    producer.produce(t.applied, key=_key(1).encode(), value=b"5/6/-", timestamp=now_ms - 2 * DAY_MS)
    producer.produce(t.applied, key=_key(2).encode(), value=b"5/6", timestamp=now_ms - 2 * DAY_MS)
    producer.produce(t.applied, key=_key(3).encode(), value=b"7/8/-")
    producer.produce(t.applied, key=f"dead:{_key(4)}".encode(), value=b"1/2", timestamp=now_ms - 2 * DAY_MS)
    # heartbeats: an instance stopped two days ago, one stopped a minute ago, and a beat forged
    # under another listener's name (this topic is this listener's own: the monitor skips it)
    for key, age_s in ((f"{w.name}/old", 2 * 86_400), (f"{w.name}/recent", 60), ("OTHER/old", 2 * 86_400)):
        beat = {"listener": key.split("/")[0], "instance": key.split("/")[1], "host": "h", "pid": 1,
                "started_at": 0.0, "at": time.time() - age_s, "state": "stopped", "timeout_s": 30.0}  # fmt: skip
        producer.produce(t.heartbeats, key=key.encode(), value=json.dumps(beat).encode())
    assert producer.flush(30) == 0
    letters = DeadLetters(w.settings, w.name)
    entries = letters.entries()
    letters.discard([entries[0], entries[1], entries[3]], reason="test")

    env = {"MCQ_TOPIC_PREFIX": w.settings.topic_prefix, "MCQ_HOME": str(w.settings.stack.home)}
    dry = CliRunner().invoke(main, ["purge", w.name, "--registry", str(w.registry_file), "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    assert f"purge {w.name}: dead letters: 2 resolved older than 7 day(s); 1 older but unresolved kept" in dry.output
    assert f"purge {w.name}: applied positions: 1 of keys deleted" in dry.output
    assert f"purge {w.name}: heartbeats: 2 of instances gone" in dry.output
    assert len(letters.entries(include_resolved=True)) == 4  # the dry run removed nothing

    out = tmp_path / "purged"
    done = CliRunner().invoke(main, ["purge", w.name, "--registry", str(w.registry_file), "--out", str(out)], env=env)
    assert done.exit_code == 0, done.output
    [written] = list(out.glob("*.jsonl"))
    lines = [json.loads(x) for x in written.read_text().splitlines()]
    assert [x["what"] for x in lines] == ["dead letter", "dead letter", "applied position", "heartbeat", "heartbeat"]
    assert [x["offset"] for x in lines[:2]] == [0, 1] and lines[2]["key"] == _key(1)

    kept = letters.entries(include_resolved=True)
    assert [(e.offset, e.resolution is None) for e in kept] == [(2, True), (3, False)]
    applied = {}
    for msg in read_to_end(w.settings, t.applied):
        applied[(msg.key() or b"").decode()] = msg.value()
    assert applied[_key(1)] is None and applied[_key(2)] == b"5/6" and applied[_key(3)] == b"7/8/-"
    assert applied[f"dead:{_key(4)}"] == b"1/2"  # marks are not positions of deleted keys
    beats = {}
    for msg in read_to_end(w.settings, t.heartbeats):
        beats[(msg.key() or b"").decode()] = msg.value()
    assert beats[f"{w.name}/old"] is None and beats[f"{w.name}/recent"] and beats["OTHER/old"] is None


def test_purge_is_refused_while_the_listener_runs(stack: Stack, settings: Settings, token: str, tmp_path: Path) -> None:
    w = make_world(settings, token, tmp_path)
    with running(w) as rt:
        admin = AdminClient(w.settings.kafka.client_config())
        wait_for("the listener in its group", lambda: bool(live_members(admin, w.topics)), 60)
        env = {"MCQ_TOPIC_PREFIX": w.settings.topic_prefix}
        refused = CliRunner().invoke(main, ["purge", w.name, "--registry", str(w.registry_file)], env=env)
        assert rt.counters.failed == 0
    assert refused.exit_code == 1
    assert refused.output.startswith(f"mcq purge {w.name}: the listener is running ("), refused.output
    unknown = CliRunner().invoke(main, ["purge", "NOPE", "--registry", str(w.registry_file)], env=env)
    assert unknown.exit_code == 2 and "no listener named NOPE" in unknown.output
    assert Purge(w.settings, w.registry, w.name).plan().total == 0  # stopped: nothing to purge
