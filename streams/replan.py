"""A registry change's window, normalised again on the new plan.

A running normaliser sees ``mcq registry apply`` within seconds and stops its queries to
start them on the new plan (``streams/registry_watch.py``). Until they stop -- and in
the real-time batch their stop finishes and checkpoints -- changes captured after the
change was stored go through the old plan: an update of a column just added to a feed's
``watch`` would be dropped as housekeeping for good, its raw offset committed. So the
raw records of the changed feeds written since the change (less ``MARGIN_MS`` for the
clocks of the hosts that stamp them) are normalised again on the new plan, in one
bounded micro-batch run, before the new plan's queries resume from their checkpoints.
What both write twice, the compacted topics and idempotent listeners absorb.

The window is kept in ``replan.json`` under the checkpoint from the moment the change is
seen until its run has finished, so a normaliser stopped or killed in between runs it at
its next start (the run's own checkpoint, ``replan/``, resumes it)."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcq.refs import table_ref
from streams.catchup import run_to_end
from streams.plan import NormalizePlan

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streams.normalize import NormalizeJob
    from streams.registry_watch import PlanChange
    from streams.stopping import StopRequest

MARGIN_MS = 60_000
"""Raw records are stamped by the Connect worker's clock, the registry change by the clock
where ``mcq registry apply`` ran: a minute more of raw records covers their skew."""

PENDING = "replan.json"


def pending(checkpoint: Path) -> dict[str, Any] | None:
    """The window a registry change left to normalise again under ``checkpoint``, if any."""
    path = checkpoint / PENDING
    return json.loads(path.read_text()) if path.is_file() else None


def remember(checkpoint: Path, change: PlanChange) -> None:
    """Keep ``change``'s window until :func:`replay` has run it: merged with one not yet run
    (the earlier start, both changes' definitions), whose run then starts over."""
    window: dict[str, Any] = {"since_ms": change.since_ms - MARGIN_MS, "definitions": sorted(change.definitions)}
    before = pending(checkpoint)
    if before is not None:
        window = {
            "since_ms": min(before["since_ms"], window["since_ms"]),
            "definitions": sorted(set(before["definitions"]) | set(window["definitions"])),
        }
        shutil.rmtree(checkpoint / "replan", ignore_errors=True)
    checkpoint.mkdir(parents=True, exist_ok=True)
    temporary = checkpoint / (PENDING + ".tmp")
    temporary.write_text(json.dumps(window))
    temporary.replace(checkpoint / PENDING)


def affected(plan: NormalizePlan, definitions: list[str]) -> NormalizePlan:
    """The part of ``plan`` whose raw topics a change of ``definitions`` concerns: a changed
    table's feeds, the outbox for a table fed by it alone, every raw topic for a source."""
    if any(d.startswith("source/") for d in definitions):
        return plan
    refs = {d.removeprefix("table/") for d in definitions if d.startswith("table/")}
    feeds = tuple(f for f in plan.feeds if f.ref in refs)
    explicit = any(table_ref(tname, subtype) in refs for tname, subtype, _ in plan.explicit_topics)
    return replace(
        plan,
        feeds=feeds,
        outbox_topics=plan.outbox_topics if explicit else (),
        outbox_sources=plan.outbox_sources if explicit else (),
    )


def replay(job: NormalizeJob, spark: SparkSession, stopping: StopRequest, on_query: Callable[[Any], None]) -> None:
    """Normalise again on ``job``'s plan the window a registry change left, if any."""
    from mcq.topics.read import offsets_since

    window = pending(job.checkpoint)
    if window is None:
        return
    part = affected(job.plan, window["definitions"])
    since = offsets_since(job.settings, part.raw_topics, window["since_ms"])
    waiting = sum(end - first for partitions in since.values() for first, end in partitions.values())
    location = job.checkpoint / "replan"
    if waiting:
        part = replace(
            part,
            feeds=tuple(f for f in part.feeds if f.raw_topic in since),
            outbox_topics=tuple(t for t in part.outbox_topics if t in since),
        )
        log.info(
            f"normalize: normalising again on the new plan the {waiting:,} raw record{'s' if waiting != 1 else ''} of "
            f"{', '.join(window['definitions'])} captured since the registry changed "
            f"(less {MARGIN_MS // 1000} s for clock skew)"
        )
        started = time.monotonic()
        starting = {t: {str(p): first for p, (first, _) in partitions.items()} for t, partitions in since.items()}
        query = job.part(part, location).start(spark, once=True, starting=json.dumps(starting))
        on_query(query)
        if not run_to_end(query, stopping):
            return  # still pending: the next start runs it
        log.info(f"normalize: normalised again in {time.monotonic() - started:.1f} s")
    shutil.rmtree(location, ignore_errors=True)
    (job.checkpoint / PENDING).unlink()
