"""Create the sample world's tables in a PostgreSQL schema and bulk load a generated world."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from importlib.resources import files
from typing import Any

import psycopg
from psycopg import sql

from mcq.world.generator import COLUMNS, TABLE_ORDER, World

log = logging.getLogger(__name__)

_SAFE_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_PLACEHOLDER = "{schema}"


def _checked(schema: str) -> str:
    # The name is spliced into DDL text, so only plain lower-case identifiers get through.
    if not _SAFE_SCHEMA.match(schema):
        raise ValueError(f"unsafe schema name {schema!r}: must match {_SAFE_SCHEMA.pattern}")
    return schema


def schema_sql(schema: str) -> str:
    """The DDL of the world for ``schema``: the packaged schema.sql with the placeholder filled in."""
    text = files("mcq.world").joinpath("schema.sql").read_text(encoding="utf-8")
    return text.replace(_PLACEHOLDER, f'"{_checked(schema)}"')


def create_schema(conn: psycopg.Connection[Any], schema: str, replace: bool = False) -> None:
    """Create ``schema`` and the world's tables in it; with ``replace``, drop those tables first.

    Idempotent without ``replace``: existing tables and their rows are kept.
    """
    ddl = schema_sql(schema)
    ident = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        if replace:
            # Only our own tables: the schema may also hold things others installed there.
            for table in reversed(TABLE_ORDER):
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}.{} CASCADE").format(ident, sql.Identifier(table)))
        # No parameters, so psycopg sends the whole script as one simple query.
        conn.execute(ddl.encode("utf-8"))


def load(
    conn: psycopg.Connection[Any],
    schema: str,
    world: World,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, int]:
    """COPY every table of ``world`` into ``schema`` in FK-safe order, in one transaction;
    ``progress(rows written, rows in all)`` every few thousand rows.

    Returns the number of rows loaded per table. The tables must exist (:func:`create_schema`)
    and must not already hold rows with the same keys.
    """
    ident = sql.Identifier(_checked(schema))
    counts: dict[str, int] = {}
    tables = world.tables()
    total, done = sum(len(rows) for rows in tables.values()), 0
    with conn.transaction(), conn.cursor() as cur:
        for table, rows in tables.items():
            stmt = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
                ident, sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, COLUMNS[table]))
            )
            with cur.copy(stmt) as copy:
                for i, row in enumerate(rows, 1):
                    copy.write_row(row)
                    if i % 5000 == 0:
                        progress(done + i, total)
            done += len(rows)
            progress(done, total)
            counts[table] = len(rows)
            log.info(f"{table}: {len(rows)} rows")
    return counts
