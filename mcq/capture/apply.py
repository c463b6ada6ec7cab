"""Apply capture for a registry: outbox in the source database, replica identity of the
captured tables, connectors in Connect.

Every captured feed table gets ``REPLICA IDENTITY FULL`` before its connector is put:
with PostgreSQL's default identity an update's or a delete's before-image holds only the
primary key, so housekeeping detection and content rules on other columns cannot work
(a deleted row would stay at a rule-filtered target). Debezium's
``replica.identity.autoset.values`` is not relied on: it acts only when the connector
starts, and silently does nothing where it may not. When mcq cannot set it (not the
table's owner, not a table), capture is refused with the statement the owner must run.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from mcq.capture.connector import connector_name, install_outbox, refuse_other_owners, render_source
from mcq.capture.exceptions import CaptureError
from mcq.capture.partitions import refuse_raised_partitions, refuse_unkeyed_partitions
from mcq.config import Settings
from mcq.connect_rest import ConnectClient
from mcq.pgcatalog import column_types, table_columns, unreplicated_columns
from mcq.registry.model import Registry

log = logging.getLogger(__name__)


def feed_tables(registry: Registry) -> list[str]:
    """Every source table a feed of the registry reads (``schema.table``), once."""
    return sorted({feed.table for table in registry.tables for feed in table.feeds})


def replica_identity_statement(table: str) -> str:
    schema, _, name = table.partition(".")
    return f'ALTER TABLE "{schema}"."{name}" REPLICA IDENTITY FULL;'


def ensure_replica_identity_full(conn: psycopg.Connection[Any], tables: list[str]) -> None:
    """Set ``REPLICA IDENTITY FULL`` on each table that lacks it; refuse, naming every table
    it could not set and the exact statement to run, with one :class:`CaptureError`."""
    refused: list[tuple[str, str]] = []
    for table in tables:
        schema, _, name = table.partition(".")
        row = conn.execute(
            "SELECT c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s",
            (schema, name),
        ).fetchone()
        if row is not None and row[0] == "f":
            continue
        try:
            with conn.transaction():
                conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(sql.Identifier(schema, name)))
        except psycopg.Error as exc:
            reason = (exc.diag.message_primary or str(exc)).strip().replace("\n", " ")
            refused.append((table, reason))
            continue
        log.info(f"replica identity: {table} set to FULL (was {_IDENTITY.get(row[0], row[0]) if row else '?'})")
    if refused:
        raise CaptureError(
            "capture needs REPLICA IDENTITY FULL (whole before-images) and could not set it on "
            + ", ".join(f"{table} ({reason})" for table, reason in refused)
            + "; the owner must run: "
            + " ".join(replica_identity_statement(table) for table, _ in refused)
        )


_IDENTITY = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}

UNCARRIED = {
    "interval[]": "leaves it out of every change",
    "money[]": "leaves it out of every change",
    "xml[]": "leaves it out of every change",
    "point[]": "leaves it out of every change",
    "name[]": "leaves it out of every change",
    "bit[]": "sends it as NULL",
    "bit varying": "sends its bits as bytes without their number, so B'1' and B'0001' arrive alike, and a "
    "varbit(1) as a boolean, an empty one as NULL",
    "bit varying[]": "leaves it out of every change",
}
"""Column types (``mcq.pgcatalog.column_types``' names) Debezium's PostgreSQL connector
(3.7, tried column by column) does not carry, and what it does instead. Captured, every change
of the table would be withheld for the missing column, or reach its targets as NULL."""


def refuse_missing_columns(conn: psycopg.Connection[Any], registry: Registry) -> None:
    """Refuse, before anything is changed, a feed naming a column its table does not have
    (misspelt, or dropped since): Debezium would capture the others and the column's
    values would be absent from every change, silently. So is a column of a type Debezium
    does not carry (``UNCARRIED``). (A table that does not exist is refused by the replica
    identity step, naming the statement.)"""
    missing: list[str] = []
    types = column_types(conn, sorted({feed.table for table in registry.tables for feed in table.feeds}))
    for table in registry.tables:
        for feed in table.feeds:
            have = table_columns(conn, feed.table)
            for column in feed.columns:
                kind = types.get(feed.table, {}).get(column, "")
                if kind in UNCARRIED:
                    missing.append(
                        f"{feed.table}'s column {column} is {kind}, which Debezium's PostgreSQL connector does not "
                        f"carry (it {UNCARRIED[kind]}; table {table.ref}'s feed names it)"
                    )
            absent = [c for c in feed.columns if c not in have]
            if have and absent:
                missing.append(
                    f"{feed.table} has no column {', '.join(absent)} (table {table.ref}'s feed names it; "
                    f"the table has {', '.join(sorted(have))})"
                )
            generated = sorted(unreplicated_columns(conn, feed.table) & set(feed.columns))
            if generated:
                missing.append(
                    f"{feed.table}'s column {', '.join(generated)} is generated, and this PostgreSQL's logical "
                    f"replication does not carry generated columns (table {table.ref}'s feed names it)"
                )
    if missing:
        raise CaptureError(
            "the registry captures columns no change of the source carries: " + "; ".join(missing)
            + ": correct the feed's columns (and watch) with `mcq registry apply`, or the table"
        )  # fmt: skip


def apply_capture(registry: Registry, settings: Settings, *, connectors: bool = True) -> list[str]:
    """Install the outbox, set replica identity, put every source connector; wait until each is
    RUNNING. ``connectors=False`` prepares the source only (another manager owns the connectors)."""
    refuse_raised_partitions(settings, registry)  # whoever puts the connectors: the topics are Kafka's
    try:
        with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
            refuse_missing_columns(conn, registry)
            refuse_unkeyed_partitions(conn, registry)
            install_outbox(conn, settings.outbox)
            log.info(f"outbox: mcq.change_log and mcq_log_insert/update/delete installed in {settings.source}")
            ensure_replica_identity_full(conn, feed_tables(registry))
    except psycopg.Error as exc:
        raise CaptureError(f"preparing capture in {settings.source}: {exc}".strip()) from None
    names: list[str] = []
    if not connectors:
        log.info("connectors left to their manager (--prepare-only)")
        return names
    with ConnectClient(settings.connect) as client:
        refuse_other_owners(client, registry.sources, settings.topic_prefix, "connect apply")
        for source in registry.sources:
            name = connector_name(source)
            config = render_source(registry, source, settings)
            client.put(name, config)
            client.wait_running(name)
            tables = config["table.include.list"].count(",") + 1
            log.info(
                f"{name}: RUNNING, {tables} tables, slot {source.slot_name}, publication {source.publication_name}"
            )
            names.append(name)
    return names
