"""``mcq connect remove``: a source's connector, replication slot and publication are gone
afterwards, on the real Connect and PostgreSQL, and removing again is a no-op that says so."""

from __future__ import annotations

from pathlib import Path

import psycopg
from click.testing import CliRunner

from mcq.capture.connector import connector_name
from mcq.cli import main as cli
from mcq.config import Settings
from mcq.connect_rest import ConnectClient
from mcq.stack import Stack
from mcq.testing.worlds import captured_world


def test_connect_remove_deletes_connector_slot_and_publication_and_a_second_remove_is_a_no_op(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with captured_world(settings, people=5) as cap:
        registry_file = tmp_path / "registry.yaml"
        registry_file.write_text(cap.registry_yaml)
        source, name = cap.source, connector_name(cap.source)
        args = ["connect", "remove", source.name, "--registry", str(registry_file)]

        first = CliRunner().invoke(cli, args)
        assert first.exit_code == 0, first.output
        assert f"connector {name} deleted" in first.output, first.output
        assert f"slot {source.slot_name} dropped" in first.output, first.output
        assert f"publication {source.publication_name} dropped" in first.output, first.output
        with ConnectClient(settings.connect) as client:
            assert name not in client.connectors()
        with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
            slots = conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (source.slot_name,))
            assert slots.fetchall() == []
            pubs = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (source.publication_name,))
            assert pubs.fetchall() == []

        again = CliRunner().invoke(cli, args)
        assert again.exit_code == 0, again.output
        assert again.output.strip() == (
            f"{source.name}: nothing to remove: no connector {name}, "
            f"no slot {source.slot_name}, no publication {source.publication_name}"
        )

        unknown = CliRunner().invoke(cli, ["connect", "remove", "nosuch", "--registry", str(registry_file)])
        assert unknown.exit_code == 2 and "no source named nosuch" in unknown.output, unknown.output
