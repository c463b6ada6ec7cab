"""Due times that never block another key: a retry-lane record not due yet waits by its own
due time (consumers/runtime/waiting.py), not at the head of its partition. One key held
for an hour ahead of another key's 5-second retry in the same retry partition, and a
change of a 10-second delayed interest: the second and the third are applied on time,
the first waits, and it still waits after a restart (nothing applied twice)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from click.testing import CliRunner
from confluent_kafka import Producer

from consumers.runtime.parking import Origin, failure_headers
from mcq.change import Change, ChangeCodec
from mcq.cli import main as cli
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.stack import Stack
from mcq.testing.listeners import change, expected_state, make_world, produce, running, target_state, wait_for
from mcq.topics.plan import apply_topics


def _applied_at(settings: Settings, table: str, key: str) -> datetime | None:
    with psycopg.connect(settings.vendor.dsn()) as conn:
        row = conn.execute(f"SELECT applied_at FROM {table} WHERE change_key = %s", (key,)).fetchone()
    return row[0] if row else None


def test_a_key_held_for_an_hour_holds_no_other_keys_retry_or_delay(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    delayed = "  - {listener: T, tname: ROOM, delay_s: 10}\n"
    w = make_world(settings, token, tmp_path, extra=delayed)
    apply_topics(w.settings, w.topics.specs())
    codec = ChangeCodec(registry_client(w.settings))
    producer = Producer({**w.settings.kafka.client_config(), "enable.idempotence": True})

    def park(c: Change, hold_s: float, offset: int) -> None:
        """A record of the retry lane as the runtime parks it, in retry partition 0."""
        key, value = codec.encode(w.phone_topic, c)
        until_ms = int((time.time() + hold_s) * 1000)
        headers = failure_headers(
            w.name, Origin(w.phone_topic, 0, offset), 1, "test", "failed", until_ms, str(c.position)
        )
        producer.produce(w.topics.retry, key=key, value=value, headers=headers, partition=0)

    held, soon = change("PHONE", 1, "held an hour", "INSERT"), change("PHONE", 2, "retried in 5 s", "INSERT")
    park(held, 3600, 10)
    park(soon, 5, 11)
    assert producer.flush(30) == 0
    room = w.registry.tables[1].topic(w.settings.topic_prefix)
    late = change("ROOM", 3, "delayed 10 s", "INSERT")
    late = Change(late.key, late.change_type, late.position, datetime.now(UTC), "t", after=late.after)
    with running(w) as rt:
        produce(w.settings, room, [late])
        wait_for("the 5-second retry", lambda: soon.key.text() in target_state(w.settings, w.table), 60)
        wait_for("the 10-second delay", lambda: late.key.text() in target_state(w.settings, w.table), 60)
        at = _applied_at(w.settings, w.table, late.key.text())
        assert at is not None and at >= late.entry_time.replace(microsecond=0)  # not before its commit
        assert (at - late.entry_time).total_seconds() >= 9.5, at  # nor before its delay
        assert held.key.text() not in target_state(w.settings, w.table)
        assert len(rt._waiting_room) == 1  # the held one, waiting by its own time
        applied = rt.counters.applied
    assert applied == 2
    # mcq status tells it: one change waiting, due in about an hour; nothing pending or stuck
    env = {"MCQ_TOPIC_PREFIX": w.settings.topic_prefix}
    shown = CliRunner().invoke(cli, ["status", w.name, "--registry", str(w.registry_file), "--json"], env=env)
    [row] = json.loads(shown.stdout)
    assert row["waiting"] == 1 and 3000 < row["next_due"] - time.time() <= 3600, row
    assert row["pending"] == 0, row
    with running(w) as rt:  # a restart: the held one waits on; nothing is applied again
        wait_for("the waiting record read back", lambda: len(getattr(rt, "_waiting_room", ())) == 1, 60)
        time.sleep(3)
        assert rt.counters.applied == 0 and held.key.text() not in target_state(w.settings, w.table)


def test_a_run_until_caught_up_applies_what_came_due_while_it_was_away_and_leaves_the_rest(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """A scheduled listener: a change parked for 2 s by one run is applied by the next run
    (due by then), before that run ends; one held an hour still waits after it."""
    from consumers.runtime.listener import ListenerRuntime

    w = make_world(settings, token, tmp_path)
    apply_topics(w.settings, w.topics.specs())
    codec = ChangeCodec(registry_client(w.settings))
    producer = Producer({**w.settings.kafka.client_config(), "enable.idempotence": True})
    soon, later = change("PHONE", 1, "due in 2 s", "INSERT"), change("PHONE", 2, "due in an hour", "INSERT")
    for offset, (c, hold_s) in enumerate(((soon, 2), (later, 3600))):
        key, value = codec.encode(w.phone_topic, c)
        until_ms = int((time.time() + hold_s) * 1000)
        headers = failure_headers(
            w.name, Origin(w.phone_topic, 0, offset), 1, "test", "failed", until_ms, str(c.position)
        )
        producer.produce(w.topics.retry, key=key, value=value, headers=headers, partition=0)
    assert producer.flush(30) == 0

    def run() -> ListenerRuntime:
        runtime = ListenerRuntime(w.settings, w.name, registry=w.registry, http_port=None)
        assert runtime.run(until_caught_up=True) == 0
        return runtime

    first = run()  # both wait: neither is due yet
    assert first.counters.applied == 0 and target_state(w.settings, w.table) == {}
    time.sleep(3)
    second = run()
    assert second.counters.applied == 1
    assert set(target_state(w.settings, w.table)) == {soon.key.text()}


def test_a_flush_skips_the_changes_waiting_for_their_due_time_too(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """A change parked for an hour sits in the waiting topic, not in the retry lane: a flush
    writes it to the file, tombstones it there and unblocks its key; it is never applied,
    the key's next change is."""
    w = make_world(settings, token, tmp_path)
    apply_topics(w.settings, w.topics.specs())
    codec = ChangeCodec(registry_client(w.settings))
    producer = Producer({**w.settings.kafka.client_config(), "enable.idempotence": True})
    held = change("PHONE", 1, "held an hour", "INSERT")
    key, value = codec.encode(w.phone_topic, held)
    until_ms = int((time.time() + 3600) * 1000)
    headers = failure_headers(w.name, Origin(w.phone_topic, 0, 4), 1, "test", "failed", until_ms, str(held.position))
    producer.produce(w.topics.retry, key=key, value=value, headers=headers, partition=0)
    assert producer.flush(30) == 0
    with running(w) as rt:
        wait_for("the held change waiting", lambda: len(getattr(rt, "_waiting_room", ())) == 1, 60)
    env = {"MCQ_TOPIC_PREFIX": w.settings.topic_prefix}
    out = tmp_path / "flushed.jsonl"
    args = ["flush", w.name, "--registry", str(w.registry_file), "--out", str(out), "--yes"]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    assert "retry record(s) waiting for their due time" in result.output
    [line] = [json.loads(x) for x in out.read_text().splitlines()]
    assert (line["group"], line["key"], line["position"]) == ("waiting", held.key.text(), str(held.position)), line
    shown = CliRunner().invoke(cli, ["status", w.name, "--registry", str(w.registry_file), "--json"], env=env)
    [row] = json.loads(shown.stdout)
    assert row["waiting"] == 0 and row["pending"] == 0, row
    later = change("PHONE", 1, "the next change", "UPDATE")
    produce(w.settings, w.phone_topic, [later])
    with running(w) as rt:
        wait_for("the next change", lambda: target_state(w.settings, w.table).get(held.key.text()) is not None, 60)
        assert len(rt._waiting_room) == 0
    assert target_state(w.settings, w.table) == expected_state([later])
