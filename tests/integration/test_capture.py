"""Capture generated from the registry: table changes and explicit log entries arrive in
Kafka with what the normaliser needs, and nothing is lost while Connect is down."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pydantic import SecretStr

from mcq.capture.apply import apply_capture, ensure_replica_identity_full
from mcq.capture.connector import connector_name, install_outbox
from mcq.capture.exceptions import CaptureError
from mcq.config import OutboxSettings, Settings
from mcq.connect_rest import ConnectClient
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from mcq.testing.worlds import Captured, captured_world, read_json_events
from tests import PROJECT_ROOT

NEW_PERSON = 9_000_001


@pytest.fixture(scope="module")
def captured(stack: Stack, settings: Settings) -> Iterator[Captured]:
    with captured_world(settings) as cap:
        yield cap


def _events(settings: Settings, topic: str, want: Any, expect: int, timeout_s: float = 90) -> list[dict[str, Any]]:
    return read_json_events(settings, topic, want, expect, timeout_s)


def _sql(settings: Settings, *statements: str) -> None:
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt)


def test_insert_update_delete_on_directory_telephone_arrive_in_kafka(settings: Settings, captured: Captured) -> None:
    s = captured.schema
    _sql(
        settings,
        f"INSERT INTO {s}.people (person_id, first_name, last_name) VALUES ({NEW_PERSON}, 'Ada', 'Lovelace')",
        f"INSERT INTO {s}.directory_telephone (person_id, tele_type, phone_number) "
        f"VALUES ({NEW_PERSON}, 'campus', '+1 518 276 0001')",
        f"UPDATE {s}.directory_telephone SET phone_number = '+1 518 276 0002' WHERE person_id = {NEW_PERSON}",
        f"DELETE FROM {s}.directory_telephone WHERE person_id = {NEW_PERSON}",
    )
    events = _events(
        settings,
        captured.topic(f"{s}.directory_telephone"),
        lambda k, v: k and k.get("person_id") == NEW_PERSON,
        expect=4,
    )
    assert [e["op"] for e in events] == ["c", "u", "d", None]
    assert events[0]["after"]["phone_number"] == "+1 518 276 0001"
    assert events[1]["before"]["phone_number"] == "+1 518 276 0001"
    assert events[1]["after"]["phone_number"] == "+1 518 276 0002"
    assert events[2]["before"]["tele_type"] == "campus" and events[2]["after"] is None
    # the source position the normaliser orders by travels with every change
    assert all(e["source"]["lsn"] and e["source"]["txId"] for e in events[:3])


def test_the_snapshot_captures_only_the_registered_columns(settings: Settings, captured: Captured) -> None:
    s = captured.schema
    events = _events(settings, captured.topic(f"{s}.logins"), lambda k, v: v is not None and v["op"] == "r", expect=1)
    feed = captured.registry.table("LOGINS", None).feeds[0]  # type: ignore[union-attr]
    assert set(events[0]["after"]) == set(feed.columns)


def test_a_housekeeping_update_carries_what_decides_it_is_one(settings: Settings, captured: Captured) -> None:
    s = captured.schema
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        person, tele = conn.execute(f"SELECT person_id, tele_type FROM {s}.directory_telephone LIMIT 1").fetchone()  # type: ignore[misc]
        conn.execute(
            f"UPDATE {s}.directory_telephone SET updated_at = updated_at + interval '1 hour' "
            "WHERE person_id = %s AND tele_type = %s",
            (person, tele),
        )
        conn.execute(
            f"UPDATE {s}.directory_telephone SET phone_number = '+1 518 276 9999' "
            "WHERE person_id = %s AND tele_type = %s",
            (person, tele),
        )
    events = _events(
        settings,
        captured.topic(f"{s}.directory_telephone"),
        lambda k, v: v is not None and v["op"] == "u" and k == {"person_id": person, "tele_type": tele},
        expect=2,
    )
    feed = captured.registry.table("PERSON", "Telephone").feeds[0]  # type: ignore[union-attr]
    housekeeping, real = events
    assert housekeeping["before"]["updated_at"] != housekeeping["after"]["updated_at"]
    assert not feed.touches_interest(housekeeping["before"], housekeeping["after"])
    assert feed.touches_interest(real["before"], real["after"])


def test_mcq_log_update_and_figure_5_arrive_through_the_outbox(settings: Settings, captured: Captured) -> None:
    s = captured.schema
    marker = f"zz{uuid.uuid4().hex[:8]}"
    _sql(settings, f"SELECT mcq_log_update('LOGINS', person_id => 42, pkey_string => '{marker}', pkey_number => 7)")
    figure5 = (PROJECT_ROOT / "examples" / "refresh_transfer_students.sql").read_text().replace("campus.", f"{s}.")
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        transfers = {r[0] for r in conn.execute(f"SELECT username FROM {s}.logins WHERE admit_cohort = 'TR200209'")}
        # the connector's snapshot holds every older entry of the shared outbox too
        before = conn.execute("SELECT coalesce(max(log_id), 0) FROM mcq.change_log").fetchone()[0]  # type: ignore[index]
        conn.execute(figure5)
    explicit = _events(
        settings,
        captured.topic("mcq.change_log"),
        lambda k, v: v is not None and v["after"]["pkey_string"] == marker,
        expect=1,
    )
    entry = explicit[0]["after"]
    assert (entry["tname"], entry["change_type"], entry["person_id"], entry["subtype"]) == (
        "LOGINS",
        "update",
        42,
        None,
    )
    assert entry["source"] is None  # named no source: every source of the database takes it
    assert entry["call_stack"].startswith("PL/pgSQL function public.mcq_log_update(")
    if transfers:
        refreshed = _events(
            settings,
            captured.topic("mcq.change_log"),
            lambda k, v: v is not None and v["after"]["pkey_string"] in transfers and v["after"]["log_id"] > before,
            expect=len(transfers),
        )
        assert {e["after"]["pkey_string"] for e in refreshed} == transfers
        # Figure 5 names the source it is meant for (one database may serve several deployments)
        assert {e["after"]["source"] for e in refreshed} == {"campus"}
        # the paper's call stack: who called the logging routine (here Figure 5's anonymous block)
        assert all("inline_code_block" in e["after"]["call_stack"] for e in refreshed)


def test_changes_made_while_connect_is_down_are_not_lost(stack: Stack, settings: Settings, captured: Captured) -> None:
    s = captured.schema
    connect = stack.service("connect")
    assert connect.handle.stop(connect.stop_signal)
    try:
        _sql(
            settings,
            f"INSERT INTO {s}.people (person_id, first_name, last_name) VALUES ({NEW_PERSON + 1}, 'Grace', 'Hopper')",
            f"UPDATE {s}.people SET last_name = 'Murray Hopper' WHERE person_id = {NEW_PERSON + 1}",
        )
    finally:
        stack.up()  # starts Connect again and waits until it is healthy
    with ConnectClient(settings.connect) as client:
        client.wait_running(connector_name(captured.source), timeout_s=120)
    events = _events(
        settings,
        captured.topic(f"{s}.people"),
        lambda k, v: k and k.get("person_id") == NEW_PERSON + 1,
        expect=2,
        timeout_s=120,
    )
    assert [e["op"] for e in events] == ["c", "u"]
    assert events[1]["after"]["last_name"] == "Murray Hopper"


def test_a_table_the_capture_user_does_not_own_is_refused_naming_the_statement_to_run(
    stack: Stack, settings: Settings
) -> None:
    """REPLICA IDENTITY FULL needs the table's owner: a user who is not gets one line that
    names each table and the exact statement its owner must run, and nothing is changed."""
    token = uuid.uuid4().hex[:8]
    schema, role, password = f"ri_{token}", f"mcq_ri_{token}", f"pw-{token}"
    _sql(
        settings,
        f"CREATE SCHEMA {schema}",
        f"CREATE TABLE {schema}.owned_elsewhere (id integer PRIMARY KEY, note text)",
        f"CREATE ROLE {role} LOGIN PASSWORD '{password}'",
        f"GRANT USAGE ON SCHEMA {schema} TO {role}",
    )
    as_role = settings.source.model_copy(update={"user": role, "password": SecretStr(password)})
    try:
        with psycopg.connect(as_role.dsn(), autocommit=True) as conn, pytest.raises(CaptureError) as refused:
            ensure_replica_identity_full(conn, [f"{schema}.owned_elsewhere"])
        message = str(refused.value)
        assert "\n" not in message
        assert f"{schema}.owned_elsewhere (must be owner of table owned_elsewhere)" in message
        assert message.endswith(f'the owner must run: ALTER TABLE "{schema}"."owned_elsewhere" REPLICA IDENTITY FULL;')
        with psycopg.connect(settings.source.dsn()) as conn:
            identity = conn.execute(
                f"SELECT relreplident FROM pg_class WHERE oid = '{schema}.owned_elsewhere'::regclass"
            )
            assert identity.fetchone() == ("d",)
    finally:
        _sql(settings, f"DROP SCHEMA {schema} CASCADE", f"DROP ROLE {role}")


def _people_registry(letters: str, token: str, schema: str, columns: str) -> Registry:
    """A source of its own with one table, PEOPLE, fed by ``schema.people``."""
    return parse_registry(
        f"""
sources:
  - {{name: {letters}{token}, schemas: [{schema}], publication: mcq_{letters}{token}, slot: mcq_{letters}{token}}}
tables:
  - tname: {letters.upper()}_PEOPLE
    feeds:
      - {{source: {letters}{token}, table: {schema}.people, keys: {{person_id: person_id}}, columns: [{columns}]}}
listeners: []
""",
        f"{letters}-test.yaml",
    )


def test_connect_apply_refuses_a_feed_that_is_not_a_table_before_any_connector_exists(
    stack: Stack, settings: Settings
) -> None:
    token = uuid.uuid4().hex[:8]
    schema = f"ri_{token}"
    _sql(settings, f"CREATE SCHEMA {schema}", f"CREATE VIEW {schema}.people AS SELECT 1 AS person_id, 'x' AS name")
    registry = _people_registry("ri", token, schema, "person_id, name")
    try:
        with pytest.raises(CaptureError) as refused:
            apply_capture(registry, settings)
        assert f'ALTER TABLE "{schema}"."people" REPLICA IDENTITY FULL;' in str(refused.value)
        with ConnectClient(settings.connect) as client:
            assert client.status(connector_name(registry.sources[0])) is None
    finally:
        _sql(settings, f"DROP SCHEMA {schema} CASCADE")


def test_connect_apply_refuses_a_column_the_table_does_not_have_before_changing_anything(
    stack: Stack, settings: Settings
) -> None:
    """A misspelt or dropped column would be left out by Debezium and its values absent from
    every change, silently: `mcq connect apply` names it, with the columns the table has. So
    is a generated column, which PostgreSQL's logical replication (before 18) never carries,
    and a column of a type Debezium leaves out (an interval[]), sends as NULL (a bit[]) or
    sends without what tells its values apart (a varbit: B'1' and B'0001' arrive alike)."""
    token = uuid.uuid4().hex[:8]
    schema = f"mc_{token}"
    _sql(
        settings,
        f"CREATE SCHEMA {schema}",
        f"CREATE TABLE {schema}.people (person_id integer PRIMARY KEY, name text, "
        "shout text GENERATED ALWAYS AS (upper(name)) STORED, spans interval[], flags bit(2)[], "
        "mask varbit(8))",
    )
    registry = _people_registry("mc", token, schema, "person_id, name, nmae, shout, spans, flags, mask")
    try:
        with pytest.raises(CaptureError) as refused:
            apply_capture(registry, settings)
        message = str(refused.value)
        assert "\n" not in message
        assert (
            f"{schema}.people has no column nmae (table MC_PEOPLE's feed names it; the table has flags, mask, "
            "name, person_id, shout, spans)" in message
        )
        assert (
            f"{schema}.people's column spans is interval[], which Debezium's PostgreSQL connector does not carry (it "
            "leaves it out of every change; table MC_PEOPLE's feed names it)" in message
        ), message
        assert (
            f"{schema}.people's column flags is bit[], which Debezium's PostgreSQL connector does not carry (it "
            "sends it as NULL" in message
        ), message
        assert (
            f"{schema}.people's column mask is bit varying, which Debezium's PostgreSQL connector does not carry (it "
            "sends its bits as bytes without their number, so B'1' and B'0001' arrive alike" in message
        ), message
        assert f"{schema}.people's column shout is generated" in message, message
        with psycopg.connect(settings.source.dsn()) as conn:  # nothing changed: identity as created
            identity = conn.execute(f"SELECT relreplident FROM pg_class WHERE oid = '{schema}.people'::regclass")
            assert identity.fetchone() == ("d",)
        with ConnectClient(settings.connect) as client:
            assert client.status(connector_name(registry.sources[0])) is None
    finally:
        _sql(settings, f"DROP SCHEMA {schema} CASCADE")


def test_connect_apply_prepare_only_prepares_the_source_and_puts_no_connector(
    stack: Stack, settings: Settings, tmp_path: Any
) -> None:
    """With Strimzi KafkaConnector resources (the chart's capture.mode strimzi) the connectors
    have another manager: `mcq connect apply --prepare-only` installs the outbox and sets
    REPLICA IDENTITY FULL, and leaves Connect alone."""
    from click.testing import CliRunner

    from mcq.cli import main

    token = uuid.uuid4().hex[:8]
    schema = f"po_{token}"
    _sql(
        settings, f"CREATE SCHEMA {schema}", f"CREATE TABLE {schema}.people (person_id integer PRIMARY KEY, name text)"
    )
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(
        f"""
sources:
  - {{name: po{token}, schemas: [{schema}], publication: mcq_po{token}, slot: mcq_po{token}}}
tables:
  - tname: PO_PEOPLE
    feeds:
      - {{source: po{token}, table: {schema}.people, keys: {{person_id: person_id}}, columns: [person_id, name]}}
listeners: []
"""
    )
    try:
        result = CliRunner().invoke(main, ["connect", "apply", "--prepare-only", "--registry", str(registry_file)])
        assert result.exit_code == 0, (result.output, result.stderr)
        assert "connectors left to their manager (--prepare-only)" in result.output
        with psycopg.connect(settings.source.dsn()) as conn:
            identity = conn.execute(f"SELECT relreplident FROM pg_class WHERE oid = '{schema}.people'::regclass")
            assert identity.fetchone() == ("f",)
            assert conn.execute("SELECT to_regproc('mcq_log_update')").fetchone() != (None,)
        with ConnectClient(settings.connect) as client:
            assert client.status(f"mcq-source-po{token}") is None
    finally:
        _sql(settings, f"DROP SCHEMA {schema} CASCADE")


def test_only_granted_roles_log_through_the_outbox_functions_and_whole_table_requests_are_rate_limited(
    stack: Stack, settings: Settings
) -> None:
    """The functions are SECURITY DEFINER: a role granted EXECUTE logs without any right on
    mcq.change_log, a role not granted cannot log at all, nor write the table directly; a
    second whole-table request of one table by one role within the interval is refused
    (another table, another role, or a keyed request is not)."""
    token = uuid.uuid4().hex[:8]
    allowed, other = f"mcq_logger_{token}", f"mcq_other_{token}"
    tname = f"ZZ{token.upper()}"
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        for role in (allowed, other):
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
            conn.execute(f"GRANT USAGE ON SCHEMA mcq TO {role}")
        try:
            install_outbox(conn, OutboxSettings(roles=(allowed,), whole_table_every_s=3600))

            def as_role(role: str, sql: str) -> Any:
                conn.execute(f"SET ROLE {role}")
                try:
                    return conn.execute(sql).fetchone()
                finally:
                    conn.execute("RESET ROLE")

            assert as_role(allowed, f"SELECT mcq_log_update('{tname}', person_id => 1)") is not None
            assert as_role(allowed, f"SELECT mcq_log_update('{tname}')") is not None  # the first whole-table one
            with pytest.raises(psycopg.errors.RaiseException, match=rf"whole-table request for {tname} refused"):
                as_role(allowed, f"SELECT mcq_log_update('{tname}')")
            assert as_role(allowed, f"SELECT mcq_log_update('{tname}', 'Other')") is not None  # another subtype
            assert as_role(allowed, f"SELECT mcq_log_update('{tname}', person_id => 2)") is not None  # keyed
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                as_role(other, f"SELECT mcq_log_update('{tname}', person_id => 3)")
            for sql in (
                f"INSERT INTO mcq.change_log (tname, change_type) VALUES ('{tname}', 'update')",
                f"SELECT mcq._log('update', '{tname}', NULL, 4, NULL, NULL, NULL, NULL, NULL)",
                "DELETE FROM mcq.whole_table_requests",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    as_role(allowed, sql)
            logged = conn.execute("SELECT count(*) FROM mcq.change_log WHERE tname = %s", (tname,)).fetchone()
            assert logged == (4,)
        finally:
            install_outbox(conn, settings.outbox)  # every role again, as the stack had it
            conn.execute("DELETE FROM mcq.change_log WHERE tname = %s", (tname,))
            conn.execute("DELETE FROM mcq.whole_table_requests WHERE tname = %s", (tname,))
            for role in (allowed, other):
                conn.execute(f"REVOKE USAGE ON SCHEMA mcq FROM {role}")
                conn.execute(f"DROP ROLE {role}")
