"""The current state of logical tables read from their source database through JDBC:
what ``mcq refresh --from source`` sends instead of the compacted topics' last states.

Per feed of a selected table, one read of its source table (only the columns capture
takes), each column rendered *in PostgreSQL* as the text a change record carries for
it (the same text Debezium and the normaliser give: ``streams/debezium.py``), mapped to
its logical key by the normaliser's own key mapping (``streams.keys.feed_key``).
Large tables are read in block ranges (``ctid``) by parallel Spark tasks.

Every state carries one source position: the database's WAL insert position taken
*before* the read. A change committed after it has a higher position, so whatever the
read saw of it, the listener ends at the newest state: it applies that change after the
refresh, or skips the refresh's older-positioned state after applying the change. A
change committed before it is in what the read sees.

A key two feeds of one table both hold gets the state of the feed listed first in the
registry (the topics hold whichever changed last: the source cannot tell; the normaliser
sends a DELETE of a key another feed still holds as that feed's row, first in the same order:
``streams/siblings.py``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from mcq.capture.connector import captured_columns
from mcq.config import Settings
from mcq.pgcatalog import column_types
from mcq.registry.model import LogicalTable, Registry
from streams.exceptions import SourceReadError
from streams.frames import union_by_name
from streams.keys import feed_key, key_problem
from streams.laststate import FIELDS
from streams.plan import FeedPlan, plan_normalize
from streams.sqltext import col, to_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BLOCKS_PER_TASK = 2_000
"""Source table blocks (8 KB each) one Spark task reads at least (~16 MB)."""
FETCH_SIZE = 10_000
SESSION_INIT = (
    # (an interval in an array follows intervalstyle; a lone one is rendered by _interval); refresh only reads
    "SET intervalstyle = 'iso_8601'; SET TIME ZONE 'UTC'; SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
)


@dataclass(frozen=True)
class SourceTable:
    """One source table to read: its captured columns with their declared types, and its size."""

    name: str
    """``schema.table``"""
    columns: tuple[tuple[str, str], ...]
    """(column, information_schema data_type) in capture order."""
    blocks: int


ELEMENT_TEXT = {
    "date", "timestamp without time zone", "timestamp with time zone", "time without time zone",
    "time with time zone", "numeric", "json", "jsonb", "bytea",
}  # fmt: skip
"""Array element types whose elements a change record holds as the text a lone value of the
type has (Debezium sends numeric and json elements as strings, bytea's in base64; the NaturalText transform
makes dates and times text; a time array's elements come in milliseconds); other arrays are
PostgreSQL's JSON (``[1,2]``, ``["x"]``)."""


def text_expression(column: str, data_type: str) -> sql.Composable:
    """One column rendered as the change record's text (NULL stays NULL): dates and times as
    ``streams/debezium.py`` decodes them, booleans as ``true``/``false``, arrays as JSON,
    binary as base64, everything else as PostgreSQL's own text (its output function's).
    ``data_type``: ``information_schema``'s, an array's as its elements' plus ``[]``
    (``mcq.pgcatalog.column_types``)."""
    return _rendered(sql.Identifier(column), data_type)


def _rendered(c: sql.Composable, data_type: str) -> sql.Composable:
    if data_type.endswith("[]") and data_type[:-2] in ELEMENT_TEXT:
        # each element as a lone one, in the array's order; an empty array stays []
        element: sql.Composable = sql.SQL("u.e")
        if data_type == "time without time zone[]":
            # Debezium sends a time array's elements in milliseconds (a lone time in microseconds):
            # cut here the same way, so a refresh sends what capture sends
            element = sql.SQL("(u.e - (extract(microseconds FROM u.e)::bigint % 1000) * interval '1 microsecond')")
        each = _rendered(element, data_type[:-2])
        return sql.SQL(
            "CASE WHEN {c} IS NOT NULL THEN to_json(ARRAY(SELECT {each} FROM unnest({c}) WITH ORDINALITY AS u(e, n) "
            "ORDER BY u.n))::text END"
        ).format(c=c, each=each)
    if data_type == "oid[]":  # numbers, as Debezium sends them (PostgreSQL's JSON has them as strings)
        return sql.SQL("to_json({}::bigint[])::text").format(c)
    if data_type.endswith("[]") or data_type == "ARRAY":
        return sql.SQL("to_json({})::text").format(c)
    if data_type == "date":
        return _finite(c, sql.SQL("to_char({}, 'YYYY-MM-DD')").format(c))
    if data_type == "timestamp without time zone":
        return _finite(c, _iso(c))
    if data_type == "timestamp with time zone":
        return _finite(c, sql.SQL("{} || 'Z'").format(_iso(sql.SQL("({} AT TIME ZONE 'UTC')").format(c))))
    if data_type == "time without time zone":
        # 24:00:00 is a valid time; a timestamp cannot hold it
        return sql.SQL(
            "CASE WHEN {c} = '24:00:00' THEN '24:00:00' ELSE to_char({c}, 'HH24:MI:SS') || "
            "CASE WHEN date_part('microseconds', {c})::bigint % 1000000 <> 0 THEN to_char({c}, '.US') ELSE '' END END"
        ).format(c=c)
    if data_type == "time with time zone":
        return _utc_time(c)
    if data_type == "interval":
        return _interval(c)
    if data_type == "boolean":
        return sql.SQL("CASE WHEN {c} THEN 'true' WHEN NOT {c} THEN 'false' END").format(c=c)
    if data_type == "bytea":
        return sql.SQL("translate(encode({}, 'base64'), E'\\n', '')").format(c)
    if data_type == "bit":  # Debezium sends a bit(1) as a boolean; a bit(n) as PostgreSQL's text (NaturalText)
        return sql.SQL(
            "CASE WHEN length({c}) = 1 THEN CASE WHEN {c} = B'1' THEN 'true' ELSE 'false' END ELSE {c}::text END"
        ).format(c=c)
    if data_type in ("inet", "cidr", "character"):
        # the type's output, as Debezium receives it: an inet host without its /32 and a
        # char(n) with its padding, where a cast to text gives 10.0.0.1/32 and trims
        return sql.SQL("CASE WHEN {c} IS NOT NULL THEN format('%s', {c}) END").format(c=c)
    if data_type == "money":
        return sql.SQL("{}::numeric::text").format(c)
    return sql.SQL("{}::text").format(c)


def _utc_time(c: sql.Composable) -> sql.Composable:
    """A timetz as Debezium sends it: the same instant in UTC, then ``Z`` (``13:14:15.5+02``
    -> ``11:14:15.5Z``; PostgreSQL's time output drops the fraction's trailing zeros, as
    Debezium's does)."""
    return sql.SQL("(({} AT TIME ZONE 'UTC')::time)::text || 'Z'").format(c)


def _interval(c: sql.Composable) -> sql.Composable:
    """An interval as Debezium sends it (``interval.handling.mode`` string): every field,
    each with its own sign, seconds without trailing zeros (``-1 day 02:00:00`` ->
    ``P0Y0M-1DT2H0M0S``), where PostgreSQL's ISO 8601 style leaves zero fields out."""
    parts: list[sql.Composable] = [sql.Literal("P")]
    for field, unit in (("year", "Y"), ("month", "M"), ("day", "DT"), ("hour", "H"), ("minute", "M")):
        parts += [sql.SQL("extract({} FROM {})::bigint").format(sql.SQL(field), c), sql.Literal(unit)]
    # the seconds' trailing zeros cut by pattern (trim_scale needs PostgreSQL 13)
    parts += [
        sql.SQL(
            r"regexp_replace(regexp_replace(extract(second FROM {})::numeric::text, '(\.\d*?)0+$', '\1'), '\.$', '')"
        ).format(c),
        sql.Literal("S"),
    ]
    return sql.SQL("CASE WHEN {} IS NOT NULL THEN concat({}) END").format(c, sql.SQL(", ").join(parts))


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


def source_feeds(registry: Registry, tables: Iterable[LogicalTable], prefix: str) -> list[FeedPlan]:
    """The feeds of ``tables``, in registry order."""
    refs = {t.ref for t in tables}
    return [f for f in plan_normalize(registry, prefix).feeds if f.ref in refs]


class SourceReader:
    """Reads the current state of some feeds from the source database (``settings.source``)."""

    def __init__(self, settings: Settings, registry: Registry, feeds: list[FeedPlan]) -> None:
        self.settings = settings
        self.feeds = feeds
        wanted = {f.source_table for f in feeds}
        self._captured = {
            name: cols for source in registry.sources for name, cols in captured_columns(registry, source).items()
            if name in wanted
        }  # fmt: skip

    def inspect(self) -> tuple[int, dict[str, SourceTable]]:
        """The WAL insert position now (the refresh's position) and each table to read; a
        table or column the registry names that the source lacks is a :class:`SourceReadError`."""
        try:
            with psycopg.connect(self.settings.source.dsn(), connect_timeout=10) as conn:
                position = int(conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0])  # type: ignore[index]
                types = column_types(conn, list(self._captured))
                sizes: dict[str, int] = dict(
                    conn.execute(
                        "SELECT name, pg_relation_size(to_regclass(name)) / current_setting('block_size')::int"
                        " FROM unnest(%s::text[]) AS name",
                        (sorted(self._captured),),
                    ).fetchall()
                )
        except psycopg.OperationalError as exc:
            raise SourceReadError(f"source database {self.settings.source}: {str(exc).strip()}") from None
        tables: dict[str, SourceTable] = {}
        for name, columns in self._captured.items():
            if name not in types:
                raise SourceReadError(f"source table {name} (in the registry's feeds) is not in {self.settings.source}")
            missing = [c for c in columns if c not in types[name]]
            if missing:
                raise SourceReadError(f"{name}: no column {', '.join(missing)} in {self.settings.source}")
            tables[name] = SourceTable(name, tuple((c, types[name][c]) for c in columns), int(sizes.get(name) or 0))
        return position, tables

    def states(self, spark: SparkSession, position: int, tables: dict[str, SourceTable]) -> DataFrame:
        """One row per key of the feeds' tables: the key fields, ``change_type`` UPDATE, the
        ``after`` state, ``pos`` (``c`` = the position, ``l`` = 0) and ``problem``: why the
        row has no whole key (``streams.keys.key_problem``), NULL for every row that has."""
        from pyspark.sql import functions as F
        from pyspark.sql.window import Window

        reads = {name: self._read(spark, table) for name, table in tables.items()}
        parts: list[DataFrame] = []
        for rank, feed in enumerate(self.feeds):
            table = tables[feed.source_table]
            after = F.create_map(*(x for c, _ in table.columns for x in (F.lit(c), F.col(c))))
            part = (
                reads[feed.source_table]
                .select(after.alias("after"))
                .select(
                    to_column(feed_key(feed, col("after"))).alias("k"),
                    "after",
                    to_column(key_problem(feed, col("after"), f"{feed.source_table}'s row")).alias("problem"),
                )
                .select(*(F.col(f"k.{f}").alias(f) for f in FIELDS), "after", "problem", F.lit(rank).alias("rank"))
            )
            parts.append(part)
        assert parts, "no feeds to read"
        rows = union_by_name(parts)
        shared = {f.ref for f in self.feeds if sum(g.ref == f.ref for g in self.feeds) > 1}
        if shared:  # a key two feeds hold: the first feed's state
            first = Window.partitionBy(*FIELDS, "problem").orderBy("rank")
            rows = rows.withColumn("n", F.row_number().over(first)).where(F.col("n") == 1).drop("n")
        pos = F.struct(F.lit(position).cast("long").alias("c"), F.lit(0).cast("long").alias("l"))
        return rows.select(*FIELDS, F.lit("UPDATE").alias("change_type"), "after", pos.alias("pos"), "problem")

    def _read(self, spark: SparkSession, table: SourceTable) -> DataFrame:
        """The table's rows, every column as text, in block ranges read in parallel."""
        db = self.settings.source
        columns = sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(text_expression(c, t), sql.Identifier(c)) for c, t in table.columns
        )
        # identifiers and literals only: no connection needed to spell it
        select = sql.SQL("SELECT {} FROM {}").format(columns, sql.Identifier(*table.name.split(".", 1))).as_string()
        return read_in_ranges(spark, db.jdbc_options(), select, table.blocks)


def read_in_ranges(spark: SparkSession, options: dict[str, str], select: str, blocks: int) -> DataFrame:
    """The rows of ``select`` (a query of one table of ``blocks`` blocks, without WHERE)
    through JDBC (``options``: URL, user, password, driver), read only, in block ranges
    read by parallel Spark tasks."""
    parts = [
        spark.read.format("jdbc")
        .options(**options)
        .option("fetchsize", str(FETCH_SIZE))
        .option("sessionInitStatement", SESSION_INIT)
        .option("query", f"{select}{where}")
        .load()
        for where in block_ranges(blocks, spark.sparkContext.defaultParallelism)
    ]
    return union_by_name(parts)


def block_ranges(blocks: int, parallelism: int) -> list[str]:
    """WHERE clauses splitting a table of ``blocks`` blocks into ranges of ``ctid`` (a TID
    range scan each, PostgreSQL 14+), at most one per task slot and at least
    ``BLOCKS_PER_TASK`` blocks each; the last is open-ended (rows written meanwhile)."""
    parts = max(1, min(parallelism, math.ceil(blocks / BLOCKS_PER_TASK)))
    if parts == 1:
        return [""]
    step = math.ceil(blocks / parts)
    cuts = [f"'({i * step},0)'::tid" for i in range(1, parts)]
    ranges = [f"ctid >= {lo} AND ctid < {hi}" for lo, hi in itertools.pairwise(cuts)]
    return [f" WHERE {w}" for w in (f"ctid < {cuts[0]}", *ranges, f"ctid >= {cuts[-1]}")]
