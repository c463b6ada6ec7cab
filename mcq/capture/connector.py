"""Debezium connector configuration generated from the registry, one per source.

What a connector captures follows the registry: the source tables of every feed with
exactly their captured columns, plus the outbox ``mcq.change_log``. Tables need
``REPLICA IDENTITY FULL`` because the normaliser needs the before-image to tell a
housekeeping-only update from one that touches a column of interest, and content rules
are evaluated on it: ``mcq connect apply`` sets it (``mcq.capture.apply``), Debezium's
``replica.identity.autoset.values`` asks for it again at every start.

Record values are JSON *with their Connect schema* (``value.converter.schemas.enable``),
set on the connector rather than left to the worker's defaults: the schema names each
column's semantic type (``io.debezium.time.Date`` for days since the epoch, ...), which
the normaliser needs to turn Debezium's encodings back into natural text values.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from mcq.config import Settings
from mcq.connect_rest import debezium_postgres_source
from mcq.registry.model import Registry, Source

OUTBOX_TABLE = "mcq.change_log"
OUTBOX_COLUMNS = (
    "log_id", "tname", "subtype", "change_type", "person_id", "pkey_string", "pkey_number", "aux_string",
    "call_stack", "logged_at", "txid", "source",
)  # fmt: skip


def connector_name(source: Source) -> str:
    return f"mcq-source-{source.name}"


def raw_topic_prefix(source: Source) -> str:
    """Raw CDC topics are ``<prefix>.<schema>.<table>``."""
    return f"mcq.raw.{source.name}"


def raw_topic(source: Source, table: str) -> str:
    return f"{raw_topic_prefix(source)}.{table}"


def captured_columns(registry: Registry, source: Source) -> dict[str, list[str]]:
    """schema.table -> captured columns (the union over every feed of that table)."""
    out: dict[str, list[str]] = {}
    for _, feed in registry.feeds_of(source.name):
        cols = out.setdefault(feed.table, [])
        cols.extend(c for c in feed.columns if c not in cols)
    out[OUTBOX_TABLE] = list(OUTBOX_COLUMNS)
    return dict(sorted(out.items()))


def render_source(registry: Registry, source: Source, settings: Settings) -> dict[str, str]:
    """The connector config of one source."""
    tables = captured_columns(registry, source)
    feeds = [t for t in tables if t != OUTBOX_TABLE]
    return debezium_postgres_source(
        settings.source,
        topic_prefix=raw_topic_prefix(source),
        slot_name=source.slot_name,
        publication_name=source.publication_name,
        # Debezium reads these lists as regular expressions: escape the dots
        tables=[t.replace(".", "\\.") for t in tables],
        **{
            "column.include.list": ",".join(
                f"{table}.{col}".replace(".", "\\.") for table, cols in tables.items() for col in cols
            ),
            "replica.identity.autoset.values": ",".join(f"{t}:FULL" for t in feeds),
            "snapshot.mode": "initial",
            # the normaliser decodes dates, timestamps and times by the schema's semantic names
            "value.converter.schemas.enable": "true",
        },
    )


def render(registry: Registry, settings: Settings) -> dict[str, dict[str, str]]:
    """Connector name -> config, for every source of the registry."""
    return {connector_name(s): render_source(registry, s, settings) for s in registry.sources}


def outbox_sql() -> str:
    return resources.files("mcq.capture").joinpath("outbox.sql").read_text()


def install_outbox(conn: Any) -> None:
    """Create (or update) the outbox table and the mcq_log_* functions."""
    conn.execute(outbox_sql())
