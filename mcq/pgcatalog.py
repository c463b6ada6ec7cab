"""What PostgreSQL's catalog says about a table, for checks made before using it."""

from __future__ import annotations

from typing import Any

import psycopg


def table_columns(conn: psycopg.Connection[Any], table: str) -> set[str]:
    """The columns of ``schema.table`` (names as stored, exactly); empty when there is no
    such table."""
    return _attributes(conn, table)


def _attributes(conn: psycopg.Connection[Any], table: str, generated_only: bool = False) -> set[str]:
    schema, _, name = table.partition(".")
    rows = conn.execute(
        "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped"
        + (" AND a.attgenerated <> ''" if generated_only else ""),
        (schema, name),
    )
    return {str(r[0]) for r in rows}


def column_types(conn: psycopg.Connection[Any], tables: list[str]) -> dict[str, dict[str, str]]:
    """``schema.table`` -> column -> its ``information_schema`` data type, for those of
    ``tables`` that exist; an array's is its elements' type and ``[]`` (``date[]``)."""
    types: dict[str, dict[str, str]] = {}
    for schema, table, column, data_type in conn.execute(
        "SELECT c.table_schema, c.table_name, c.column_name, "
        "CASE WHEN c.data_type = 'ARRAY' AND e.data_type IS NOT NULL THEN e.data_type || '[]' ELSE c.data_type END "
        "FROM information_schema.columns c LEFT JOIN information_schema.element_types e "
        "ON (c.table_catalog, c.table_schema, c.table_name, 'TABLE', c.dtd_identifier) "
        "= (e.object_catalog, e.object_schema, e.object_name, e.object_type, e.collection_type_identifier) "
        "WHERE c.table_schema || '.' || c.table_name = ANY(%s)",
        (sorted(tables),),
    ):
        types.setdefault(f"{schema}.{table}", {})[column] = data_type
    return types


def unreplicated_columns(conn: psycopg.Connection[Any], table: str) -> set[str]:
    """The generated columns of ``schema.table`` when the server is older than PostgreSQL 18:
    logical replication does not carry them, so no change would."""
    version = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
    if version is None or version[0] >= 180000:
        return set()
    return _attributes(conn, table, generated_only=True)


def primary_key_columns(conn: psycopg.Connection[Any], table: str) -> list[str]:
    """The primary key columns of ``schema.table``, in key order; empty when it has none."""
    schema, _, name = table.partition(".")
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
        "WHERE i.indisprimary AND n.nspname = %s AND c.relname = %s ORDER BY k.ord",
        (schema, name),
    )
    return [str(r[0]) for r in rows]
