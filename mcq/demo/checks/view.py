"""What a listener sees of the source: its interests' rows through their content rules and
column allow-lists, read with plain SQL; and a check's result."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from mcq.change import ChangeKey
from mcq.config import Settings
from mcq.refs import parse_ref
from mcq.registry.model import Feed, Interest, LogicalTable, Registry

Row = dict[str, str | None]
Seen = tuple[ChangeKey, Row]
"""A source row as a listener sees it: its logical key and the columns it may see."""
View = dict[str, list[Seen]]
"""Rows a listener sees, by ``TNAME`` or ``TNAME/Subtype``."""


@dataclass
class Check:
    """The result of comparing a target with the source."""

    target: str
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        verdict = "equal to the source" if self.ok else f"{len(self.problems)} difference(s)"
        return f"check {self.target}: {self.checked} keys, {verdict}"


# ------------------------------------------------------------------ the source, as a listener sees it


def feed_key(table: LogicalTable, feed: Feed, row: Row) -> ChangeKey:
    """The logical key of a source row: each key field from the column the feed maps it to."""

    def number(column: str | None) -> int | None:
        value = row.get(column) if column else None
        return int(value) if value is not None else None

    def text(column: str | None) -> str | None:
        return row.get(column) if column else None

    k = feed.keys
    return ChangeKey(
        table.tname, table.subtype, number(k.get("person_id")), text(k.get("pkey_string")),
        number(k.get("pkey_number")), text(k.get("aux_string")),
    )  # fmt: skip


def visible(table: LogicalTable, feed: Feed, interests: Iterable[Interest], rows: Iterable[Row]) -> list[Seen]:
    """The rows of one feed that a listener with these interests sees, keyed, each cut to
    the columns the admitting interests allow (their union; every column if one has no
    allow-list). A row no interest admits is not seen at all."""
    covering = [i for i in interests if i.covers(table)]
    out: list[Seen] = []
    for row in rows:
        key = feed_key(table, feed, row)
        values: dict[str, Any] = {**row, **{f"after.{c}": v for c, v in row.items()}}
        values.update(key.as_dict())  # the change fields win over a column of the same name
        admitting = [i for i in covering if (rule := i.parsed_rule()) is None or rule.matches(values)]
        if not admitting:
            continue
        if any(i.columns is None for i in admitting):
            out.append((key, dict(row)))
        else:
            allowed = {c for i in admitting for c in i.columns or ()}
            out.append((key, {c: v for c, v in row.items() if c in allowed}))
    return out


def _select(conn: psycopg.Connection[Any], feed: Feed) -> list[Row]:
    """Every row of a feed's source table, its captured columns as text."""
    columns = sql.SQL(", ").join(sql.SQL("{0}::text AS {0}").format(sql.Identifier(c)) for c in feed.columns)
    query = sql.SQL("SELECT {} FROM {}.{}").format(
        columns, sql.Identifier(feed.schema_name), sql.Identifier(feed.table_name)
    )
    cur = conn.execute(query)
    names = [d.name for d in cur.description or ()]
    return [dict(zip(names, values, strict=True)) for values in cur.fetchall()]


def read_view(settings: Settings, registry: Registry, listener: str, refs: Iterable[str]) -> View:
    """What a listener sees of the given logical tables now, read from the source tables
    their feeds name (nothing for a table the registry lacks or the listener is not
    interested in)."""
    interests = registry.interests_of(listener)
    view: View = {}
    with psycopg.connect(settings.source.dsn()) as conn:
        for ref in refs:
            table = registry.table(*parse_ref(ref))
            view[ref] = []
            if table is None or not any(i.covers(table) for i in interests):
                continue
            for feed in table.feeds:
                view[ref] += visible(table, feed, interests, _select(conn, feed))
    return view


def read_tables(settings: Settings, registry: Registry, refs: Iterable[str]) -> View:
    """Every row of the given logical tables now, every captured column, read from the
    source tables their feeds name: what a target documented to hold all of them (the
    campus directory, INSITE) must say, whatever listener or entity carries it there."""
    view: View = {}
    with psycopg.connect(settings.source.dsn()) as conn:
        for ref in refs:
            table = registry.table(*parse_ref(ref))
            view[ref] = []
            for feed in table.feeds if table is not None else ():
                view[ref] += [(feed_key(table, feed, row), row) for row in _select(conn, feed)]  # type: ignore[arg-type]
    return view


def _by_person(seen: Iterable[Seen]) -> dict[int, list[Row]]:
    out: dict[int, list[Row]] = defaultdict(list)
    for key, row in seen:
        if key.person_id is not None:
            out[key.person_id].append(row)
    return out


def _values(values: Iterable[str | None]) -> list[str]:
    """A multi-valued attribute: no empty values, no duplicates, in a stable order."""
    return sorted({v for v in values if v})
