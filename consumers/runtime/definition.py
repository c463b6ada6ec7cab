"""What a running listener is, by the registry: its definition, its view of the logical
tables and its refresh resolver, followed while it runs. A registry change (an interest
added, a rule changed) reaches a running listener without a restart; one it cannot take
is said once and the previous definition stays."""

from __future__ import annotations

import logging

from consumers.exceptions import ListenerConfigError
from consumers.projection import StateStore
from consumers.runtime.refresh import RefreshResolver
from consumers.runtime.view import ListenerView
from mcq.config import Settings
from mcq.registry.exceptions import RegistryStoreError
from mcq.registry.model import Listener, Registry
from mcq.registry.store import RegistryReader
from mcq.topics.listener import ListenerTopics, interest_topics

log = logging.getLogger(__name__)


class ListenerDefinition:
    """One listener's definition: from ``registry`` as given, else from the shared store
    (``registry_topic``), which :meth:`follow` reads for changes."""

    def __init__(
        self, settings: Settings, name: str, registry: Registry | None = None, registry_topic: str | None = None
    ) -> None:
        self.settings = settings
        self.name = name
        self._reader: RegistryReader | None = None
        if registry is None:  # the shared store: interests added later reach us
            self._reader = RegistryReader(settings, registry_topic)
            self._reader.catch_up()
            registry = self._reader.registry()
        self._take(registry, self.lookup(registry))

    def lookup(self, registry: Registry) -> Listener:
        listener = registry.listener(self.name)
        if listener is None:
            known = ", ".join(x.name for x in registry.listeners) or "none"
            raise ListenerConfigError(f"no listener named {self.name!r} in the registry (known: {known})")
        return listener

    def _take(self, registry: Registry, listener: Listener) -> None:
        self.registry, self.listener, self.delivery = registry, listener, listener.delivery
        self.view = ListenerView(registry, self.name)
        self.refresher = RefreshResolver(registry, self.view, self.open_store)

    def open_store(self, refs: list[str]) -> StateStore:
        return StateStore(self.settings, self.registry, refs)

    def realtime_topics(self, topics: ListenerTopics) -> list[str]:
        """The real-time lane's topics: its interests' logical topics and its retry topic."""
        return [*interest_topics(self.registry, topics), topics.retry]

    def follow(self) -> bool:
        """Take the registry's change if one came; True if a new definition was taken."""
        if self._reader is None or not self._reader.poll(0):
            return False
        try:
            registry = self._reader.registry()
            listener = self.lookup(registry)
        except (ListenerConfigError, ValueError, RegistryStoreError) as exc:
            log.warning(f"listener {self.name}: registry change not taken ({exc}); keeping the previous one")
            return False
        self.refresher.close()
        self._take(registry, listener)
        return True

    def close(self) -> None:
        if self._reader:
            self._reader.close()
