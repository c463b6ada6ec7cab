"""What a batch job (``mcq refresh``) is asked to cover: tables/subtypes, a content rule in
the registry's rule language, and an explicit key list read from a CSV or JSON Lines
file. Everything is checked here, before Spark starts: a bad line is one error naming
the file and line, and nothing is done.

A key in the file may be partial -- ``PERSON`` with only ``person_id`` names every aspect
of that person the listener covers -- and it may leave out ``tname`` (and ``subtype``)
when the command names the table with ``--tname`` (``--subtype``) or the listener has
only one.

CSV: a header row naming key fields (``tname, subtype, person_id, pkey_string,
pkey_number, aux_string``); an empty cell is no value. JSON Lines: one object per line
with the same names. Blank lines are skipped in both.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcq.change import ChangeKey
from mcq.refs import KEY_FIELDS, table_ref
from mcq.registry.exceptions import RuleSyntaxError
from mcq.registry.model import LogicalTable
from mcq.registry.rules import Rule, parse_rule
from streams.exceptions import SelectionError

NAMES = ("tname", "subtype", *KEY_FIELDS)
NUMBERS = ("person_id", "pkey_number")


@dataclass(frozen=True)
class Selection:
    """Which objects: tables/subtypes (None: every table the listener covers), a rule on
    their state, explicit (maybe partial) keys."""

    tname: str | None = None
    subtype: str | None = None
    where: Rule | None = None
    keys: tuple[ChangeKey, ...] | None = None
    bare: bool = False
    """Only ``tname`` itself, none of its subtypes (``--no-subtype``)."""

    def takes(self, table: LogicalTable) -> bool:
        """Whether ``table`` is among the selected tables/subtypes."""
        if self.tname not in (None, table.tname):
            return False
        return table.subtype is None if self.bare else self.subtype in (None, table.subtype)

    @property
    def whole(self) -> bool:
        """Every key of the selected tables: what the target holds beyond the topics' live
        keys is deleted (a rule selects live states only; a key list, only its keys)."""
        return self.where is None and self.keys is None

    def describe(self) -> str:
        parts = [f"{self.tname}{'/' + self.subtype if self.subtype else ''}" if self.tname else "every table"]
        if self.bare:
            parts[0] += " (no subtype)"
        if self.where is not None:
            parts.append(f"where {self.where.text}")
        if self.keys is not None:
            parts.append(f"{len(self.keys):,} key(s)")
        return ", ".join(parts)


def selection(
    tables: list[LogicalTable],
    tname: str | None = None,
    subtype: str | None = None,
    where: str | None = None,
    keys_file: Path | None = None,
    bare: bool = False,
) -> Selection:
    """A checked selection among ``tables`` (those the listener covers); ``bare``: only
    ``tname`` itself, none of its subtypes."""
    if subtype is not None and tname is None:
        raise SelectionError("--subtype needs --tname")
    if bare and (tname is None or subtype is not None):
        raise SelectionError("--no-subtype needs --tname and no --subtype")
    wanted = Selection(tname, subtype, bare=bare)
    if tname is not None and not any(wanted.takes(t) for t in tables):
        known = ", ".join(sorted({t.ref for t in tables})) or "none"
        what = f"{tname} without a subtype" if bare else table_ref(tname, subtype)
        raise SelectionError(f"{what} is not among the listener's tables ({known})")
    rule = None
    if where is not None:
        try:
            rule = parse_rule(where)
        except RuleSyntaxError as exc:
            raise SelectionError(f"--where: {exc}") from None
    keys = None
    if keys_file is not None:
        keys = tuple(read_keys(keys_file, [t for t in tables if wanted.takes(t)] if bare else tables, tname, subtype))
        if not keys:
            raise SelectionError(f"{keys_file}: no keys")
    return Selection(tname, subtype, rule, keys, bare)


def read_keys(
    path: Path, tables: list[LogicalTable], tname: str | None = None, subtype: str | None = None
) -> Iterator[ChangeKey]:
    """The keys of a CSV or JSON Lines file, each checked against the listener's tables."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SelectionError(f"{path}: cannot read it: {exc}") from None
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    rows = _json_lines(path, text) if path.suffix in (".jsonl", ".ndjson", ".json") or first.startswith("{") else (
        _csv_rows(path, text))  # fmt: skip
    for line, row in rows:
        yield _key(f"{path}:{line}", row, tables, tname, subtype)


def _json_lines(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SelectionError(f"{path}:{number}: not JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(row, dict):
            raise SelectionError(f"{path}:{number}: a key is a JSON object, not {type(row).__name__}")
        yield number, row


def _csv_rows(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    reader = csv.reader(text.splitlines())
    header: list[str] | None = None
    for number, cells in enumerate(reader, 1):
        if not any(c.strip() for c in cells):
            continue
        if header is None:
            header = [c.strip() for c in cells]
            unknown = [c for c in header if c not in NAMES]
            if unknown:
                raise SelectionError(
                    f"{path}:{number}: unknown column {unknown[0]!r} in the header (key fields: {', '.join(NAMES)})"
                )
            continue
        if len(cells) != len(header):
            raise SelectionError(f"{path}:{number}: {len(cells)} cell(s), the header has {len(header)}")
        yield number, {h: (c.strip() or None) for h, c in zip(header, cells, strict=True)}


def _key(
    where: str, row: dict[str, Any], tables: list[LogicalTable], tname: str | None, subtype: str | None
) -> ChangeKey:
    unknown = [k for k in row if k not in NAMES]
    if unknown:
        raise SelectionError(f"{where}: unknown field {unknown[0]!r} (key fields: {', '.join(NAMES)})")
    values: dict[str, Any] = {}
    for name in NAMES:
        value = row.get(name)
        if value is None:
            continue
        if name in NUMBERS:
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise SelectionError(f"{where}: {name} {value!r} is not an integer")
            try:
                value = int(value)
            except ValueError:
                raise SelectionError(f"{where}: {name} {value!r} is not an integer") from None
        elif not isinstance(value, str):
            raise SelectionError(f"{where}: {name} {value!r} is not text")
        values[name] = value
    only = {t.tname for t in tables}
    key_tname = values.get("tname", tname or (next(iter(only)) if len(only) == 1 else None))
    key_subtype = values.get("subtype", subtype)
    if key_tname is None:
        raise SelectionError(f"{where}: no tname (give one per key, or --tname)")
    if (tname is not None and key_tname != tname) or (subtype is not None and key_subtype != subtype):
        raise SelectionError(f"{where}: {key_tname} is outside the selected {tname}{'/' + subtype if subtype else ''}")
    if not any(t.tname == key_tname and key_subtype in (None, t.subtype) for t in tables):
        known = ", ".join(sorted({t.ref for t in tables})) or "none"
        what = table_ref(key_tname, key_subtype)
        raise SelectionError(f"{where}: {what} is not among the listener's tables ({known})")
    if not any(f in values for f in KEY_FIELDS):
        raise SelectionError(f"{where}: names no key field ({', '.join(KEY_FIELDS)}); to select a table use --tname")
    return ChangeKey(key_tname, key_subtype, *(values.get(f) for f in KEY_FIELDS))
