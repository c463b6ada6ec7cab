"""A replication slot invalidated by ``max_slot_wal_keep_size`` (issue 16, scenario 6): its
connector paused while the cluster writes more WAL than the limit, then a checkpoint.
The changes in the gap are gone for good, so mcq must not let it pass as a working
pipeline: ``mcq connect status`` and ``mcq status`` exit 1 with one line naming the slot
and the runbook (a new slot and snapshot, then a refresh from the source) -- also once
the connector is resumed, when Debezium (3.x) shows its task RUNNING while it waits up
to 30 minutes for the slot to become valid ("Cannot obtain valid replication slot ...
attempt N out of 900") before it fails.

The limit is a cluster-wide setting: it is set for this test only, and reset after it."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from mcq.capture.connector import connector_name
from mcq.capture.slots import slot_states
from mcq.cli import main
from mcq.config import Settings
from mcq.connect_rest import ConnectClient
from mcq.stack import Stack
from mcq.testing.listeners import wait_for
from tests.integration.typed import typed_world

pytestmark = pytest.mark.faults

LIMIT_MB = 48


def _wal_status(settings: Settings, slot: str) -> str | None:
    with psycopg.connect(settings.source.dsn()) as conn:
        row = conn.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    return None if row is None else row[0]


def _set_limit(settings: Settings, value: str | None) -> None:
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        if value is None:
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
        else:
            conn.execute(f"ALTER SYSTEM SET max_slot_wal_keep_size = '{value}'")
        conn.execute("SELECT pg_reload_conf()")


@pytest.mark.timeout(400)
def test_a_slot_that_lost_its_wal_is_reported_with_the_runbook_and_its_connector_fails_instead_of_looping(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with typed_world(settings) as world:
        source = world.registry.sources[0]
        slot, name = source.slot_name, connector_name(source)
        registry_file = tmp_path / "registry.yaml"
        registry_file.write_text(world.registry_yaml)
        with ConnectClient(settings.connect) as client:
            client.pause(name)
            try:
                _set_limit(settings, f"{LIMIT_MB}MB")
                with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
                    for _ in range(LIMIT_MB * 2):  # WAL past the limit, while the slot's connector is paused
                        conn.execute("SELECT pg_logical_emit_message(false, 'mcq-test', repeat('x', 1048576))")
                    conn.execute("SELECT pg_switch_wal()")
                    conn.execute("CHECKPOINT")  # the slot is invalidated when its segments are removed
                assert _wal_status(settings, slot) == "lost"
            finally:
                _set_limit(settings, None)
            client.resume(name)
            wait_for(
                "the task to run again",
                lambda: [t.get("state") for t in (client.status(name) or {}).get("tasks", [])] == ["RUNNING"],
                60,
            )
            time.sleep(5)  # (Debezium now waits for a valid slot)
            for args in (["connect", "status"], ["status"]):
                result = CliRunner().invoke(main, [*args, "--registry", str(registry_file)])
                assert result.exit_code == 1, (args, result.output, result.stderr)
                [line] = [x for x in result.stderr.splitlines() if slot in x]
                assert f"replication slot {slot} lost WAL it still needed" in line, line
                assert "mcq connect remove" in line and "mcq connect apply" in line and "--from source" in line


@pytest.mark.timeout(400)
def test_a_slot_made_again_while_connect_was_down_is_reported_as_a_gap_with_the_runbook(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    """Scenario 5: the slot dropped while Connect is down, changes committed, the slot made
    again, Connect started: Debezium streams from the new slot as if nothing happened, so
    mcq must say that the changes in between were never captured."""
    with typed_world(settings) as world:
        source = world.registry.sources[0]
        slot = source.slot_name
        registry_file = tmp_path / "registry.yaml"
        registry_file.write_text(world.registry_yaml)
        with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
            conn.execute(f"UPDATE {world.table} SET note = 'before the gap'")
        wait_for(
            "the connector to have captured past the update",
            lambda: (lambda st: bool(st) and st[0].restart_lsn is not None and st[0].captured_lsn is not None)(
                slot_states(settings, world.registry)
            ),
            60,
        )
        healthy = CliRunner().invoke(main, ["connect", "status", "--registry", str(registry_file)])
        assert healthy.exit_code == 0, (healthy.output, healthy.stderr)
        connect = stack.service("connect")
        connect.handle.stop(signal.SIGTERM)
        try:
            with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
                wait_for("the slot to be free", lambda: _active(conn, slot) is False, 60)
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                conn.execute(f"UPDATE {world.table} SET note = 'in the gap'")  # never captured
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        finally:
            stack.up()
        # Debezium either streams from the new slot as if nothing happened or, when the offset it
        # stored lies before the new slot's restart_lsn, refuses ("no longer available on the
        # server"); both happen, by timing. Either way mcq must name the gap and the runbook.
        seen: list[str | None] = [None]
        with ConnectClient(settings.connect) as client:

            def settled() -> bool:
                seen[0] = _settled(client.status(connector_name(source)))
                return seen[0] is not None

            wait_for("the connector to stream again or refuse the new slot", settled, 120)
            for args in (["connect", "status"], ["status"]):
                command = [*args, "--registry", str(registry_file)]
                state, result = _run_while_steady(client, connector_name(source), command)
                # `connect status` exits 3 whenever it saw the connector not RUNNING (a failed
                # connector); the slot's gap alone is exit 1. Both name the gap.
                expected = 3 if args[0] == "connect" and state != "RUNNING" else 1
                assert result.exit_code == expected, (args, state, result.output, result.stderr)
                if args[0] == "connect" and state == "FAILED":
                    assert "no longer available" in result.output, result.output
                [line] = [x for x in result.stderr.splitlines() if slot in x]
                assert "where its connector last captured" in line and "never captured" in line, line
                assert "mcq connect remove" in line and "--from source" in line


def _run_while_steady(client: ConnectClient, name: str, args: list[str]) -> tuple[str | None, Result]:
    """Run the command while the connector's state holds: the state read just before and just after
    the command agree, so the command saw that state (Debezium may refuse the new slot a few
    seconds after it first reported RUNNING)."""
    for _ in range(10):
        before = _settled(client.status(name))
        result = CliRunner().invoke(main, args)
        if _settled(client.status(name)) == before:
            return before, result
        time.sleep(2)
    raise AssertionError(f"the connector {name} did not hold one state across `mcq {' '.join(args)}`")


def _settled(status: dict[str, Any] | None) -> str | None:
    """RUNNING when the connector and its tasks stream, FAILED when a task refused; else None."""
    if not status:
        return None
    tasks = status.get("tasks", [])
    states = {status["connector"]["state"], *(t.get("state") for t in tasks)}
    if "FAILED" in states:
        return "FAILED"
    return "RUNNING" if tasks and states == {"RUNNING"} else None


def _active(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> bool | None:
    row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    return None if row is None else bool(row[0])
