"""A key fed by two or more source tables lives while any of them holds it.

A logical table may be fed by several source tables (an ``asset`` table and its
``asset_archive``; ``students`` and ``employees`` both feeding PERSON). A key's records
are ordered by source position, so the newest change of any feed is its state. A DELETE
from one feed is not the end of the key when another feed still holds a row of it: an
asset archived by inserting it into the archive before deleting it from the active
table, a person deleted from ``students`` who is still an employee. Sent as a delete, it
would remove from every target an object the source still has, for good (nothing later
names the key again).

So, per micro-batch, the DELETEs of such tables are looked up in their sibling feeds'
source tables. Where a sibling holds the key, its DELETE becomes an UPDATE carrying that
row (rendered in PostgreSQL as a change record's text, as ``mcq refresh --from source``
does: ``streams/source_state.py``) at the DELETE's own position, and its tombstone is
dropped; the key never leaves its targets. The row read is the sibling's state *now*:
any change of it committed after the DELETE has a higher position and follows in this
batch or a later one, so every key still ends at its newest state (a sibling that
deleted the key meanwhile sends its own DELETE). When two siblings hold it, the first in
the registry's order gives the row, as a refresh from the source does.

The look-up needs the source database (``settings.source``); one that cannot be reached
fails the batch, which runs again after a restart (nothing is written before it).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from mcq.capture.connector import captured_columns
from mcq.config import Settings
from mcq.pgcatalog import column_types
from mcq.registry.model import Registry
from streams.exceptions import SourceReadError
from streams.keys import KEY_TYPE
from streams.laststate import FIELDS
from streams.plan import FeedPlan, NormalizePlan
from streams.source_state import SESSION_INIT, text_expression

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CHUNK = 500
"""Keys looked up per statement."""
CONNECT_ATTEMPTS = 5


def shared_feeds(plan: NormalizePlan) -> dict[str, tuple[FeedPlan, ...]]:
    """Logical topic -> its feeds, for the topics fed by two or more source tables."""
    by_topic: dict[str, list[FeedPlan]] = defaultdict(list)
    for feed in plan.feeds:
        by_topic[feed.topic].append(feed)
    return {t: tuple(fs) for t, fs in by_topic.items() if len({f.source_table for f in fs}) > 1}


@dataclass(frozen=True)
class Deleted:
    """A DELETE of a shared table's key, as the batch has it."""

    topic: str
    key: tuple[Any, ...]
    """The key struct's fields in order (tname, subtype, person_id, pkey_string, pkey_number, aux_string)."""
    source_table: str
    last_commit_lsn: int
    lsn: int


class SiblingLookup:
    """Which DELETEs of shared tables' keys another feed still holds, and its row."""

    def __init__(self, settings: Settings, registry: Registry, plan: NormalizePlan) -> None:
        self.settings = settings
        self.shared = shared_feeds(plan)
        wanted = {f.source_table for fs in self.shared.values() for f in fs}
        self._captured = {
            name: cols for source in registry.sources for name, cols in captured_columns(registry, source).items()
            if name in wanted
        }  # fmt: skip

    def holders(self, deleted: list[Deleted]) -> dict[Deleted, tuple[str, dict[str, str | None]]]:
        """For each DELETE a sibling feed holds: (that feed's source table, its row as text)."""
        found: dict[Deleted, tuple[str, dict[str, str | None]]] = {}
        if not deleted:
            return found
        with self._connect() as conn:
            conn.execute(SESSION_INIT)
            types = self._column_types(conn)
            for topic, feeds in self.shared.items():
                mine = [d for d in deleted if d.topic == topic]
                for feed in feeds:  # registry order: the first sibling that holds a key gives its row
                    if feed.source_table not in types:  # dropped: it holds nothing
                        continue
                    asked = [d for d in mine if d not in found and d.source_table != feed.source_table]
                    for start in range(0, len(asked), CHUNK):
                        chunk = asked[start : start + CHUNK]
                        for d, row in self._rows(conn, feed, types[feed.source_table], chunk):
                            found.setdefault(d, (feed.source_table, row))
        return found

    def _connect(self) -> psycopg.Connection[Any]:
        for attempt in range(CONNECT_ATTEMPTS):
            try:
                return psycopg.connect(self.settings.source.dsn(), connect_timeout=10, autocommit=True)
            except psycopg.OperationalError as exc:
                if attempt == CONNECT_ATTEMPTS - 1:
                    raise SourceReadError(
                        f"source database {self.settings.source}: {str(exc).strip()} (needed to tell whether a "
                        "key deleted from one feed is still held by another)"
                    ) from None
                time.sleep(2**attempt)
        raise AssertionError("unreachable")

    def _column_types(self, conn: psycopg.Connection[Any]) -> dict[str, dict[str, str]]:
        """Each sibling table's captured columns and their types, as the source has them now
        (a column renamed or dropped since is left out: the key still lives, and changes of
        that table are withheld for the missing column until the registry is corrected)."""
        found = column_types(conn, list(self._captured))
        return {
            name: {c: found[name][c] for c in columns if c in found[name]}
            for name, columns in self._captured.items()
            if name in found
        }

    def _rows(
        self, conn: psycopg.Connection[Any], feed: FeedPlan, types: dict[str, str], chunk: list[Deleted]
    ) -> list[tuple[Deleted, dict[str, str | None]]]:
        """The rows of ``feed``'s table whose key is one of ``chunk``'s."""
        fields = [(i, f, c) for i, f in enumerate(FIELDS) for f2, c in feed.keys if f2 == f]
        if not fields or any(c not in types for _, _, c in fields):  # a key column renamed or dropped
            return []
        wanted: dict[tuple[str, ...], list[Deleted]] = defaultdict(list)
        for d in chunk:
            if d.key[0] != feed.tname or d.key[1] != feed.subtype:
                continue
            values = tuple(d.key[i] for i, _, _ in fields)
            if all(v is not None for v in values):
                wanted[tuple(str(v) for v in values)].append(d)
        if not wanted:
            return []
        columns = list(types)
        select = sql.SQL(", ").join(
            [
                *(sql.SQL("{}::text").format(sql.Identifier(c)) for _, _, c in fields),
                *(text_expression(c, types[c]) for c in columns),
            ]
        )
        # untyped literals take each key column's own type: its index is used
        match = sql.SQL("({}) IN ({})").format(
            sql.SQL(", ").join(sql.Identifier(c) for _, _, c in fields),
            sql.SQL(", ").join(
                sql.SQL("({})").format(sql.SQL(", ").join(sql.Literal(v) for v in values)) for values in wanted
            ),
        )
        query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
            select, sql.Identifier(*feed.source_table.split(".", 1)), match
        )
        out: list[tuple[Deleted, dict[str, str | None]]] = []
        for row in conn.execute(query):
            key = tuple(row[: len(fields)])
            state = dict(zip(columns, row[len(fields) :], strict=True))
            out.extend((d, state) for d in wanted.get(key, []))
        return out


def resolve_deletes(lookup: SiblingLookup, records: DataFrame) -> tuple[DataFrame, int]:
    """``records`` with every DELETE a sibling feed holds turned into an UPDATE carrying its
    row, that DELETE's tombstone dropped; and how many were turned."""
    from pyspark.sql import functions as F

    shared = F.col("topic").isin(list(lookup.shared))
    delete = shared & (F.col("r.change_type") == "DELETE") & ~F.coalesce(F.col("r.tombstone"), F.lit(False))
    source = F.concat_ws(".", F.col("e.source.schema"), F.col("e.source.table"))
    picked = ("topic", "r.key", source.alias("source_table"), "last_commit_lsn", "lsn")
    rows = records.where(delete).select(*picked).collect()
    deleted = [
        Deleted(r["topic"], tuple(r["key"][f] for f in FIELDS), r["source_table"], r["last_commit_lsn"], r["lsn"])
        for r in rows
    ]
    held = lookup.holders(deleted)
    if not held:
        return records, 0
    spark = records.sparkSession
    turned = spark.createDataFrame(
        [(d.topic, d.key, d.last_commit_lsn, d.lsn, table, row) for d, (table, row) in held.items()],
        f"h_topic string, h_key {KEY_TYPE}, h_lcl long, h_lsn long, h_table string, h_after map<string,string>",
    )
    matched = (
        (F.col("topic") == F.col("h_topic"))
        & (F.col("r.key") == F.col("h_key"))
        & (F.col("last_commit_lsn") == F.col("h_lcl"))
        & (F.col("lsn") == F.col("h_lsn"))
    )
    joined = records.join(F.broadcast(turned), matched, "left")
    hit = F.col("h_topic").isNotNull()
    table = F.col("h_table")
    out = (
        joined.where(~(hit & F.coalesce(F.col("r.tombstone"), F.lit(False))))
        .withColumn(
            "r",
            F.when(
                hit,
                F.col("r")
                .withField("change_type", F.lit("UPDATE"))
                .withField("after", F.col("h_after"))
                .withField("origin", F.concat(F.lit("table "), table)),
            ).otherwise(F.col("r")),
        )
        .withColumn(
            "e",
            F.when(
                hit,
                F.col("e")
                .withField("source.schema", F.substring_index(table, ".", 1))
                .withField("source.table", F.expr("substring(h_table, instr(h_table, '.') + 1)")),
            ).otherwise(F.col("e")),
        )
        .drop("h_topic", "h_key", "h_lcl", "h_lsn", "h_table", "h_after")
    )
    for topic in sorted({d.topic for d in held}):
        n = sum(1 for d in held if d.topic == topic)
        log.info(f"normalize: {topic}: {n} delete(s) of keys another source table still holds, sent as its row")
    return out, len(held)
