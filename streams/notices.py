"""What the normaliser says to a person: how far behind it is, why a first run re-derives
topics that hold records, what to do when raw records were deleted before it read them, a
failed query's whole message."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.checkpoint import realtime_dir
from streams.metrics import behind

if TYPE_CHECKING:
    from streams.normalize import NormalizeJob


def lag_line(progress: dict[str, Any], behind_by: int | None = None) -> str | None:
    """How far the query is behind the raw topics: ``behind_by`` when known otherwise (a
    real-time query's consumers), else from a StreamingQueryProgress as JSON."""
    rows = progress.get("numInputRows", 0)
    by = behind(progress) if behind_by is None else behind_by
    return f"progress: batch {progress.get('batchId')}: {rows} rows, behind the raw topics by {by}"


def query_message(exc: Exception) -> str:
    """A failed query's whole message (PySpark's ``str()`` of it may be empty), its causes' included."""
    parts = [str(exc)]
    for name in ("getMessage", "desc"):
        value = getattr(exc, name, None)
        parts.append(str(value() if callable(value) else value or ""))
    return "\n".join(p for p in parts if p)


def fresh_start_line(job: NormalizeJob, mode: str) -> str | None:
    """What a first run of ``mode`` under this checkpoint does when the logical topics
    already hold records (a checkpoint deleted or moved, a new ``--checkpoint``, a switch
    of mode): None when they are empty (a true first run)."""
    from mcq.topics.read import records_held

    held = records_held(job.settings, job.plan.logical_topics)
    if not held:
        return None
    why = "a checkpoint deleted or moved, another --checkpoint, or a switch of mode"
    if mode == "realtime" and any(realtime_dir(job.checkpoint).glob("*/metadata")):
        why = "the last run stopped before its first real-time checkpoint"
    return (
        f"normalize: no {mode} checkpoint at {job.checkpoint}, but the logical topics already hold {held} records "
        f"({why}): re-deriving them from the "
        "raw topics' beginning. Safe: every record carries its source position, so the topics end with the "
        "same last states and a listener skips what it applied (counted as skipped); a raw record already "
        "deleted by retention is not read again, and its last state stays in the compacted topic"
    )


def lost_raw_line(reason: str) -> str:
    """The error and runbook when raw records were deleted before the normaliser read them."""
    return (
        f"raw changes were deleted before the normaliser read them ({reason}): the logical topics, and every "
        "listener, miss them. The raw topic's retention is shorter than the normaliser was stopped or behind "
        "(raise retention.ms/retention.bytes of the raw topics). To repair: `mcq refresh LISTENER --from source` "
        "for each listener of the tables that raw topic captures, then run the normaliser once with "
        "--accept-lost-raw to go on from the oldest raw record still kept"
    )
