"""What the history topic holds: one :class:`Event` per step of a change, as JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from mcq import jsontext
from mcq.errors import McqError

Step = Literal["captured", "applied", "filtered", "delayed", "parked", "dead-lettered", "superseded", "skipped"]
STEPS: tuple[str, ...] = get_args(Step)
"""In the order a change goes through them: captured (normalised into its logical topic),
then per listener what it did with it."""


class BadHistoryEvent(McqError):
    """A history record that is not an event of ours; the message names where it is."""


@dataclass(frozen=True)
class Event:
    """One step of one change of a key: when, where, and (a listener's) what and why."""

    tname: str
    key: str
    """The key as ``ChangeKey.text()``."""
    step: Step
    at: float
    """When the step happened (epoch s)."""
    position: str
    """The change's source position (``commit/lsn``): orders a key's changes."""
    change_type: str | None = None
    commit_time: str | None = None
    """The source transaction's commit time (ISO 8601)."""
    txid: int | None = None
    raw: str | None = None
    """Where Debezium wrote it: ``topic[partition]@offset``."""
    logical: str | None = None
    """Where the normaliser wrote it: ``topic[partition]@offset``."""
    listener: str | None = None
    answer: str | None = None
    """What the target (or the listener) said: the reason of a refusal, a delay, a filter."""
    cause: str | None = None
    """Why the listener got it (``source``, ``entered-view``, ``refresh``…)."""

    def to_json(self) -> bytes:
        """The event as a JSON object, its unset fields left out (one per change and listener:
        on the listener's hot path, so no ``asdict`` copy)."""
        return jsontext.dumps({f: v for f in _FIELDS if (v := getattr(self, f)) is not None})

    @classmethod
    def from_json(cls, data: bytes | None, where: str) -> Event:
        """An event back from its record; :class:`BadHistoryEvent` naming ``where`` otherwise."""
        try:
            raw: Any = json.loads(data or b"")
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadHistoryEvent(f"{where}: not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise BadHistoryEvent(f"{where}: not a JSON object")
        known = {f.name: f for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        for name in ("tname", "key", "step", "position"):
            if not isinstance(values.get(name), str):
                raise BadHistoryEvent(f"{where}: no text {name!r}")
        if values["step"] not in STEPS:
            raise BadHistoryEvent(f"{where}: unknown step {values['step']!r}")
        if not isinstance(values.get("at"), int | float) or isinstance(values.get("at"), bool):
            raise BadHistoryEvent(f"{where}: no number 'at'")
        for name in ("change_type", "commit_time", "raw", "logical", "listener", "answer", "cause"):
            if values.get(name) is not None and not isinstance(values[name], str):
                raise BadHistoryEvent(f"{where}: {name!r} is not text")
        if values.get("txid") is not None and (not isinstance(values["txid"], int) or isinstance(values["txid"], bool)):
            raise BadHistoryEvent(f"{where}: 'txid' is not an integer")
        return cls(**values)


_FIELDS = tuple(f.name for f in fields(Event))
