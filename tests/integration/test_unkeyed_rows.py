"""A column mapped to a numeric key field (``person_id``, ``pkey_number``) is text in the
user's table, and some rows hold no whole number there (``'E103'``, ``'104.5'``, a number
beyond 64 bits). Spark's ANSI cast used to fail the whole batch on the first such row, so
the normaliser stopped for every listener. Now each change without a whole key is withheld
by name, the rest flows, a row corrected in the source arrives under its new key, a row
that leaves a whole key for a broken one is deleted at the target, and ``refresh --from
source`` leaves such rows out, saying how many and why. Captured for real from a fresh
table with default settings; the expected target is derived from the source by Python's
own ``int``, not by the code under test."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from consumers.runtime.listener import ListenerRuntime
from mcq.capture.apply import apply_capture
from mcq.capture.connector import raw_topic
from mcq.change import ChangeKey
from mcq.cli import main
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.logs import log_lines
from mcq.testing.worlds import uncapture, wait_raw_records, wait_slot_active
from mcq.topics.plan import withheld_topic
from streams.runner import run_normalize
from tests.integration.typed import sql
from tests.support.logical import decode_topic

REGISTRY = """
sources:
  - {{name: k{token}, schemas: [{schema}], publication: mcq_k{token}, slot: mcq_k{token}}}
tables:
  - tname: CARD
    feeds:
      - {{source: k{token}, table: {schema}.card, keys: {{person_id: badge}}, columns: [badge, holder]}}
listeners:
  - {{name: Cards, owner: tests@example, adapter: {{type: table, settings: {{table: {target}}}}}}}
interests:
  - {{listener: Cards, tname: CARD}}
"""

WORKLOAD = [
    "INSERT INTO {t} VALUES (1, '101', 'ann'), (2, ' 102', 'bob'), (3, 'E103', 'cy'), (4, '104.5', 'di'),"
    " (5, '99999999999999999999', 'ed'), (6, '106', 'fay')",
    "UPDATE {t} SET holder = 'ann2' WHERE id = 1",  # a whole key: delivered
    "UPDATE {t} SET badge = '105' WHERE id = 4",  # corrected in the source: arrives as 105
    "UPDATE {t} SET badge = 'X106' WHERE id = 6",  # a whole key broken: 106 deleted, the change withheld
    "DELETE FROM {t} WHERE id = 3",  # never delivered, so its delete cannot be: withheld
    "UPDATE {t} SET holder = 'ed2' WHERE id = 5",  # broken before and after: withheld
]
RAW_RECORDS = 6 + 5 + 1  # the inserts, the changes, the delete's raw tombstone
WITHHELD = 3 + 3  # the three broken inserts; the break, the delete, the update of a broken row


def whole_key(badge: str | None) -> int | None:
    """The oracle: a badge that Python reads as an integer within 64 bits."""
    try:
        number = int(badge or "")
    except ValueError:
        return None
    return number if -(2**63) <= number < 2**63 else None


@pytest.mark.timeout(900)
def test_rows_without_a_whole_numeric_key_are_withheld_by_name_and_the_rest_flows(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex[:8]
    schema, table, target = f"k_{token}", f"k_{token}.card", f"kt_{token}.card"
    tsettings = settings.model_copy(update={"topic_prefix": f"k{token}"})
    sql(settings, f"CREATE SCHEMA {schema}", f"CREATE TABLE {table} (id integer PRIMARY KEY, badge text, holder text)")
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(REGISTRY.format(token=token, schema=schema, target=target))
    registry = parse_registry(registry_file.read_text(), str(registry_file))
    apply_capture(registry, settings)
    try:
        wait_slot_active(settings, registry.sources[0].slot_name)
        sql(settings, *(statement.format(t=table) for statement in WORKLOAD))
        wait_raw_records(settings, raw_topic(registry.sources[0], table), RAW_RECORDS)

        with log_lines() as lines:
            run_normalize(tsettings, registry, once=True, checkpoint=tmp_path / "checkpoint")
        assert any(f"WITHHELD {WITHHELD}" in line for line in lines), lines
        reasons = [
            v["provenance"]["origin"] for _, v in decode_topic(tsettings, withheld_topic(tsettings.topic_prefix)) if v
        ]
        assert len(reasons) == WITHHELD, reasons
        named = [re.search(r"holds '([^']*)' in the (\w+)-image", reason) for reason in reasons]
        assert sorted(f"{m.group(2)} {m.group(1)}" for m in named if m) == sorted(
            ["after E103", "after 104.5", "after 99999999999999999999", "after X106", "before E103",
             "before 99999999999999999999"]
        ), reasons  # fmt: skip
        for reason in reasons:
            assert "column badge (person_id of CARD's key)" in reason and "repair:" in reason, reason

        runtime = ListenerRuntime(tsettings, "Cards", registry=registry, http_port=None)
        assert runtime.run(until_caught_up=True) == 0
        with psycopg.connect(settings.source.dsn()) as conn:
            source = conn.execute(f"SELECT badge, holder FROM {table}").fetchall()
        expected = {
            ChangeKey("CARD", person_id=number).text(): holder
            for badge, holder in source
            if (number := whole_key(badge)) is not None
        }
        assert len(expected) == 3  # 101, 102 and the corrected 105; the broken ones left out
        held: dict[str, Any] = target_state(tsettings, target)
        assert {key: state["holder"] for key, state in held.items()} == expected

        env = {"MCQ_TOPIC_PREFIX": tsettings.topic_prefix, "MCQ_HOME": str(tsettings.stack.home)}
        result = CliRunner().invoke(
            main, ["refresh", "Cards", "--registry", str(registry_file), "--from", "source", "--dry-run"], env=env
        )
        assert result.exit_code == 1, result.output  # rows left out: a script running refreshes notices
        assert f"CARD: {len(expected)} state(s), 0 delete(s)" in result.output, result.output
        assert f"LEFT OUT {len(source) - len(expected)} source row(s) with no whole key" in result.output
        assert "column badge (person_id of CARD's key) holds 'X106'" in result.output, result.output
    finally:
        uncapture(settings, registry, schema)
