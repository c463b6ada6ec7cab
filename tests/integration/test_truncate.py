"""A TRUNCATE of a captured table deletes every row at once and no change names their
keys. Debezium skips truncates unless told otherwise, which left every target holding
rows the source no longer has, silently. Captured by ``mcq connect apply``, a truncate
reaches the normaliser, which withholds it by name (``mcq status`` alerts) and lets the
rest flow; ``mcq refresh --from source`` then deletes at the target what the source no
longer holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from mcq.change import ChangeKey
from mcq.cli import main
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.logs import log_lines
from mcq.testing.worlds import wait_raw_records
from mcq.topics.plan import withheld_topic
from streams.runner import run_normalize
from tests.integration.typed import ROWS, sql, typed_listener
from tests.support.logical import decode_topic

pytestmark = pytest.mark.faults


def test_a_truncate_is_withheld_by_name_and_a_refresh_from_the_source_empties_the_target(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with typed_listener(settings, tmp_path, "tt") as t:
        world, tsettings, registry, registry_file, runtime = t.world, t.settings, t.registry, t.registry_file, t.runtime
        target = t.target
        sql(settings, f"TRUNCATE {world.table}", f"INSERT INTO {world.table} (id, note) VALUES (90, 'after')")
        wait_raw_records(settings, world.raw_topic, len(ROWS) + 2)
        with log_lines() as lines:
            run_normalize(tsettings, registry, once=True, checkpoint=t.checkpoint)
        assert any("WITHHELD 1" in line for line in lines), lines
        (_, withheld), *_ = decode_topic(tsettings, withheld_topic(tsettings.topic_prefix))
        assert withheld is not None and "a TRUNCATE of the table" in withheld["provenance"]["origin"]
        assert f"withheld: {world.raw_topic} partition 0 offset {len(ROWS)}: " in withheld["provenance"]["origin"]
        assert runtime.run(until_caught_up=True) == 0
        assert len(target_state(tsettings, target)) == len(ROWS) + 1  # the insert after it flowed

        env = {"MCQ_TOPIC_PREFIX": tsettings.topic_prefix, "MCQ_HOME": str(tsettings.stack.home)}
        runner = CliRunner()
        status = runner.invoke(main, ["status", "--registry", str(registry_file)], env=env)
        assert "the normaliser withheld 1 change(s)" in status.output
        refresh = runner.invoke(
            main, ["refresh", "Table", "--from", "source", "--registry", str(registry_file)], env=env
        )
        assert refresh.exit_code == 0, refresh.output
        assert f"TYPED: 1 state(s), {len(ROWS)} delete(s)" in refresh.output
        assert runtime.run(until_caught_up=True) == 0
        assert list(target_state(tsettings, target)) == [ChangeKey("TYPED", pkey_number=90).text()]
