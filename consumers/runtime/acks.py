"""What a listener's acknowledgement (its offset commit) says besides the offset, and what
``mcq status`` concludes from it about deletes the listener may never learn of.

A logical topic is compacted: a delete reaches a listener that is behind as a tombstone,
and the broker's log cleaner removes a tombstone once it is older than the topic's
``delete.retention.ms``. A listener that stays behind longer than that may never see the
delete, and its target keeps the key for good (the key is at its target, and no record
of the topic names it any more).

So every offset commit carries, as its offset metadata, a small JSON object::

    {"t": <when the commit was made, unix ms>, "r": <unix ms>}

``r`` is a time no change after the committed offset was written before: the timestamp
of the last record handled in the partition (of the first one left unhandled, when a
batch is abandoned). It is left out when that record had no timestamp. Offsets
committed without this metadata (by an older listener, or by hand) are not judged.

``mcq status`` judges each partition of a compacted topic whose commit carries it and
that has records after the committed offset: the oldest of those was written at the
timestamp of the first record read there when that record sits right at the committed
offset, and otherwise (the cleaner removed records in between) no earlier than ``r``.
Once that is longer ago than the topic's ``delete.retention.ms``, deletes written while
the listener was away may be gone: a whole-table refresh (``mcq refresh NAME --tname T``)
repairs the target, since it delivers a DELETE for every key at the target that has no
state left in the topics (streams/jobs/refresh.py; a whole-table ``mcq_log_update('T')``
does the same for every listener of the table, consumers/runtime/refresh.py).

The listener judges the same way whenever it reads a partition it had been reading
before (its commit there carries a mark), so the report outlives the wait: changes read
after waiting longer than their topic keeps tombstones leave an :class:`ExposureMark`
(``exposed:<topic>``) in its applied topic, written before the commit past them, and
``mcq status`` reports it like a live judgement until a whole-table refresh of the table,
applied by that listener, clears it. Once caught up, nothing expires silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from mcq.registry.model import LogicalTable


def _json_object(text: bytes | str | None) -> dict[str, Any] | None:
    """A JSON object, or None for anything else (empty, not JSON, another JSON value)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class AckMark:
    """The offset metadata of one commit."""

    at: float
    """When the commit was made (unix s)."""
    since: float | None = None
    """No change after the committed offset was written before this (unix s)."""

    def text(self) -> str:
        mark = {"t": round(self.at * 1000)}
        if self.since is not None:
            mark["r"] = round(self.since * 1000)
        return json.dumps(mark, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str | None) -> AckMark | None:
        """The mark of a commit's metadata; None for metadata that is not one."""
        mark = _json_object(text)
        if mark is None:
            return None
        at, since = mark.get("t"), mark.get("r")
        if not isinstance(at, int | float) or not isinstance(since, int | float | None):
            return None
        return cls(at / 1000, since / 1000 if since is not None else None)


def oldest_pending_since(
    committed: int, mark: AckMark | None, first_offset: int | None, first_at: float | None
) -> float | None:
    """When the oldest record after the committed offset was written, or the earliest it
    can have been; None when the commit carries no mark (not judged)."""
    if mark is None:
        return None
    if first_offset is not None and first_at is not None and first_offset == committed:
        return first_at  # nothing removed in between: that record is the oldest pending
    return mark.since if mark.since is not None else mark.at


def behind_too_long(pending: int, since: float | None, now: float, retention_ms: int | None) -> float | None:
    """How long (s) a partition's pending changes have waited, when that is longer than its
    topic keeps tombstones (``delete.retention.ms``); None when its deletes are safe:
    nothing pending, no mark to judge by, or no tombstone retention (not compacted)."""
    if pending <= 0 or since is None or retention_ms is None or retention_ms < 0:
        return None
    waited = now - since
    return waited if waited * 1000 > retention_ms else None


def waited_past_retention(
    committed: int,
    metadata: str | None,
    first_offset: int | None,
    first_at: float | None,
    now: float,
    retention_ms: int | None,
) -> tuple[float, float] | None:
    """Judge the records a listener reads now after its commit (``committed`` and its
    ``metadata``), the first of them at ``first_offset`` written at ``first_at``: when the
    oldest of them was written (or the earliest it can have been) and how long (s) it
    waited, if that is longer than the topic keeps tombstones; else None."""
    since = oldest_pending_since(committed, AckMark.parse(metadata), first_offset, first_at)
    waited = behind_too_long(1, since, now, retention_ms)  # records were read: something was pending
    return (since, waited) if since is not None and waited is not None else None


@dataclass(frozen=True)
class Exposure:
    """A topic on which a listener waited longer than the topic keeps tombstones."""

    topic: str
    waited_s: float
    retention_ms: int
    table: LogicalTable | None


EXPOSED = "exposed:"
"""Key prefix of an :class:`ExposureMark` in a listener's applied topic (``exposed:<topic>``)."""


@dataclass(frozen=True)
class ExposureMark:
    """What a listener found when it read a topic: changes there had waited longer than
    the topic keeps tombstones, so deleted keys may remain at its target. Kept in its
    applied topic until a whole-table refresh of the table repairs the target."""

    topic: str
    since: float
    """When the oldest change read had been written, or the earliest it can have been (unix s)."""
    waited_s: float
    retention_ms: int
    tname: str | None = None
    subtype: str | None = None

    @property
    def key(self) -> str:
        """The record key of the mark in the applied topic."""
        return EXPOSED + self.topic

    def text(self) -> str:
        return json.dumps(
            {
                "since": round(self.since, 3),
                "waited_s": round(self.waited_s, 3),
                "retention_ms": self.retention_ms,
                "tname": self.tname,
                "subtype": self.subtype,
            },
            separators=(",", ":"),
        )

    @classmethod
    def parse(cls, topic: str, text: bytes | str | None) -> ExposureMark | None:
        """The mark a record's value holds; None for a value that is not one."""
        mark = _json_object(text)
        if mark is None:
            return None
        since, waited, retention = mark.get("since"), mark.get("waited_s"), mark.get("retention_ms")
        tname, subtype = mark.get("tname"), mark.get("subtype")
        if not (isinstance(since, int | float) and isinstance(waited, int | float) and isinstance(retention, int)):
            return None
        if not (isinstance(tname, str | None) and isinstance(subtype, str | None)):
            return None
        return cls(topic, float(since), float(waited), retention, tname, subtype)

    def exposure(self, table: LogicalTable | None) -> Exposure:
        return Exposure(self.topic, self.waited_s, self.retention_ms, table)


def fold_mark(marks: dict[str, ExposureMark], key: str, value: bytes | None) -> bool:
    """Take one record of an applied topic into ``marks`` (by topic): an exposure mark sets
    its topic's entry, a tombstone of one clears it. False for a record that is not one."""
    if not key.startswith(EXPOSED):
        return False
    topic = key[len(EXPOSED) :]
    mark = ExposureMark.parse(topic, value)
    if mark is None:
        marks.pop(topic, None)  # a tombstone (the refresh repaired the target), or unreadable
    else:
        marks[topic] = mark
    return True


def merge_exposures(live: Iterable[Exposure], marked: Iterable[Exposure]) -> list[Exposure]:
    """One exposure per topic from what is pending now and what the listener marked when it
    read its changes: the longer wait, the retention the live judgement reads now (else the
    one marked), whichever table is known; ordered by topic."""
    out: dict[str, Exposure] = {}
    for e in marked:
        if e.topic not in out or e.waited_s > out[e.topic].waited_s:
            out[e.topic] = e
    for e in live:
        held = out.get(e.topic)
        if held is not None:
            e = replace(e, waited_s=max(e.waited_s, held.waited_s), table=e.table or held.table)
        out[e.topic] = e
    return [out[t] for t in sorted(out)]


def repair_command(listener: str, table: LogicalTable) -> str:
    """The refresh of every key of ``table`` for this listener alone (streams/jobs/refresh.py):
    each live state, and a DELETE of each key its target holds that has no state left."""
    subtype = f" --subtype {table.subtype}" if table.subtype else ""
    return f"mcq refresh {listener} --tname {table.tname}{subtype}"


def span(seconds: float) -> str:
    """A duration as a person reads it: seconds, minutes or hours."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def exposure_line(listener: str, exposures: list[Exposure]) -> str | None:
    """The one line ``mcq status`` prints for a listener whose deletes may be lost:
    where and how long it waited, and what repairs its target."""
    if not exposures:
        return None
    where = ", ".join(
        f"on {e.topic} for {span(e.waited_s)} (delete.retention.ms {e.retention_ms} = {span(e.retention_ms / 1000)})"
        for e in exposures
    )
    tables = sorted({e.table.ref: e.table for e in exposures if e.table is not None}.values(), key=lambda t: t.ref)
    commands = ", ".join(repair_command(listener, t) for t in tables)
    unknown = [e.topic for e in exposures if e.table is None]
    if unknown:  # a topic no table of the registry names any more: refresh every table
        commands = f"mcq refresh {listener}"
    return (
        f"listener {listener}: changes waited longer than their topic keeps deletes, {where}: "
        f"deleted keys may remain at its target; repair: {commands}; "
        f"then let it catch up (mcq listen {listener} --until-caught-up)"
    )
