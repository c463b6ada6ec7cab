"""A refresh request carries state: the MCQ paper's manual refresh (Figure 5's
``mcq_log_update`` for each transfer student) resolved to the current last state of
every key it names.

A request names a TNAME, maybe a subtype and some key fields (a partial key names every
key that has those values: ``PERSON`` + ``person_id`` is every aspect of one person).
Its answer, per key this listener covers:

* a key with a live state in the compacted logical topics -> that state, with the
  source position of the change it came from (re-applied even when the listener applied
  that very change: a refresh repairs a target that lost it);
* a key named whole (every key field of the table given) or at the target, with no live
  state any more -> a DELETE, delivered whether or not the listener thinks the key is
  at its target (a refresh of a key that no longer exists is a delete).

The state is read from the compacted logical topics (a :class:`StateStore`, made on the
first request and read to the end before each batch of requests), so a listener needs
no access to the source. A request the normaliser wrote before the state it refers to
reached the logical topics would see the previous state; the change itself follows in
the real-time lane and the target still ends at the last state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from consumers.projection import IndexedState
from consumers.runtime.view import ListenerView
from mcq.change import Change, ChangeKey
from mcq.refs import KEY_FIELDS, parse_ref
from mcq.registry.model import LogicalTable, Registry

StoreFactory = Callable[[list[str]], IndexedState]


class RefreshResolver:
    def __init__(self, registry: Registry, view: ListenerView, open_store: StoreFactory) -> None:
        self.registry = registry
        self.view = view
        self._open_store = open_store
        self._store: IndexedState | None = None
        self._refs: list[str] = []

    def refs(self, request: ChangeKey) -> list[str]:
        """The tables/subtypes a request names that this listener covers."""
        return [
            t.ref
            for t in self.registry.tables
            if t.tname == request.tname
            and (request.subtype is None or t.subtype == request.subtype)
            and self.view.covers(ChangeKey(t.tname, t.subtype))
        ]

    def whole_tables(self, request: ChangeKey) -> list[LogicalTable]:
        """The tables this listener covers that a request refreshes whole: it names no key
        field (only the TNAME, maybe a subtype), so every key of them the target holds is
        stated again or deleted -- what repairs deletes the listener may have missed."""
        if any(getattr(request, f) is not None for f in KEY_FIELDS):
            return []
        refs = set(self.refs(request))
        return [t for t in self.registry.tables if t.ref in refs]

    def prepare(self, requests: list[Change]) -> None:
        """Read the state of what the requests name, to the end of its topics as of now."""
        wanted = sorted({ref for r in requests for ref in self.refs(r.key)})
        if not wanted:
            return
        if self._store is None or not set(wanted) <= set(self._refs):
            self.close()
            self._refs = sorted(set(self._refs) | set(wanted))
            self._store = self._open_store(self._refs)
        catch_up = getattr(self._store, "catch_up", None)
        if catch_up is not None:
            catch_up()

    def resolve(self, request: Change, present: Iterable[ChangeKey]) -> list[Change]:
        """The changes a request stands for; ``present`` are the keys at the target."""
        out: list[Change] = []
        fields = {f: v for f in KEY_FIELDS if (v := getattr(request.key, f)) is not None}
        live: set[ChangeKey] = set()
        for ref in self.refs(request.key):
            if self._store is None:
                break
            for key, row, position in self._store.entries(ref, **fields):
                live.add(key)
                out.append(
                    dataclasses.replace(
                        request, key=key, change_type="UPDATE", position=position or request.position,
                        after=dict(row), before=None, cause="refresh",
                    )
                )  # fmt: skip
        for ref in self.refs(request.key):  # a key named whole that has no live state: gone
            whole = self._whole_key(ref, request.key)
            if whole is not None and whole not in live:
                live.add(whole)
                gone = dataclasses.replace(request, key=whole, change_type="DELETE", after=None, cause="refresh")
                out.append(dataclasses.replace(gone, before=None))
        for key in present:
            if key not in live and key.within(request.key) and self.view.covers(key):
                gone = dataclasses.replace(request, key=key, change_type="DELETE", after=None, cause="refresh")
                out.append(dataclasses.replace(gone, before=None))
        return out

    def _whole_key(self, ref: str, request: ChangeKey) -> ChangeKey | None:
        """The key of ``ref`` a request names whole (every key field its feeds map, or its
        entity's root's), if it does."""
        tname, subtype = parse_ref(ref)
        table = self.registry.table(tname, subtype)
        fields = self.registry.key_fields(table) if table is not None else frozenset()
        if not fields:
            return None
        if any(getattr(request, f) is None for f in fields) or any(
            getattr(request, f) is not None for f in KEY_FIELDS if f not in fields
        ):
            return None
        return dataclasses.replace(request, subtype=subtype)

    def close(self) -> None:
        if self._store is not None:
            close = getattr(self._store, "close", None)
            if close is not None:
                close()
            self._store = None
