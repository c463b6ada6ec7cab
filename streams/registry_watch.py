"""The running normaliser follows the registry store, as listeners do.

What it normalises is planned from the registry's sources and tables (which raw topics,
which captured columns, which of them are watched, how keys are built). A plan is fixed
once its Spark queries run, so when ``mcq registry apply`` changes any of that, the
normaliser stops its queries and starts them again on the new plan (the checkpoint
resumes each raw topic where it was). Without this, an update of a column just added
to a feed's ``watch`` would be dropped as housekeeping until someone restarted it.
Interests, listeners and provenance records change nothing here.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from mcq.config import Settings
from mcq.registry.exceptions import RegistryStoreInvalid
from mcq.registry.model import Registry
from mcq.registry.store import RegistryReader, definition_key, definitions

log = logging.getLogger(__name__)

_PLANNED = ("source/", "table/")


def planned_definitions(registry: Registry) -> dict[str, dict[str, Any]]:
    """The definitions a normaliser's plan is made of (comments left out)."""
    return {
        key: {k: v for k, v in value.items() if k != "comment"}
        for key, value in definitions(registry).items()
        if key.startswith(_PLANNED)
    }


@dataclass(frozen=True)
class PlanChange:
    """A registry whose sources or tables differ from the ones being normalised."""

    registry: Registry
    definitions: list[str]
    """The store keys that differ (``table/PERSON/Telephone``, ``source/campus``)."""
    since_ms: int
    """When the earliest of them was written to the store (Kafka timestamp, ms; now for
    one removed): a change captured after it is the new plan's to normalise."""


class RegistryWatch:
    """Reports a registry whose sources or tables differ from the ones being normalised.
    Its first read of the store is the registry the normaliser starts with (``registry``)."""

    def __init__(self, settings: Settings) -> None:
        self._reader = RegistryReader(settings)
        self._reader.catch_up()
        self.registry = self._reader.registry()
        self._refused = ""
        self._planned = planned_definitions(self.registry)

    def changed(self) -> PlanChange | None:
        """The new registry, once per change of what is planned; else None."""
        if not self._reader.poll(0):
            return None
        try:
            registry = self._reader.registry()
        except RegistryStoreInvalid as exc:
            if str(exc) != self._refused:
                self._refused = str(exc)
                log.warning("normalize: registry change not taken, keeping the running plan: %s", exc)
            return None
        self._refused = ""
        wanted = planned_definitions(registry)
        if wanted == self._planned:
            return None
        differ = sorted(k for k in wanted.keys() | self._planned.keys() if wanted.get(k) != self._planned.get(k))
        self._planned = wanted
        now = int(time.time() * 1000)
        return PlanChange(registry, differ, min(self._reader.stamps.get(k, now) for k in differ))

    def defined_at(self, registry: Registry) -> dict[str, int]:
        """When each table/subtype's definition was written to the store (ms): a raw row
        committed before it may lack a column the definition added to capture since."""
        return {t.ref: self._reader.stamps.get(definition_key(t), 0) for t in registry.tables}

    def close(self) -> None:
        self._reader.close()
