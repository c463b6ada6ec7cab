"""A replication slot holds the WAL from its confirmed position on. When the captured
tables are idle while another database of the same cluster writes, no change reaches
Debezium, its slot's position stays where it was and the WAL the cluster writes piles up
on the source's disk. The connectors ``mcq connect apply`` makes write a heartbeat into
the captured database (``heartbeat.action.query``): the slot moves on although every
captured table is idle."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from mcq.capture.connector import connector_name
from mcq.cli import main
from mcq.config import Settings
from mcq.connect_rest import ConnectClient
from mcq.stack import Stack
from mcq.testing.worlds import wait_raw_records
from tests.integration.typed import ROWS, typed_world

# minutes of waiting for WAL to pile up: CI runs them when its time budget allows (make extended)
pytestmark = [pytest.mark.faults, pytest.mark.extended(minutes=4)]


def _confirmed(settings: Settings, slot: str) -> int:
    with psycopg.connect(settings.source.dsn()) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    assert row is not None, slot
    return int(row[0])


def test_idle_captured_tables_do_not_hold_the_wal_another_database_writes(stack: Stack, settings: Settings) -> None:
    with typed_world(settings) as world:
        slot = world.registry.sources[0].slot_name
        wait_raw_records(settings, world.raw_topic, len(ROWS))
        table = f"hb_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:  # another database, same cluster
            conn.execute(f"CREATE TABLE {table} (id int, note text)")
            conn.execute(f"INSERT INTO {table} SELECT i, repeat('x', 200) FROM generate_series(1, 20000) AS i")
            written = int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])  # type: ignore[index]
            try:
                deadline = time.monotonic() + 90  # heartbeats every 10 s
                while _confirmed(settings, slot) < written:
                    assert time.monotonic() < deadline, (
                        f"slot {slot} still at {_confirmed(settings, slot)}, the cluster wrote up to {written}"
                    )
                    time.sleep(2)
            finally:
                conn.execute(f"DROP TABLE {table}")


def test_a_slot_whose_connector_is_down_is_reported_with_the_wal_it_holds_until_the_connector_is_back(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with typed_world(settings) as world:
        source = world.registry.sources[0]
        wait_raw_records(settings, world.raw_topic, len(ROWS))
        registry_file = tmp_path / "registry.yaml"
        registry_file.write_text(world.registry_yaml)
        env = {"MCQ_CONNECT__SLOT_RETAINED_WARN_MB": "2"}
        runner = CliRunner()
        table = f"hb_{uuid.uuid4().hex[:8]}"
        with ConnectClient(settings.connect) as client, psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
            client.stop(connector_name(source))
            try:
                conn.execute(f"CREATE TABLE {table} (id int, note text)")
                conn.execute(f"INSERT INTO {table} SELECT i, repeat('x', 200) FROM generate_series(1, 40000) AS i")
                status = runner.invoke(main, ["connect", "status", "--registry", str(registry_file)], env=env)
                assert status.exit_code == 3, status.output  # its connector is not RUNNING: that first
                line = f"mcq connect status: source {source.name}: replication slot {source.slot_name} holds "
                alert = next(x for x in status.output.splitlines() if x.startswith(line))
                assert "INACTIVE" in alert and "warning above 2 MB" in alert, alert
                overall = runner.invoke(main, ["status", "--registry", str(registry_file)], env=env)
                assert f"replication slot {source.slot_name} holds " in overall.output
            finally:
                client.resume(connector_name(source))
                client.wait_running(connector_name(source))
                conn.execute(f"DROP TABLE {table}")
            deadline = time.monotonic() + 120  # a heartbeat, then PostgreSQL moves restart_lsn on
            while (
                status := runner.invoke(main, ["connect", "status", "--registry", str(registry_file)], env=env)
            ).exit_code:
                assert time.monotonic() < deadline, status.output
                time.sleep(3)
