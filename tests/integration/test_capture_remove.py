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


def test_another_deployments_connector_of_a_source_named_alike_is_neither_replaced_nor_removed(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    """Connector and raw topics are named after the source: a second deployment (another
    topic prefix) whose registry names its source alike is refused, and the first keeps
    capturing."""
    with captured_world(settings, people=5) as cap:
        registry_file = tmp_path / "registry.yaml"
        registry_file.write_text(cap.registry_yaml)
        name = connector_name(cap.source)
        with ConnectClient(settings.connect) as client:
            before = client.config(name)
        assert before is not None and before["mcq.topic.prefix"] == settings.topic_prefix
        other = {"MCQ_TOPIC_PREFIX": f"{settings.topic_prefix}-other"}
        for args in (["connect", "apply"], ["connect", "remove", cap.source.name]):
            refused = CliRunner().invoke(cli, [*args, "--registry", str(registry_file)], env=other)
            assert refused.exit_code != 0, refused.output
            assert f"connector {name} belongs to the deployment of topic prefix '{settings.topic_prefix}'" in (
                refused.output
            ), refused.output
        with ConnectClient(settings.connect) as client:
            assert client.config(name) == before
            status = client.status(name)
            assert status is not None and status["connector"]["state"] == "RUNNING"
