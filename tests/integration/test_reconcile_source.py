"""``mcq reconcile --from source`` and ``--capture``: a change the capture lost is in neither
the logical topics nor the target, so a reconcile against the topics says "in sync"; read
against the source, the loss is found, named as a capture gap, and repaired.

The gap is made as one happens: the table leaves its publication for a moment (an
operator's mistake, a migration script) while a row is deleted and another updated, so
logical decoding never sees them; captured changes before and after flow as usual."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner, Result

from consumers.runtime.listener import ListenerRuntime
from mcq.change import ChangeKey
from mcq.cli import main
from mcq.config import Settings
from mcq.registry import Registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.worlds import wait_raw_records
from streams.runner import run_normalize
from tests.integration.pgtext import rows_as_text
from tests.integration.typed import ROWS, sql, typed_listener


def _source_rows(settings: Settings, table: str) -> dict[str, dict[str, Any]]:
    """The oracle: the source table as PostgreSQL renders it, keyed as the target is."""
    with psycopg.connect(settings.source.dsn()) as conn:
        return {ChangeKey("TYPED", pkey_number=int(r["id"])).text(): r for r in rows_as_text(conn, table)}


def _listen(settings: Settings, registry: Registry) -> ListenerRuntime:
    runtime = ListenerRuntime(settings, "Table", registry=registry, http_port=None)
    assert runtime.run(until_caught_up=True) == 0
    return runtime


def test_a_capture_gap_is_found_against_the_source_named_upstream_and_repaired(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with typed_listener(settings, tmp_path, "rs") as listening:
        world, own, target, registry = listening.world, listening.settings, listening.target, listening.registry
        registry_file, checkpoint = listening.registry_file, listening.checkpoint
        assert target_state(own, target) == _source_rows(settings, world.table)

        publication = registry.sources[0].publication_name
        sql(
            settings,
            f"ALTER PUBLICATION {publication} DROP TABLE {world.table}",
            f"DELETE FROM {world.table} WHERE id = 3",
            f"UPDATE {world.table} SET note = 'changed while not published' WHERE id = 2",
            f"ALTER PUBLICATION {publication} ADD TABLE {world.table}",
            f"UPDATE {world.table} SET note = 'captured again' WHERE id = 1",
        )
        wait_raw_records(settings, world.raw_topic, len(ROWS) + 1)
        run_normalize(own, registry, once=True, checkpoint=checkpoint)
        _listen(own, registry)
        source = _source_rows(settings, world.table)
        held = target_state(own, target)
        assert (
            held != source
            and held[ChangeKey("TYPED", pkey_number=1).text()] == source[ChangeKey("TYPED", pkey_number=1).text()]
        )  # the pipeline flows; two changes never reached it

        env = {"MCQ_TOPIC_PREFIX": own.topic_prefix, "MCQ_HOME": str(own.stack.home)}

        def mcq(*args: str) -> Result:
            return CliRunner().invoke(main, [*args, "--registry", str(registry_file)], env=env)

        from_topics = mcq("reconcile", "Table")
        assert from_topics.exit_code == 0, from_topics.output
        assert "0 missing, 0 extra, 0 different" in from_topics.output  # the topics hold the loss too

        gap = mcq("reconcile", "--capture")
        assert gap.exit_code == 1, gap.output
        assert "0 missing, 1 extra, 1 different" in gap.output, gap.output
        assert "a capture gap, upstream of every listener" in gap.output and "Table" in gap.output
        assert f"extra: {ChangeKey('TYPED', pkey_number=3).text()}" in gap.output

        found = mcq("reconcile", "Table", "--from", "source")
        assert found.exit_code == 1 and "0 missing, 1 extra, 1 different" in found.output, found.output

        repaired = mcq("reconcile", "Table", "--from", "source", "--repair")
        assert repaired.exit_code == 0, repaired.output
        assert _listen(own, registry).counters.bulk_applied == 2
        assert target_state(own, target) == source
        again = mcq("reconcile", "Table", "--from", "source")
        assert again.exit_code == 0 and "0 missing, 0 extra, 0 different" in again.output, again.output


def test_a_listener_of_entities_cannot_be_compared_with_the_source_and_is_told_what_can(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    from tests import PROJECT_ROOT

    campus = PROJECT_ROOT / "examples" / "campus.yaml"
    result = CliRunner().invoke(main, ["reconcile", "LDAP", "--from", "source", "--registry", str(campus)])
    assert result.exit_code == 2, result.output
    assert "PERSON_ENTRY" in result.output and "mcq reconcile --capture" in result.output
