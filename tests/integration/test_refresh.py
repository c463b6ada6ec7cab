"""``mcq refresh``: a Spark job sends the current state of selected keys (from the
compacted logical topics) into one listener's bulk lane; the listener applies them, even
the states it applied before, so a target that lost rows or drifted is repaired, and a
key the target holds without state in the topics is deleted. Nothing else is written.
Bad input is one line naming what and where, and sends nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner, Result
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers.runtime.applied import AppliedPositions
from mcq.change import ChangeCodec, ChangeKey, Position
from mcq.cli import main
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.stack import Stack
from mcq.testing.listeners import (
    World,
    caught_up,
    change,
    expected_state,
    make_world,
    mcq,
    produce,
    target_state,
)
from mcq.testing.worlds import read_topic_to_end
from mcq.topics.read import all_watermarks


def _refresh(w: World, *args: str) -> Result:
    return mcq(w, "refresh", *args)


def _bulk(w: World) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(key text, change type, after) of every record in the listener's bulk topic."""
    codec = ChangeCodec(registry_client(w.settings))
    out: list[tuple[str, str, dict[str, Any] | None]] = []
    for key, value, partition, offset in read_topic_to_end(w.settings, w.topics.bulk):
        c = codec.decode(w.topics.bulk, partition, offset, key, value)
        assert c is not None
        out.append((c.key.text(), c.change_type, c.after))
    return out


def _ends(settings: Settings, topics: list[str]) -> dict[Any, int]:
    admin = AdminClient(settings.kafka.client_config())
    meta = admin.list_topics(timeout=10).topics
    tps = [TopicPartition(t, p) for t in topics if t in meta for p in meta[t].partitions]
    return {tp: high for tp, (_, high) in all_watermarks(admin, tps).items()}


def test_a_whole_table_refresh_repairs_lost_and_drifted_rows_and_deletes_rows_without_state(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    history = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(30)]
    history += [change("PHONE", pid, f"+1-519-{pid:07d}") for pid in range(0, 30, 3)]
    history += [change("PHONE", pid, None, "DELETE") for pid in (4, 5)]
    produce(w.settings, w.phone_topic, history)
    caught_up(w)
    expected = expected_state(history)
    assert target_state(w.settings, w.table) == expected

    # the target drifts: rows lost, a row changed by hand, and a row the listener applied
    # whose delete it never saw (the topic no longer holds anything of that key)
    lost = [change("PHONE", pid, None).key.text() for pid in (1, 2, 3)]
    changed = change("PHONE", 6, None).key.text()
    stray = ChangeKey("PHONE", None, 999, None, None, "office")
    with psycopg.connect(w.settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {w.table} WHERE change_key = ANY(%s)", (lost,))
        conn.execute(f'UPDATE {w.table} SET state = \'{{"phone": "tampered"}}\' WHERE change_key = %s', (changed,))
        conn.execute(
            f"INSERT INTO {w.table} (change_key, tname, person_id, aux_string, state, last_commit_lsn, lsn)"
            " VALUES (%s, 'PHONE', 999, 'office', '{}', 5, 6)",
            (stray.text(),),
        )
    positions = AppliedPositions(w.settings, w.topics.applied, Producer(w.settings.kafka.client_config()))
    positions.catch_up()
    positions.record(stray, Position(5, 6))
    positions.close(save=False)
    assert caught_up(w).counters.applied == 0  # nothing new: the drift stays
    assert target_state(w.settings, w.table) != expected

    logical_before = _ends(w.settings, [w.phone_topic, w.topics.refresh])
    dry = _refresh(w, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "PHONE: 28 state(s), 1 delete(s)" in dry.output
    assert _bulk(w) == []

    result = _refresh(w)
    assert result.exit_code == 0, result.output
    assert "29 record(s) sent" in result.output
    sent = _bulk(w)
    assert sorted(k for k, t, _ in sent if t == "DELETE") == [stray.text()]
    assert {k: a for k, t, a in sent if t != "DELETE"} == expected  # full current records
    assert _ends(w.settings, [w.phone_topic, w.topics.refresh]) == logical_before  # nothing else written

    run = caught_up(w)
    assert run.counters.bulk_applied == 29
    assert target_state(w.settings, w.table) == expected


def test_a_refresh_by_key_list_sends_only_those_keys_and_a_named_key_without_state_as_a_delete(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    history = [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT") for pid in range(20)]
    history += [change("PHONE", pid, f"+1-518-{pid:07d}", "INSERT", tele="home") for pid in range(5)]
    history += [change("PHONE", 7, None, "DELETE")]
    produce(w.settings, w.phone_topic, history)
    caught_up(w)
    expected = expected_state(history)

    keys = tmp_path / "people.csv"
    # person 3 partially (both phones), person 7 (deleted) and 50 (never existed) named whole
    keys.write_text("person_id,aux_string\n3,\n7,office\n50,office\n")
    result = _refresh(w, "--keys", str(keys))
    assert result.exit_code == 0, result.output
    sent = _bulk(w)
    states = {k: a for k, t, a in sent if t != "DELETE"}
    assert states == {k: v for k, v in expected.items() if json.loads(k)["person_id"] == 3}
    assert len(states) == 2
    assert sorted(json.loads(k)["person_id"] for k, t, _ in sent if t == "DELETE") == [7, 50]

    run = caught_up(w)
    assert run.counters.bulk_applied == 4
    assert target_state(w.settings, w.table) == expected


def test_a_refresh_with_a_rule_sends_only_the_states_that_pass_it(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    history = [change("PHONE", pid, f"+1-{518 + pid % 2}-{pid:07d}", "INSERT") for pid in range(20)]
    produce(w.settings, w.phone_topic, history)
    result = _refresh(w, "--tname", "PHONE", "--where", "phone LIKE '+1-519-%' AND person_id < 10")
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(k)["person_id"] for k, _, _ in _bulk(w)) == [1, 3, 5, 7, 9]


def test_bad_input_is_one_line_naming_what_and_where_and_sends_nothing(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    produce(w.settings, w.phone_topic, [change("PHONE", 1, "+1-518-0000001", "INSERT")])
    bad_line = tmp_path / "keys.csv"
    bad_line.write_text("person_id,aux_string\n1,office\nnot-a-number,office\n")
    bad_json = tmp_path / "keys.jsonl"
    bad_json.write_text('{"person_id": 1}\n{"person_id": 2, "colour": "red"}\n')
    cases = {
        ("refresh", "NOPE"): "no listener named NOPE in the registry (known: T)",
        ("--where", "phone = "): "--where: rule does not parse at column",
        ("--keys", str(bad_line)): f"{bad_line}:3: person_id 'not-a-number' is not an integer",
        ("--keys", str(bad_json)): f"{bad_json}:2: unknown field 'colour'",
        ("--tname", "ROOM"): "ROOM is not among the listener's tables (PHONE)",
    }
    env = {"MCQ_TOPIC_PREFIX": w.settings.topic_prefix, "MCQ_HOME": str(w.settings.stack.home)}
    for args, message in cases.items():
        if args[0] == "refresh":
            result = CliRunner().invoke(main, [*args, "--registry", str(w.registry_file)], env=env)
        else:
            result = _refresh(w, *args)
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], (args, result.output)
    assert _bulk(w) == []
