"""A captured column renamed (or dropped) in the source vanishes from every change
Debezium sends: delivered like that, each change would remove the column's value at every
target, silently. The normaliser withholds such a change by name instead (``mcq status``
alerts), the targets keep what they had, and a change of a table whose rows are whole
still flows."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mcq.change import ChangeKey
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.logs import log_lines
from mcq.testing.worlds import wait_raw_records
from mcq.topics.plan import withheld_topic
from streams.runner import run_normalize
from tests.integration.typed import ROWS, sql, typed_listener
from tests.support.logical import decode_topic

ONE = ChangeKey("TYPED", None, None, None, 1, None).text()  # the row with id 1 (note 'plain', n 42)


@pytest.mark.timeout(900)
def test_a_change_lacking_a_captured_column_is_withheld_and_the_target_keeps_its_value(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with typed_listener(settings, tmp_path, "tc") as t:
        world, tsettings, target, registry, checkpoint, runtime = (
            t.world,
            t.settings,
            t.target,
            t.registry,
            t.checkpoint,
            t.runtime,
        )
        assert target_state(tsettings, target)[ONE]["note"] == "plain"

        sql(
            settings,
            f"ALTER TABLE {world.table} RENAME COLUMN note TO remark",
            f"UPDATE {world.table} SET n = 43 WHERE id = 1",
        )
        wait_raw_records(settings, world.raw_topic, len(ROWS) + 1)
        with log_lines() as lines:
            run_normalize(tsettings, registry, once=True, checkpoint=checkpoint)
        assert any("WITHHELD 1" in line for line in lines), lines
        (_, withheld), *_ = decode_topic(tsettings, withheld_topic(tsettings.topic_prefix))
        assert withheld is not None
        reason = withheld["provenance"]["origin"]
        assert f"withheld: {world.raw_topic} partition 0 offset {len(ROWS)}: " in reason
        assert "the row has no column(s) note that TYPED's feed" in reason, reason
        # the same raw rows under a table definition stored after they were committed (a column
        # added to the feed since): they are from before it was captured, and flow as they did
        later = settings.model_copy(update={"topic_prefix": f"tl{tsettings.topic_prefix}"})
        with log_lines() as lines:
            run_normalize(
                later, registry, once=True, checkpoint=tmp_path / "later",
                defined_at=lambda _: {"TYPED": int(time.time() * 1000) + 3_600_000},
            )  # fmt: skip
        assert not any("WITHHELD" in line for line in lines), lines
        assert runtime.run(until_caught_up=True) == 0
        kept = target_state(tsettings, target)[ONE]
        assert kept["note"] == "plain" and kept["n"] == "42", kept  # not the change without its note

        sql(settings, f"ALTER TABLE {world.table} RENAME COLUMN remark TO note", f"UPDATE {world.table} SET n = 44")
        wait_raw_records(settings, world.raw_topic, len(ROWS) + 1 + len(ROWS))
        with log_lines() as lines:
            run_normalize(tsettings, registry, once=True, checkpoint=checkpoint)
        assert not any("WITHHELD" in line for line in lines), lines
        assert runtime.run(until_caught_up=True) == 0
        state = target_state(tsettings, target)
        assert {row["n"] for row in state.values()} == {"44"} and state[ONE]["note"] == "plain"
