"""The interface a target implements, and how adapters are found by name.

The contract (the runtime relies on it):

* ``apply_batch`` is given changes in the order of their partition; a key's changes are
  never reordered. It returns one outcome per change: ``None`` when the target accepted
  it, else the :class:`~consumers.exceptions.AdapterError` that says what to do.
* Applying must be **idempotent**: set the state the change carries, never increment. A
  change may be delivered again (after a crash, a rebalance, a requeue), and a replay of
  the topic from the beginning must rebuild the target.
* :class:`~consumers.exceptions.TargetUnavailable` means "the target is down": the runtime
  retries the same change until the target answers, and never parks or dead-letters it.
  :class:`~consumers.exceptions.ChangeFailed` means "this change failed, may succeed
  later"; :class:`~consumers.exceptions.ChangeRejected` "never".
* Where the target can, it should refuse a change older than the state it holds (each
  change carries its source :class:`~mcq.change.Position`); the runtime already skips
  changes older than what this listener applied, but a target-side guard also covers
  two instances racing on one key.

Adapters register under the ``mcq.adapters`` entry point group: a distribution of your
own declares ``[project.entry-points."mcq.adapters"] mykind = "mypkg.adapter:MyAdapter"``
and a listener with ``adapter: {type: mykind, settings: {...}}`` uses it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from consumers.exceptions import AdapterError, ListenerConfigError, TargetUnavailable
from mcq.change import Change, ChangeKey
from mcq.config import Settings
from mcq.registry.model import Listener, Registry
from mcq.targets import TargetError

if TYPE_CHECKING:
    from consumers.runtime.view import ListenerView

ENTRY_POINT_GROUP = "mcq.adapters"


class AdapterSettings(BaseModel):
    """Base of an adapter's settings model (the listener's ``adapter.settings``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Adapter(ABC):
    """A target system, as a listener applies changes to it."""

    kind: ClassVar[str]
    settings_model: ClassVar[type[AdapterSettings]] = AdapterSettings

    def __init__(self, listener: Listener, settings: Settings) -> None:
        self.listener = listener
        self.mcq_settings = settings
        try:
            self.settings: Any = self.settings_model.model_validate(listener.adapter.settings)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '-'}: {e['msg']}" for e in exc.errors())
            raise ListenerConfigError(
                f"listener {listener.name}: adapter {listener.adapter.type}: bad settings: {problems}"
            ) from None

    registry: Registry | None = None

    def bind(self, registry: Registry) -> None:
        """The runtime hands over the registry (again after each change of it), before open()."""
        self.registry = registry

    def open(self) -> None:  # noqa: B027 - optional hook
        """Connect; raise TargetUnavailable when the target does not answer."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; called once, also after a failure."""

    def started_from(self) -> str | None:
        """What the adapter started from, said once after open() (a state store restored
        from a snapshot, or why it is read whole); None: nothing to say."""
        return None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a base of adapters without a kind of its own (ProjectedAdapter) need not apply
        if "kind" in vars(cls) and cls.apply is Adapter.apply and cls.apply_batch is Adapter.apply_batch:
            raise TypeError(f"adapter {cls.__name__} must implement apply() or apply_batch() (or both)")

    def apply(self, change: Change) -> None:
        """Apply one change idempotently, or raise an AdapterError. Implement this, or
        ``apply_batch`` for targets that take a batch in one round trip."""
        outcome = self.apply_batch([change])[0]
        if outcome is not None:
            raise outcome

    def apply_batch(self, changes: Sequence[Change]) -> list[AdapterError | None]:
        """Apply changes in order; one outcome per change. Override to batch round trips.

        Once the target is unavailable, the rest of the batch is not tried."""
        outcomes: list[AdapterError | None] = []
        for i, change in enumerate(changes):
            try:
                self.apply(change)
                outcomes.append(None)
            except TargetUnavailable as exc:
                outcomes.extend([exc] * (len(changes) - i))
                break
            except AdapterError as exc:
                outcomes.append(exc)
        return outcomes

    def ready(self) -> bool:
        """Whether the target answers (readiness probe); default: assume so."""
        return True

    def preview(self, change: Change) -> str:
        """What this adapter would write for ``change``, as text (``mcq map preview``);
        default: the change as JSON."""
        return json.dumps(change.as_json(), indent=2, sort_keys=True, ensure_ascii=False)


class ReadBack(ABC):
    """An adapter whose target can be read back and compared with the last state its
    listener should hold (``mcq reconcile``). A target is a set of *objects* -- a row per
    key, an LDAP entry per person -- each with a content that compares equal when the
    target holds what it should (only what the adapter manages: attributes set by hand
    elsewhere are not its business)."""

    def state_refs(self) -> tuple[str, ...] | None:
        """The tables/subtypes the objects are assembled from; None: the listener's
        interests (an object per key)."""
        return None

    def unreadable(self) -> str | None:
        """Why this target cannot be read back as configured (a setting it needs); None: it can."""
        return None

    def settled(self, obj: str) -> bool:
        """Whether an object the target holds that nothing should hold is as it should be
        all the same: a row the target keeps for a key that is gone (a soft delete, such as
        a vendor's ``Former-`` person). Asked after :meth:`read_back`."""
        return False

    @abstractmethod
    def expected(self, view: ListenerView, states: Iterable[Change]) -> dict[str, Any]:
        """Object -> content the target should hold, from the live state of every key of
        the tables (each as an UPDATE carrying its after-state) seen through ``view``."""

    @abstractmethod
    def read_back(self) -> dict[str, Any]:
        """Object -> content of every object of this listener the target holds now."""

    @abstractmethod
    def keys_of(self, obj: str) -> list[ChangeKey]:
        """The keys whose refresh makes the adapter write ``obj`` again (or delete it)."""

    def objects_held(self) -> set[str] | None:
        """The objects of this listener the target holds, as this open adapter knows them
        without reading the target again: what it read when it opened, with what it wrote
        and deleted since (the names :meth:`read_back` gives). None: it keeps no such record,
        and a rebuild reads the target back to find what to remove."""
        return None


class KeyedBatch:
    """A batch's changes by key (an adapter that writes each key's last state once): the
    indexes of each key's changes, in order, and what fails a key fails all of them."""

    def __init__(self, changes: Sequence[Change]) -> None:
        self.changes = changes
        self.indexes: dict[str, list[int]] = {}
        for i, change in enumerate(changes):
            self.indexes.setdefault(change.key.text(), []).append(i)
        self.failed: dict[str, AdapterError] = {}
        """Key text -> why its changes fail."""

    def last(self) -> Iterator[tuple[str, Change]]:
        """Each key with its batch's last change of it."""
        for key, indexes in self.indexes.items():
            yield key, self.changes[indexes[-1]]

    def outcomes(self) -> list[AdapterError | None]:
        out: list[AdapterError | None] = [None] * len(self.changes)
        for key, why in self.failed.items():
            for i in self.indexes[key]:
                out[i] = why
        return out


def states_in_view(view: ListenerView, states: Iterable[Change]) -> Iterator[Change]:
    """Each key's state the listener's view admits, restricted to the columns it may see
    (what ``ReadBack.expected`` makes its objects from)."""
    for change in states:
        seen, _ = view.see(change, False)
        if seen is not None and seen.after is not None:
            yield seen


def rows_in_view(view: ListenerView, states: Iterable[Change]) -> dict[str, Any]:
    """What a target holding one row per key should hold (``ReadBack.expected`` of such
    adapters): each key's state in the listener's view, by key text."""
    return {seen.key.text(): seen.after for seen in states_in_view(view, states)}


def adapter_class(kind: str) -> type[Adapter]:
    """The adapter registered under ``kind`` in the ``mcq.adapters`` entry point group."""
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if kind not in found:
        known = ", ".join(sorted(found)) or "none"
        raise ListenerConfigError(
            f"no adapter named {kind!r} (registered: {known}); install the distribution that provides it"
        )
    cls = found[kind].load()
    if not (isinstance(cls, type) and issubclass(cls, Adapter)):
        raise ListenerConfigError(f"entry point {ENTRY_POINT_GROUP}:{kind} is not an Adapter subclass: {cls!r}")
    return cls


def make_adapter(listener: Listener, settings: Settings) -> Adapter:
    """Listener's adapter; a connection its settings name that the configuration does not
    have (``targets``) is the listener's configuration error."""
    try:
        return adapter_class(listener.adapter.type)(listener, settings)
    except TargetError as exc:
        raise ListenerConfigError(f"listener {listener.name}: adapter {listener.adapter.type}: {exc}") from None
