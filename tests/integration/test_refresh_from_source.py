"""``mcq refresh --from source``: the state is read from the source database, not from the
topics. On a user's own table (a column of each type, captured by ``apply_capture``):
every row reaches the listener's bulk lane as the text PostgreSQL itself gives it (the
oracle renders each type in SQL, independently of the code under test), rows the topics
have not seen yet included; a key the target holds that the source lacks is deleted; a
drifted target ends equal to the source; other listeners' lanes and the logical topics
are untouched."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Producer

from consumers.runtime.applied import AppliedPositions
from consumers.runtime.listener import ListenerRuntime
from mcq.change import ChangeCodec, ChangeKey, Position
from mcq.cli import main
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.worlds import read_topic_to_end, wait_raw_records
from mcq.topics.listener import ListenerTopics
from streams.runner import run_normalize
from tests.integration.pgtext import rows_as_text
from tests.integration.typed import ROWS, TypedWorld, sql, typed_world
from tests.support.logical import decode_topic, last_state

LISTENERS = """
listeners:
  - {{name: Table, owner: tests@example, adapter: {{type: table, settings: {{table: {target}}}}}}}
  - {{name: Other, owner: tests@example, adapter: {{type: table, settings: {{table: {other}}}}}}}
interests:
  - {{listener: Table, tname: TYPED}}
  - {{listener: Other, tname: TYPED}}
"""


@pytest.fixture(scope="module")
def own_typed(stack: Stack, settings: Settings) -> Iterator[TypedWorld]:
    with typed_world(settings) as world:
        yield world


def _bulk(settings: Settings, topic: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(key text, change type, after) of every record of a listener's bulk topic."""
    codec = ChangeCodec(registry_client(settings))
    out: list[tuple[str, str, dict[str, Any] | None]] = []
    for key, value, partition, offset in read_topic_to_end(settings, topic):
        change = codec.decode(topic, partition, offset, key, value)
        assert change is not None
        out.append((change.key.text(), change.change_type, change.after))
    return out


def _source_rows(settings: Settings, table: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(settings.source.dsn()) as conn:
        return {ChangeKey("TYPED", pkey_number=int(r["id"])).text(): r for r in rows_as_text(conn, table)}


def _run(settings: Settings, registry: Any, name: str) -> ListenerRuntime:
    runtime = ListenerRuntime(settings, name, registry=registry, http_port=None)
    assert runtime.run(until_caught_up=True) == 0, name
    return runtime


# a scenario of a minute and more on two cores: in make long, so make test stays under 25 minutes
@pytest.mark.long
def test_a_refresh_from_the_source_sends_every_row_as_postgresql_renders_it_and_repairs_the_target(
    own_typed: TypedWorld, settings: Settings, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex[:8]
    tsettings = settings.model_copy(update={"topic_prefix": f"ts{token}"})
    target = f"ts_{token}.typed"
    text = own_typed.registry_yaml.replace(
        "listeners: []\n", LISTENERS.format(target=target, other=f"ts_{token}.other")
    )
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(text)
    registry = parse_registry(text, str(registry_file))
    wait_raw_records(settings, own_typed.raw_topic, len(ROWS))
    run_normalize(tsettings, registry, once=True, checkpoint=tmp_path / "checkpoint")
    _run(tsettings, registry, "Table")
    assert target_state(tsettings, target) == _source_rows(settings, own_typed.table)

    # the target drifts (a row lost, a row changed by hand, a stray key the listener
    # recorded as applied), and the source moves on where the topics have not followed yet
    lost = ChangeKey("TYPED", pkey_number=1).text()
    tampered = ChangeKey("TYPED", pkey_number=2).text()
    stray = ChangeKey("TYPED", pkey_number=999)
    with psycopg.connect(tsettings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {target} WHERE change_key = %s", (lost,))
        conn.execute(f'UPDATE {target} SET state = \'{{"note": "tampered"}}\' WHERE change_key = %s', (tampered,))
        conn.execute(
            f"INSERT INTO {target} (change_key, tname, pkey_number, state, last_commit_lsn, lsn)"
            " VALUES (%s, 'TYPED', 999, '{}', 5, 6)",
            (stray.text(),),
        )
    topics = ListenerTopics(tsettings.topic_prefix, "Table")
    positions = AppliedPositions(tsettings, topics.applied, Producer(tsettings.kafka.client_config()))
    positions.catch_up()
    positions.record(stray, Position(5, 6))
    positions.close(save=False)
    sql(
        settings,
        f"INSERT INTO {own_typed.table} (id, born, tags, note) VALUES (70, '2030-01-02', ARRAY['n'], 'not normalised')",
        f"UPDATE {own_typed.table} SET note = 'changed at the source', amount = 0.01 WHERE id = 4",
    )
    logical = registry.tables[0].topic(tsettings.topic_prefix)
    logical_before = len(read_topic_to_end(tsettings, logical))
    expected = _source_rows(settings, own_typed.table)
    assert expected[ChangeKey("TYPED", pkey_number=70).text()]["born"] == "2030-01-02"  # the oracle, checked

    env = {"MCQ_TOPIC_PREFIX": tsettings.topic_prefix, "MCQ_HOME": str(tsettings.stack.home)}

    def refresh(*args: str) -> Result:
        return CliRunner().invoke(main, ["refresh", "Table", "--registry", str(registry_file), *args], env=env)

    dry = refresh("--from", "source", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"TYPED: {len(expected)} state(s), 1 delete(s)" in dry.output
    assert _bulk(tsettings, topics.bulk) == []

    result = refresh("--from", "source")
    assert result.exit_code == 0, result.output
    sent = _bulk(tsettings, topics.bulk)
    states = {k: a for k, t, a in sent if t != "DELETE"}
    assert states == expected  # every column, as PostgreSQL gives it
    # and as the other path gives it: Debezium, its transform and the normaliser, for each row
    # the topic holds unchanged since (an independent check of the SQL rendering)
    topic_states = {ChangeKey("TYPED", pkey_number=k[4]).text(): v["after"] for k, v in last_state(
        decode_topic(tsettings, logical)).items()}  # fmt: skip
    unchanged = set(topic_states) - {ChangeKey("TYPED", pkey_number=n).text() for n in (4, 70)}
    assert len(unchanged) == len(ROWS) - 1
    assert {k: states[k] for k in unchanged} == {k: topic_states[k] for k in unchanged}
    assert [k for k, t, _ in sent if t == "DELETE"] == [stray.text()]
    assert len(read_topic_to_end(tsettings, logical)) == logical_before  # nothing else written
    assert _bulk(tsettings, ListenerTopics(tsettings.topic_prefix, "Other").bulk) == []

    run = _run(tsettings, registry, "Table")
    assert run.counters.bulk_applied == len(expected) + 1
    assert target_state(tsettings, target) == expected

    # the changes the refresh already carried arrive later through the pipeline: the
    # target stays equal to the source
    wait_raw_records(settings, own_typed.raw_topic, len(ROWS) + 2)
    run_normalize(tsettings, registry, once=True, checkpoint=tmp_path / "checkpoint")
    _run(tsettings, registry, "Table")
    assert target_state(tsettings, target) == expected

    # the target drifts again: a repair from the topics (reconcile --repair) reaches keys
    # whose applied positions are the read's, newer than any change the topics hold of them
    with psycopg.connect(tsettings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {target} WHERE change_key = %s", (lost,))
        conn.execute(f'UPDATE {target} SET state = \'{{"note": "tampered again"}}\' WHERE change_key = %s', (tampered,))

    def reconcile(*args: str) -> Result:
        return CliRunner().invoke(main, ["reconcile", "Table", "--registry", str(registry_file), *args], env=env)

    repaired = reconcile("--repair")
    assert repaired.exit_code == 0 and "1 missing, 0 extra, 1 different" in repaired.output, repaired.output
    assert _run(tsettings, registry, "Table").counters.bulk_applied == 2
    assert target_state(tsettings, target) == expected
    again = reconcile()
    assert again.exit_code == 0 and "0 missing, 0 extra, 0 different" in again.output, again.output


def test_a_refresh_from_the_source_of_a_table_without_a_source_is_one_line_and_sends_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    text = """
tables:
  - {tname: NOTES, comment: logged explicitly only}
listeners:
  - {name: Notes, owner: tests@example, adapter: {type: file, settings: {format: jsonl, directory: /tmp/x}}}
interests:
  - {listener: Notes, tname: NOTES}
"""
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(text)
    result = CliRunner().invoke(main, ["refresh", "Notes", "--registry", str(registry_file), "--from", "source"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [
        "mcq refresh: Notes: NOTES: no source table feeds it (its changes are only logged explicitly); "
        "refresh it --from topics"
    ]
