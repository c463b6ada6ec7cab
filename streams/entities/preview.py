"""``mcq map preview LISTENER KEY``: what a listener's target would be given for one key,
computed from the logical topics as they are now (for an entity, assembled from its
member tables' topics, whether or not ``mcq entities run`` is running), seen through the
listener's view (its rules and column allow-lists) and rendered by its adapter (a
webhook's or file's payload template)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from consumers.adapter import make_adapter
from consumers.exceptions import ChangeRejected
from consumers.projection import StateStore
from consumers.runtime.view import ListenerView
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings
from mcq.errors import McqError
from mcq.refs import KEY_FIELDS
from mcq.registry.model import LogicalTable, Registry
from streams.entities.store import EntityStore


class PreviewError(McqError):
    """The listener, table or key asked for cannot be previewed (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Preview:
    table: LogicalTable
    key: ChangeKey
    row: dict[str, str | None] | None
    """The key's state (None: no such key)."""
    written: str | None
    """What the target would be given; None when the key is not in the listener's view."""
    why: str


def parse_key(table: LogicalTable, pairs: tuple[str, ...]) -> ChangeKey:
    """``person_id=5 pkey_string=ola`` as a key of ``table``."""
    fields: dict[str, str | int] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in KEY_FIELDS:
            raise PreviewError(f"key {pair!r}: give key fields as FIELD=VALUE, FIELD one of {', '.join(KEY_FIELDS)}")
        try:
            fields[name] = int(value) if name in ("person_id", "pkey_number") else value
        except ValueError:
            raise PreviewError(f"key {pair!r}: {name} is a number") from None
    if not fields:
        raise PreviewError("no key given: FIELD=VALUE, e.g. pkey_number=17")
    return ChangeKey(table.tname, table.subtype, **fields)  # type: ignore[arg-type]


def choose_table(registry: Registry, listener: str, tname: str | None, pairs: tuple[str, ...] = ()) -> LogicalTable:
    """The table of the listener's that ``tname`` names; without it, the only one, or the
    only one keyed by exactly the key fields of ``pairs``."""
    if registry.listener(listener) is None:
        known = ", ".join(x.name for x in registry.listeners) or "none"
        raise PreviewError(f"no listener named {listener!r} in the registry (known: {known})")
    tables = registry.tables_of(listener)
    if tname is not None:
        tables = [t for t in tables if t.tname == tname]
    elif len(tables) > 1 and pairs:
        given = {pair.partition("=")[0] for pair in pairs}
        keyed = [t for t in tables if registry.key_fields(t) == given]
        tables = keyed if len(keyed) == 1 else tables
    if len(tables) != 1:
        names = ", ".join(t.ref for t in registry.tables_of(listener)) or "none"
        raise PreviewError(f"{listener} is interested in {names}: name one with --tname")
    return tables[0]


def preview(
    settings: Settings, registry: Registry, listener: str, pairs: tuple[str, ...], tname: str | None
) -> Preview:
    table = choose_table(registry, listener, tname, pairs)
    key = parse_key(table, pairs)
    row = _state(settings, registry, table, key)
    if row is None:
        return Preview(table, key, None, None, f"{key} does not exist (in the topics as they are now)")
    change = Change(key, "INSERT", Position(0, 0), datetime.now(UTC), table.tname, after=row, origin="preview")
    view = ListenerView(registry, listener)
    seen, _ = view.see(change, present=False)
    if seen is None:
        rules = "; ".join(i.rule for i in view.interests_for(table.tname, table.subtype) if i.rule)
        return Preview(table, key, row, None, f"{key} is not in {listener}'s view (rule: {rules})")
    spec = registry.listener(listener)
    assert spec is not None
    adapter = make_adapter(spec, settings)
    adapter.bind(registry)
    try:
        return Preview(table, key, row, adapter.preview(seen), f"{key} is in {listener}'s view")
    except ChangeRejected as exc:
        return Preview(table, key, row, None, f"{key} would be dead-lettered: {exc}")


def _state(settings: Settings, registry: Registry, table: LogicalTable, key: ChangeKey) -> dict[str, str | None] | None:
    if table.entity is not None:
        store = EntityStore(settings, registry, table, None)
        try:
            store.catch_up(timeout_s=300.0)
            doc = store.document(ChangeKey(*store.root_fields(key)).text())
            return None if doc is None else store.flat(doc[0])
        finally:
            store.abandon()
    plain = StateStore(settings, registry, [table.ref])
    try:
        plain.catch_up(timeout_s=300.0)
        for found, row, _ in plain.entries(
            table.ref, **{f: v for f in KEY_FIELDS if (v := getattr(key, f)) is not None}
        ):
            if found == key:
                return row
        return None
    finally:
        plain.close()
