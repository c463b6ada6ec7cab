"""An entity's rows in memory, indexed by its joins both ways, and which entities a
member row's change touches (the fan-out).

For every join the index keeps, by the join's field values:

* ``down``: the joined table's rows (what an entity is assembled from: a customer's
  row for an order, an order's items);
* ``up``: the rows of the table it hangs from (who a changed row belongs to: the
  orders of a customer whose country changed).

A change of any member row marks every root it belongs to, through its old and its new
values (an item moved to another order touches both orders), as *dirty*: to be
assembled again and compared with what was written. Lookups go through these indexes,
never a scan: the work of one change is the number of entities it belongs to.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from consumers.projection import IndexedState, KeyTuple, Row
from mcq.change import ChangeKey, Position
from mcq.refs import parse_ref
from mcq.registry.entities import Entity, Join, field_value
from mcq.registry.model import LogicalTable, Registry

Values = str | tuple[str, ...]
"""A join's field values: the value itself for a join on one field (most), else a tuple."""
Texts = str | set[str]
"""The row texts an index holds for one value: the text itself while there is one (most
values: a customer's key, an order's key), a set from the second on."""


@dataclass
class Trigger:
    """The newest member change that made an entity dirty (what its record says it came from)."""

    position: Position | None = None
    entry_time: datetime | None = None
    txid: int | None = None
    source_table: str | None = None

    def newer(self, position: Position | None, entry_time: datetime | None, txid: int | None, table: str) -> None:
        if position is not None and (self.position is None or position > self.position):
            self.position, self.entry_time, self.txid, self.source_table = position, entry_time, txid, table


def digest(row: Row) -> bytes:
    """A short fingerprint of an entity row (what was written is remembered by it only)."""
    text = json.dumps(row, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).digest()


class EntityIndex(IndexedState):
    """The member rows of one entity table, its join indexes and its dirty roots."""

    def __init__(self, registry: Registry, table: LogicalTable) -> None:
        super().__init__()
        self._entity_setup(registry, table)

    def _entity_setup(self, registry: Registry, table: LogicalTable) -> None:
        assert table.entity is not None
        self.table = table
        self.entity: Entity = table.entity
        self.root = self.entity.root
        self._tables = {ref: registry.table(*parse_ref(ref)) for ref in self.entity.members()}
        self._parent_ref = {j.name: self.root if j.via is None else self._join(j.via).table for j in self.entity.joins}
        self._down: dict[str, dict[Values, Texts]] = {j.name: {} for j in self.entity.joins}
        self._up: dict[str, dict[Values, Texts]] = {j.name: {} for j in self.entity.joins}
        self._as_joined = defaultdict(list)  # ref -> joins whose joined table it is
        self._as_parent = defaultdict(list)  # ref -> joins that hang from it
        for j in self.entity.joins:
            self._as_joined[j.table].append(j)
            self._as_parent[self._parent_ref[j.name]].append(j)
        self.dirty: dict[str, tuple[KeyTuple, Trigger]] = {}
        """Root key text -> (root key fields, newest trigger) of every entity to look at again."""
        self.fanout_last = 0
        """How many entities the last change put dirty (the fan-out, measured)."""
        self._trigger: tuple[Position | None, datetime | None, int | None, str] | None = None

    def _join(self, name: str) -> Join:
        join = self.entity.join(name)
        assert join is not None
        return join

    def members(self) -> list[str]:
        return self.entity.members()

    # ------------------------------------------------------------------ keeping rows

    def put(self, ref: str, key: ChangeKey, row: Row | None, position: Position | None = None) -> None:
        # the rows and their positions as IndexedState keeps them, without its index by key
        # field (an entity is looked up through its joins' indexes only): a third less memory
        text = key.text()
        rows = self._rows[ref]
        old = rows.get(text)
        if position is not None:
            self._positions[text] = (position.last_commit_lsn, position.lsn)
        if row is None:
            rows.pop(text, None)
        else:
            rows[text] = (
                (key.tname, key.subtype, key.person_id, key.pkey_string, key.pkey_number, key.aux_string),
                row,
            )
        new = rows.get(text)
        before = len(self.dirty)
        for kt, r in [x for x in (old, new) if x is not None]:
            for join in self._as_joined.get(ref, ()):
                vals = _values(kt, r, join.match.keys())
                if vals is not None:
                    self._mark_up(join, _texts(self._up[join.name], vals))
        for join in self._as_joined.get(ref, ()):
            self._reindex(self._down[join.name], text, old, new, list(join.match.keys()))
        for join in self._as_parent.get(ref, ()):
            self._reindex(self._up[join.name], text, old, new, list(join.match.values()))
        if ref == self.root:
            entry = new if new is not None else old
            if entry is not None:
                self._dirty(text, entry[0])
        self.fanout_last = len(self.dirty) - before

    def _reindex(
        self, index: dict[Values, Texts], text: str, old: tuple[KeyTuple, Row] | None,
        new: tuple[KeyTuple, Row] | None, fields: list[str],
    ) -> None:  # fmt: skip
        if old is not None:
            vals = _values(old[0], old[1], fields)
            if vals is not None:
                _discard(index, vals, text)
        if new is not None:
            vals = _values(new[0], new[1], fields)
            if vals is not None:
                _add(index, vals, text)

    def _mark_up(self, join: Join, parents: Any) -> None:
        """``parents`` (row texts of the table ``join`` hangs from) changed what they hold:
        their roots are dirty."""
        parent_ref = self._parent_ref[join.name]
        rows = self._rows[parent_ref]
        for text in list(parents):
            entry = rows.get(text)
            if entry is None:
                continue
            if join.via is None:
                self._dirty(text, entry[0])
            else:
                self._mark_parents_of(self._join(join.via), entry[0], entry[1])

    def _mark_parents_of(self, join: Join, kt: KeyTuple, row: Row) -> None:
        """One of the children of a row of ``join``'s table changed: the rows it hangs from
        are dirty (their roots, up the chain)."""
        vals = _values(kt, row, join.match.keys())
        if vals is not None:
            self._mark_up(join, _texts(self._up[join.name], vals))

    def _dirty(self, text: str, fields: KeyTuple) -> None:
        found = self.dirty.get(text)
        if found is None:
            found = self.dirty[text] = (fields, Trigger())
        if self._trigger is not None:
            found[1].newer(*self._trigger)

    def rebuild_indexes(self) -> None:
        """The join indexes again from the rows (after a snapshot restored the rows)."""
        for join in self.entity.joins:
            down, up = self._down[join.name], self._up[join.name]
            down.clear()
            up.clear()
            for text, (kt, row) in self._rows[join.table].items():
                vals = _values(kt, row, list(join.match.keys()))
                if vals is not None:
                    _add(down, vals, text)
            for text, (kt, row) in self._rows[self._parent_ref[join.name]].items():
                vals = _values(kt, row, list(join.match.values()))
                if vals is not None:
                    _add(up, vals, text)

    def mark_all(self) -> None:
        """Every live root is dirty (a start, a rebuild)."""
        for text, (kt, _) in self._rows[self.root].items():
            self._dirty(text, kt)

    # ------------------------------------------------------------------ assembling

    def root_fields(self, key: ChangeKey) -> KeyTuple:
        """The root key fields of an entity's key."""
        tname, subtype = parse_ref(self.root)
        return (tname, subtype, key.person_id, key.pkey_string, key.pkey_number, key.aux_string)

    def key_of(self, fields: KeyTuple) -> ChangeKey:
        """The entity's key: its root's key fields under the entity's TNAME."""
        return ChangeKey(self.table.tname, None, *fields[2:])

    def document(self, text: str) -> tuple[dict[str, Any], Position | None] | None:
        """The nested entity of a root key (None: no such root row), and the newest source
        position among the rows it is made of."""
        entry = self._rows[self.root].get(text)
        if entry is None:
            return None
        newest: list[Position | None] = [None]
        doc = self._assemble(None, text, entry[0], entry[1], newest)
        return doc, newest[0]

    def _assemble(
        self, parent: str | None, text: str, kt: KeyTuple, row: Row, newest: list[Position | None]
    ) -> dict[str, Any]:
        at = self._positions.get(text)
        if at is not None and (newest[0] is None or Position(*at) > newest[0]):
            newest[0] = Position(*at)
        doc: dict[str, Any] = dict(row)
        for join in self.entity.children(parent):
            vals = _values(kt, row, list(join.match.values()))
            rows = self._rows[join.table]
            texts = sorted(t for t in _texts(self._down[join.name], vals) if t in rows) if vals is not None else []
            children = []
            for t in texts:
                ckt, crow = rows[t]
                if join.columns is not None:
                    crow = {c: crow.get(c) for c in join.columns}
                children.append(self._assemble(join.name, t, ckt, crow, newest))
            doc[join.name] = (children[0] if children else None) if join.to_one else children
        return doc

    def flat(self, doc: dict[str, Any]) -> Row:
        """The entity as one row: to-one joins' columns as ``customer.country``, a to-many
        join's rows as one JSON array under its name."""
        out: Row = {}

        def walk(parent: str | None, node: dict[str, Any], prefix: str) -> None:
            joins = {j.name: j for j in self.entity.children(parent)}
            for name, value in node.items():
                join = joins.get(name)
                if join is None:
                    out[f"{prefix}{name}"] = value
                elif join.to_one:
                    if value is not None:
                        walk(join.name, value, f"{prefix}{name}.")
                else:
                    out[f"{prefix}{name}"] = json.dumps(value, sort_keys=True, separators=(",", ":"))

        walk(None, doc, "")
        return out

    def roots(self) -> list[str]:
        return list(self._rows[self.root])

    def size(self) -> int:
        """Member rows held."""
        return sum(len(self._rows[ref]) for ref in self.members())


def _values(kt: KeyTuple, row: Row, fields: Any) -> Values | None:
    """The join field values of a row as text (None: a NULL among them, which joins nothing)."""
    out = []
    for f in fields:
        v = field_value(kt, row, f)
        if v is None:
            return None
        out.append(v)
    return out[0] if len(out) == 1 else tuple(out)


def _texts(index: dict[Values, Texts], vals: Values) -> tuple[str, ...] | set[str]:
    found = index.get(vals)
    if found is None:
        return ()
    return (found,) if isinstance(found, str) else found


def _add(index: dict[Values, Texts], vals: Values, text: str) -> None:
    found = index.get(vals)
    if found is None:
        index[vals] = text
    elif isinstance(found, str):
        if found != text:
            index[vals] = {found, text}
    else:
        found.add(text)


def _discard(index: dict[Values, Texts], vals: Values, text: str) -> None:
    found = index.get(vals)
    if found is None:
        return
    if isinstance(found, str):
        if found == text:
            del index[vals]
        return
    found.discard(text)
    if len(found) == 1:
        index[vals] = next(iter(found))
    elif not found:
        del index[vals]
