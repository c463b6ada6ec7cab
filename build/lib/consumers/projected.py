"""The base of adapters that write records assembled from state (LDAP entries, the MCQ
paper's Push_Person), not the change alone: their state store seen through the
listener's view, and what each object's last write already reflected."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from consumers import state_snapshot
from consumers.adapter import Adapter
from consumers.projection import StateStore, WrittenFrom, open_state
from consumers.runtime.view import ListenerView, ViewState
from mcq.config import Settings
from mcq.registry.model import Listener, Registry


class ProjectedAdapter(Adapter):
    """Subclasses name the logical tables they assemble from (``needs_state``) and have a
    ``state`` setting (``topics`` or ``source``)."""

    needs_state: ClassVar[tuple[str, ...]] = ()
    store: ViewState | None = None

    def __init__(self, listener: Listener, settings: Settings) -> None:
        super().__init__(listener, settings)
        self.written = WrittenFrom()
        self.skipped = 0
        """Writes left out because the object's last write already reflected the change."""

    def bind(self, registry: Registry) -> None:
        super().bind(registry)
        if self.store is not None:  # the rules and allow-lists of the new registry govern the records
            self.store.view = ListenerView(registry, self.listener.name)
        self.written.forget()  # written under another view: it says nothing any more

    def open_store(self) -> ViewState:
        if self.store is None:
            assert self.registry is not None, "bind(registry) first"
            # what the listener may see of it: its interests' rules and allow-lists govern the records
            state = open_state(self.mcq_settings, self.registry, self.needs_state, self.settings.state,
                               self.snapshot_path())  # fmt: skip
            self.store = ViewState(state, ListenerView(self.registry, self.listener.name))
        return self.store

    def started_from(self) -> str | None:
        inner = self.store.inner if self.store is not None else None
        return f"state store: {inner.restored}" if isinstance(inner, StateStore) else None

    def snapshot_path(self) -> Path | None:
        """Where this listener's state store is saved between runs (``state_dir``), if anywhere."""
        return state_snapshot.path_of(self.mcq_settings, self.listener.name, "store")

    def close_store(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
