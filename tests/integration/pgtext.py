"""What a column's value must read as in a change record, derived by PostgreSQL itself.

The oracle for the normaliser's type decoding (streams/debezium.py): each column is
rendered in SQL from its declared type (``to_char``, ``::text``, ``to_json``), never from
what Debezium sent, so a wrong decoding cannot agree with itself.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def _utc_time(c: sql.Composable) -> sql.Composable:
    """A timetz as the same instant's time in UTC, ``HH:MM:SS``, the fraction's digits without
    trailing zeros, and ``Z``."""
    t = sql.SQL("(({} AT TIME ZONE 'UTC')::time)").format(c)
    micros = sql.SQL("(date_part('microseconds', {})::bigint % 1000000)").format(t)
    return sql.SQL(
        "CASE WHEN {c} IS NOT NULL THEN to_char({t}, 'HH24:MI:SS') || CASE WHEN {u} <> 0 "
        "THEN '.' || rtrim(to_char({u}, 'FM000000'), '0') ELSE '' END || 'Z' END"
    ).format(c=c, t=t, u=micros)


def _interval(c: sql.Composable) -> sql.Composable:
    """An interval with every field, each signed: ``P<y>Y<m>M<d>DT<h>H<m>M<s>S``."""
    fields = ", ".join(f"date_part('{f}', {{c}})" for f in ("year", "month", "day", "hour", "minute"))
    s = "date_part('second', {c})::numeric"  # whole seconds without a point, a fraction without trailing zeros
    seconds = f"CASE WHEN {s} = trunc({s}) THEN trunc({s})::bigint::text ELSE rtrim({s}::text, '0') END"
    text = f"CASE WHEN {{c}} IS NOT NULL THEN format('P%sY%sM%sDT%sH%sM%sS', {fields}, {seconds}) END"
    return sql.SQL(text).format(c=c)  # type: ignore[arg-type]


def _finite(c: sql.Composable, rendered: sql.Composable) -> sql.Composable:
    """``rendered`` for a finite date or timestamp; ``infinity`` / ``-infinity`` as PostgreSQL
    writes them (``to_char`` gives NULL for them)."""
    return sql.SQL("CASE WHEN isfinite({c}) THEN {r} ELSE {c}::text END").format(c=c, r=rendered)


def _iso(expr: sql.Composable) -> sql.Composable:
    """``yyyy-MM-ddTHH:mm:ss`` plus ``.ffffff`` when the fraction is not zero."""
    return sql.SQL(
        "to_char({e}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN date_part('microseconds', {e})::bigint % 1000000 <> 0 "
        "THEN to_char({e}, '.US') ELSE '' END"
    ).format(e=expr)


# an array of these holds each element as a lone value's text; other arrays are JSON as such
ELEMENT_TEXT = {
    "_date": "date", "_timestamp": "timestamp without time zone", "_timestamptz": "timestamp with time zone",
    "_time": "time without time zone", "_timetz": "time with time zone", "_numeric": "numeric",
    "_json": "json", "_jsonb": "jsonb", "_bytea": "bytea",
}  # fmt: skip


def text_expression(column: str, data_type: str, udt: str = "") -> sql.Composable:
    """The SQL rendering of one column as the change record's text (NULL stays NULL);
    ``udt``: its ``information_schema`` udt_name (an array's: ``_`` and its element type's)."""
    c = sql.Identifier(column)
    if data_type == "ARRAY" and udt in ELEMENT_TEXT:
        # element by element, by subscript: [] for an empty array
        value: sql.Composable = sql.SQL("{}[i]").format(c)
        if udt == "_time":  # Debezium sends a time array's elements in milliseconds, cut (not rounded)
            value = sql.SQL("date_trunc('milliseconds', '2000-01-01'::date + {})::time").format(value)
        element = _scalar(value, ELEMENT_TEXT[udt])
        return sql.SQL(
            "CASE WHEN {c} IS NOT NULL THEN coalesce((SELECT to_json(array_agg({e} ORDER BY i)) "
            "FROM generate_subscripts({c}, 1) AS i), '[]')::text END"
        ).format(c=c, e=element)
    return _scalar(c, data_type)


def _scalar(c: sql.Composable, data_type: str) -> sql.Composable:
    if data_type == "bytea":  # base64, as Kafka Connect's JSON writes bytes
        return sql.SQL("replace(encode({}, 'base64'), chr(10), '')").format(c)
    if data_type == "date":
        return _finite(c, sql.SQL("to_char({}, 'YYYY-MM-DD')").format(c))
    if data_type == "timestamp without time zone":
        return _finite(c, _iso(c))
    if data_type == "timestamp with time zone":
        return _finite(c, sql.SQL("{} || 'Z'").format(_iso(sql.SQL("({} AT TIME ZONE 'UTC')").format(c))))
    if data_type == "time without time zone":
        return sql.SQL("substr({}, 12)").format(_iso(sql.SQL("('2000-01-01'::date + {})").format(c)))
    if data_type == "time with time zone":
        return _utc_time(c)
    if data_type == "interval":
        return _interval(c)
    if data_type == "boolean":
        return sql.SQL("CASE WHEN {c} THEN 'true' WHEN NOT {c} THEN 'false' END").format(c=c)
    if data_type == "ARRAY":
        return sql.SQL("to_json({})::text").format(c)
    if data_type == "bit":  # bit(1): a boolean, as Debezium sends it; bit(n): PostgreSQL's text
        return sql.SQL(
            "CASE WHEN bit_length({c}) = 1 THEN CASE get_bit({c}, 0) WHEN 1 THEN 'true' ELSE 'false' END "
            "ELSE {c}::text END"
        ).format(c=c)
    if data_type in ("inet", "cidr", "character"):  # their output function's text, not the cast's
        return sql.SQL("CASE WHEN {c} IS NOT NULL THEN format('%s', {c}) END").format(c=c)
    return sql.SQL("{}::text").format(c)


def rows_as_text(conn: psycopg.Connection[Any], table: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """Every row of ``schema.table`` with each (or each named) column as its change-record text."""
    schema, _, name = table.partition(".")
    types = {
        column: (data_type, udt)
        for column, data_type, udt in conn.execute(
            "SELECT column_name, data_type, udt_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s",
            (schema, name),
        ).fetchall()
    }
    wanted = columns or list(types)
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(text_expression(c, *types[c]), sql.Identifier(c)) for c in wanted
        ),
        sql.Identifier(schema, name),
    )
    cur = conn.execute(query)
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
