"""A large value PostgreSQL stores out of line (TOAST) is not in the WAL of an update that
leaves it unchanged; Debezium then writes a placeholder instead of it. On a user's own
table captured with default settings (``apply_capture``), an update of another column
must reach the logical topic and a ``table`` target with the real value, never the
placeholder: the target keeps what the source holds."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from consumers.runtime.listener import ListenerRuntime
from mcq.capture.apply import apply_capture
from mcq.capture.connector import raw_topic
from mcq.change import ChangeKey
from mcq.cli import main
from mcq.config import Settings
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.logs import log_lines
from mcq.testing.worlds import uncapture, wait_raw_records, wait_slot_active
from mcq.topics.plan import withheld_topic
from streams.runner import run_normalize
from tests.integration.pgtext import rows_as_text
from tests.support.logical import decode_topic, last_state

pytestmark = pytest.mark.faults

REGISTRY = """
sources:
  - {{name: g{token}, schemas: [g_{token}], publication: mcq_g{token}, slot: mcq_g{token}}}
tables:
  - tname: DOCS
    feeds:
      - {{source: g{token}, table: g_{token}.docs, keys: {{pkey_number: id}}, columns: [id, body, tags, status]}}
listeners:
  - {{name: Docs, owner: tests@example, adapter: {{type: table, settings: {{table: g_{token}_t.docs}}}}}}
interests:
  - {{listener: Docs, tname: DOCS}}
"""


def _big() -> str:
    """Text PostgreSQL cannot compress below its TOAST threshold (~2 KB): stored out of line."""
    return secrets.token_hex(8_000)


@pytest.fixture()
def docs(stack: Stack, settings: Settings) -> Iterator[tuple[Registry, str]]:
    token = uuid.uuid4().hex[:8]
    schema = f"g_{token}"
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.docs (id integer PRIMARY KEY, body text, tags text[], status text)")
        for i in range(1, 4):
            conn.execute(f"INSERT INTO {schema}.docs VALUES (%s, %s, %s, 'new')", (i, _big(), [_big(), "short"]))
    registry = parse_registry(REGISTRY.format(token=token), "docs-test.yaml")
    apply_capture(registry, settings)
    wait_slot_active(settings, registry.sources[0].slot_name)
    try:
        yield registry, schema
    finally:
        uncapture(settings, registry, schema)


def test_an_update_that_leaves_a_large_value_unchanged_delivers_the_value_not_a_placeholder(
    docs: tuple[Registry, str], settings: Settings, tmp_path: Path
) -> None:
    registry, schema = docs
    tsettings = settings.model_copy(update={"topic_prefix": f"tg{uuid.uuid4().hex[:8]}"})
    table = f"{schema}.docs"
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        conn.execute(f"UPDATE {table} SET status = 'reviewed' WHERE id IN (1, 2)")  # body and tags untouched
        conn.execute(f"UPDATE {table} SET status = 'again' WHERE id = 1")
        conn.execute(f"UPDATE {table} SET body = 'now short', status = 'cut' WHERE id = 3")
        expected_rows = {int(r["id"]): r for r in rows_as_text(conn, table)}
    assert len(expected_rows[1]["body"]) == 16_000 and expected_rows[3]["body"] == "now short"  # the oracle, checked
    wait_raw_records(settings, raw_topic(registry.sources[0], table), 3 + 4)

    run_normalize(tsettings, registry, once=True, checkpoint=tmp_path / "checkpoint")
    state = last_state(decode_topic(tsettings, registry.tables[0].topic(tsettings.topic_prefix)))
    assert {key[4]: value["after"] for key, value in state.items()} == expected_rows

    runtime = ListenerRuntime(tsettings, "Docs", registry=registry, http_port=None)
    assert runtime.run(until_caught_up=True) == 0
    expected = {ChangeKey("DOCS", pkey_number=pk).text(): row for pk, row in expected_rows.items()}
    assert target_state(tsettings, f"{schema}_t.docs") == expected


def test_a_change_whose_large_value_debezium_left_out_is_withheld_and_a_refresh_from_the_source_repairs(
    docs: tuple[Registry, str], settings: Settings, tmp_path: Path
) -> None:
    """REPLICA IDENTITY set back to DEFAULT after capture started: the unchanged large
    values are not in the WAL and Debezium sends its placeholder. That change must not
    reach a target (it would overwrite the real value): it is written to the withheld
    topic with its raw record's coordinates and the repair, the rest flows, and
    ``mcq refresh --from source`` brings the target to the source's state."""
    registry, schema = docs
    tsettings = settings.model_copy(update={"topic_prefix": f"tg{uuid.uuid4().hex[:8]}"})
    table = f"{schema}.docs"
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY DEFAULT")
        conn.execute(f"UPDATE {table} SET status = 'reviewed' WHERE id = 1")  # body and tags left out of the WAL
        conn.execute(f"UPDATE {table} SET body = 'short', tags = ARRAY['x'], status = 'cut' WHERE id = 2")
        expected_rows = {int(r["id"]): r for r in rows_as_text(conn, table)}
    wait_raw_records(settings, raw_topic(registry.sources[0], table), 3 + 2)

    with log_lines() as lines:
        run_normalize(tsettings, registry, once=True, checkpoint=tmp_path / "checkpoint")
    assert any("WITHHELD 1" in line for line in lines), lines
    state = last_state(decode_topic(tsettings, registry.tables[0].topic(tsettings.topic_prefix)))
    after = {key[4]: value["after"] for key, value in state.items()}
    assert after[2] == expected_rows[2] and after[3] == expected_rows[3]  # the rest flows
    assert after[1]["status"] == "new" and after[1]["body"] == expected_rows[1]["body"]  # never the placeholder
    withheld = decode_topic(tsettings, withheld_topic(tsettings.topic_prefix))
    assert len(withheld) == 1
    key, value = withheld[0]
    assert key["pkey_number"] == 1 and value is not None
    reason = value["provenance"]["origin"]
    assert reason.startswith(f"withheld: {raw_topic(registry.sources[0], table)} partition 0 offset ")
    assert "column(s) body, tags" in reason and "REPLICA IDENTITY" in reason, reason

    runtime = ListenerRuntime(tsettings, "Docs", registry=registry, http_port=None)
    assert runtime.run(until_caught_up=True) == 0
    target = f"{schema}_t.docs"
    held = target_state(tsettings, target)
    assert held[ChangeKey("DOCS", pkey_number=1).text()]["body"] == expected_rows[1]["body"]

    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(REGISTRY.format(token=schema.removeprefix("g_")))
    env = {"MCQ_TOPIC_PREFIX": tsettings.topic_prefix, "MCQ_HOME": str(tsettings.stack.home)}
    result = CliRunner().invoke(
        main, ["refresh", "Docs", "--from", "source", "--registry", str(registry_file)], env=env
    )
    assert result.exit_code == 0, result.output
    assert runtime.run(until_caught_up=True) == 0
    expected = {ChangeKey("DOCS", pkey_number=pk).text(): row for pk, row in expected_rows.items()}
    assert target_state(tsettings, target) == expected

    # the operator is told until the withheld change is acknowledged
    def mcq(*args: str) -> str:
        return CliRunner().invoke(main, list(args), env=env).output

    alert = f"the normaliser withheld 1 change(s) in {withheld_topic(tsettings.topic_prefix)}"
    assert alert in mcq("status", "--registry", str(registry_file))
    listed = mcq("withheld", "list").splitlines()
    assert listed[0].startswith("0:0  ") and listed[0].endswith(ChangeKey("DOCS", pkey_number=1).text()), listed
    assert listed[1].strip() == reason
    assert "withheld: 1 change(s) acknowledged" in mcq("withheld", "ack")
    assert "withheld" not in mcq("status", "--registry", str(registry_file))
    assert "no withheld changes to acknowledge" in mcq("withheld", "list")
