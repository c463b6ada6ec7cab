"""Entities: a logical table computed from others, as a root row with its related rows.

An entity is declared as a logical table with an ``entity:`` block instead of ``feeds:``
(AQ's object payloads, midPoint's and Grouper's entities). Its key is its root table's
key; its related tables hang from the root (or from another related table, ``via``)
by *joins*, each mapping fields of the joined table to fields of the table it hangs
from. A field is a key field (``person_id``, ``pkey_string``, ``pkey_number``,
``aux_string``) or a captured column::

    - tname: ORDER_VIEW
      entity:
        root: ORDERS
        joins:
          - {name: customer, table: CUSTOMERS, kind: many-to-one, match: {pkey_number: customer_id}}
          - {name: items, table: ITEMS, kind: one-to-many, match: {order_id: pkey_number}}

Which side must be a key follows from the kind: a *many-to-one* join names all of the
joined table's key fields (each order has one customer); a *one-to-many* join names all
of the key fields of the table it hangs from (each item has one order); a *one-to-one*
does both. A listener sees an entity as one row: the root's columns by name, a
to-one join's columns as ``customer.country`` (chains as ``owner.status.code``), and a
to-many join's rows as one JSON array under its name (``items``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from mcq.refs import KEY_FIELDS, parse_ref

if TYPE_CHECKING:
    from mcq.registry.model import LogicalTable, Registry

Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=63)]
TableRef = Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)?$")]
JoinKind = Literal["one-to-one", "one-to-many", "many-to-one"]
Problem = tuple[tuple[str | int, ...], str]

TO_ONE: frozenset[str] = frozenset({"one-to-one", "many-to-one"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Join(_Model):
    """A related table: which of its rows belong to the row it hangs from."""

    name: Identifier
    """What the entity calls it: ``customer`` (its fields read as ``customer.country``)."""
    table: TableRef
    """The joined logical table, ``TNAME`` or ``TNAME/Subtype``."""
    kind: JoinKind
    match: dict[Identifier, Identifier] = Field(min_length=1)
    """``{field of the joined table: field of the table it hangs from}``; all must be equal.
    (Not ``on``: YAML reads a bare ``on`` as true.)"""
    via: Identifier | None = None
    """The join it hangs from (default: the root)."""
    columns: tuple[Identifier, ...] | None = None
    """Which of the joined table's columns the entity carries (default: all captured)."""

    @property
    def to_one(self) -> bool:
        return self.kind in TO_ONE


class Entity(_Model):
    """A root logical table and the joins that make one entity of each of its rows."""

    root: TableRef
    joins: tuple[Join, ...] = ()

    def join(self, name: str) -> Join | None:
        return next((j for j in self.joins if j.name == name), None)

    def children(self, parent: str | None) -> list[Join]:
        """The joins that hang from ``parent`` (a join's name; None: the root)."""
        return [j for j in self.joins if j.via == parent]

    def members(self) -> list[str]:
        """Every logical table an entity is made of (refs), the root first."""
        out = [self.root]
        out += [j.table for j in self.joins if j.table not in out]
        return out

    def path(self, join: Join) -> list[Join]:
        """The joins from the root down to ``join`` (it last); validated acyclic."""
        chain = [join]
        while chain[-1].via is not None:
            up = self.join(chain[-1].via)
            if up is None or up in chain:
                break
            chain.append(up)
        return chain[::-1]

    def many_names(self) -> list[str]:
        """The flattened names that hold a to-many join's rows as a JSON array."""
        out = []
        for join in self.joins:
            path = self.path(join)
            if not join.to_one and all(j.to_one for j in path[:-1]):
                out.append(".".join(j.name for j in path))
        return out


def key_fields(table: LogicalTable) -> frozenset[str]:
    """The key fields a captured table's rows carry (the union of its feeds')."""
    return frozenset(k for f in table.feeds for k in f.keys)


def field_value(key: tuple[Any, ...], row: Mapping[str, str | None], field: str) -> str | None:
    """A join field of a row as text: a key field from its key (tname, subtype, then the
    four key fields in order), else its column -- also a column named like a key field its
    table's key does not use (an account's ``person_id`` column, keyed by ``pkey_string``)."""
    if field in KEY_FIELDS:
        value = key[2 + KEY_FIELDS.index(field)]
        if value is not None:
            return str(value)
    return row.get(field)


def entity_columns(registry: Registry, table: LogicalTable) -> frozenset[str]:
    """The names a listener sees of an entity's row (what rules and allow-lists may name)."""
    entity = table.entity
    assert entity is not None
    root = registry.table(*parse_ref(entity.root))
    out = set(root.columns()) if root is not None else set()

    def walk(parent: str | None, prefix: str) -> None:
        for join in entity.children(parent):
            name = f"{prefix}{join.name}"
            if not join.to_one:
                out.add(name)  # its rows, as one JSON array
                continue
            joined = registry.table(*parse_ref(join.table))
            columns = join.columns if join.columns is not None else (joined.columns() if joined else ())
            out.update(f"{name}.{c}" for c in columns)
            walk(join.name, f"{name}.")

    walk(None, "")
    return frozenset(out)


def to_one_column(registry: Registry, table: LogicalTable, name: str) -> tuple[LogicalTable, str] | None:
    """The member table and column a flattened to-one name reads (``customer.country``)."""
    entity = table.entity
    if entity is None or "." not in name:
        return None
    *path, column = name.split(".")
    parent: str | None = None
    join: Join | None = None
    for step in path:
        join = next((j for j in entity.children(parent) if j.name == step and j.to_one), None)
        if join is None:
            return None
        parent = join.name
    joined = registry.table(*parse_ref(join.table)) if join is not None else None
    return (joined, column) if joined is not None else None


def unflatten(row: Mapping[str, str | None], many: list[str]) -> dict[str, Any]:
    """An entity row back into one nested document: ``customer.country`` under
    ``customer``, a to-many name's JSON array as a list (for payload templates)."""
    doc: dict[str, Any] = {}
    for name, value in row.items():
        *path, last = name.split(".")
        node = doc
        for step in path:
            node = node.setdefault(step, {})
            if not isinstance(node, dict):
                break
        else:
            node[last] = json.loads(value) if name in many and value is not None else value
    return doc


def entity_problems(registry: Registry) -> list[Problem]:
    """Every entity's definition against the tables it names: each join's fields exist and
    are keys where its kind needs them, no join hangs from itself (a cycle)."""
    out: list[Problem] = []
    for ti, table in enumerate(registry.tables):
        entity = table.entity
        if entity is None:
            continue
        here: tuple[str | int, ...] = ("tables", ti, "entity")
        if table.feeds:
            out.append((("tables", ti, "feeds"), "a table is captured (feeds) or an entity, not both"))
        if table.subtype is not None:
            out.append((("tables", ti, "subtype"), "an entity is a table of its own: it has no subtype"))
        root = _member(registry, entity.root, (*here, "root"), out)
        out += _join_problems(registry, table, entity, root, here)
    return out


def _member(registry: Registry, ref: str, here: tuple[str | int, ...], out: list[Problem]) -> LogicalTable | None:
    table = registry.table(*parse_ref(ref))
    if table is None:
        out.append((here, f"unknown table {ref}; define it under tables:"))
    elif table.entity is not None:
        out.append((here, f"{ref} is an entity: an entity is made of captured tables"))
    elif not table.feeds:
        out.append((here, f"{ref} has no feeds: its key fields are unknown, so no join on it can be checked"))
    else:
        return table
    return None


def _fields_of(table: LogicalTable) -> set[str]:
    return set(key_fields(table)) | set(table.columns())


def _join_problems(
    registry: Registry, table: LogicalTable, entity: Entity, root: LogicalTable | None, here: tuple[str | int, ...]
) -> list[Problem]:
    out: list[Problem] = []
    names: dict[str, int] = {}
    root_columns = set(root.columns()) if root is not None else set()
    for ji, join in enumerate(entity.joins):
        at = (*here, "joins", ji)
        if join.name in names:
            out.append(((*at, "name"), f"duplicate join {join.name!r} (first defined as join {names[join.name] + 1})"))
            continue
        names[join.name] = ji
        if join.via is None and join.name in root_columns:
            out.append(((*at, "name"), f"join {join.name!r} has the name of a column of {entity.root}"))
    for ji, join in enumerate(entity.joins):
        at = (*here, "joins", ji)
        cycle = _cycle(entity, join)
        if cycle:
            out.append(((*at, "via"), f"cyclic join: {' -> '.join(cycle)}"))
            continue
        if join.via is not None and entity.join(join.via) is None:
            out.append(((*at, "via"), f"via {join.via!r} names no join of {table.tname}"))
            continue
        joined = _member(registry, join.table, (*at, "table"), out)
        parent_ref = entity.root if join.via is None else entity.join(join.via).table  # type: ignore[union-attr]
        parent = registry.table(*parse_ref(parent_ref))
        if joined is None or parent is None or parent.entity is not None or not parent.feeds:
            continue
        out += _on_problems(join, joined, parent, at)
        for column in join.columns or ():
            if column not in joined.columns():
                out.append(((*at, "columns"), f"column {column!r} is not captured from {join.table}"))
    return out


def _cycle(entity: Entity, join: Join) -> list[str]:
    """The names around a cycle ``join`` is on (empty if none)."""
    seen = [join.name]
    step = join
    while step.via is not None:
        up = entity.join(step.via)
        if up is None:
            return []
        if up.name in seen:
            return [*seen[seen.index(up.name) :], up.name] if up.name == join.name else []
        seen.append(up.name)
        step = up
    return []


def _on_problems(join: Join, joined: LogicalTable, parent: LogicalTable, at: tuple[str | int, ...]) -> list[Problem]:
    out: list[Problem] = []
    for mine, theirs in join.match.items():
        if mine not in _fields_of(joined):
            out.append(((*at, "match", mine), f"{mine!r} is neither a key field nor a column of {join.table}"))
        if theirs not in _fields_of(parent):
            out.append(((*at, "match", mine), f"{theirs!r} is neither a key field nor a column of {parent.ref}"))
    if out:
        return out
    joined_keys, parent_keys = key_fields(joined), key_fields(parent)
    if join.kind in TO_ONE and set(join.match) != joined_keys:
        out.append(((*at, "match"), (
            f"a {join.kind} join must name every key field of {join.table} ({', '.join(sorted(joined_keys))}) on "
            f"its side, so that one row of it belongs to each row of {parent.ref}; it names "
            f"{', '.join(sorted(join.match))}"
        )))  # fmt: skip
    if join.kind in ("one-to-one", "one-to-many") and set(join.match.values()) != parent_keys:
        out.append(((*at, "match"), (
            f"a {join.kind} join must name every key field of {parent.ref} ({', '.join(sorted(parent_keys))}) on "
            f"its side, so that each row of {join.table} belongs to one row of {parent.ref}; it names "
            f"{', '.join(sorted(join.match.values()))}"
        )))  # fmt: skip
    return out


def unwatched_entity_fields(
    registry: Registry, table: LogicalTable, fields: frozenset[str]
) -> list[tuple[str, str, str]]:
    """(field, source table, column) of each to-one field a rule reads whose feed does not
    watch it: an update of it alone is housekeeping and never re-evaluates the entity."""
    out = []
    for field in sorted(fields):
        name = field.split(".", 1)[1] if field.startswith(("before.", "after.")) else field
        found = to_one_column(registry, table, name)
        if found is None:
            continue
        member, column = found
        for feed in member.feeds:
            if column in feed.columns and column not in feed.watched and column not in feed.keys.values():
                out.append((field, feed.table, column))
    return out
