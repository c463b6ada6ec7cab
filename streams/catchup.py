"""A first real-time start drains a large raw backlog in micro-batches, then hands over.

Real-Time Mode reads a backlog record by record in one long-lived task per raw partition,
all queries sharing the same cores: a captured campus of 45,000 raw rows took 50-100 s to
reach its logical topics that way (``bench.peer_jdbc_sink``), where one micro-batch reads
the same rows at thousands a second and 1,000,000 at ~20,000 a second
(``bench.normalize_backlog``). So when the real-time queries have never run under this
checkpoint (a first start, a switch of mode, a checkpoint deleted) and more than
``above`` raw records wait, the normaliser first runs the micro-batch job over the
real-time part of the plan until it has read everything that was there (``availableNow``),
and the real-time queries then start exactly where it ended: the offsets of its last
committed batch, from its own checkpoint (``catchup/``).

Nothing is read twice or skipped at the hand-over, and order holds: a key's records
before the hand-over offset were written by the catch-up in source order (its per-key
sort), those after it by the real-time task of the same raw partition, later. A catch-up
interrupted (a stop, a kill) continues from its checkpoint at the next start, before the
real-time queries start; once they have planned a batch, their own checkpoints decide
and no catch-up runs again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streams.checkpoint import Offsets, batch_offsets, planned, realtime_dir

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streams.normalize import NormalizeJob
    from streams.plan import NormalizePlan
    from streams.stopping import StopRequest

CATCH_UP_ABOVE = 50_000
"""Raw records waiting above which a first real-time start catches up in micro-batches first.
The real-time queries start (plan and generate code: 20-60 s on 2 cores under load) only
after the catch-up, so a small backlog is through sooner in Real-Time Mode: measured here,
45,000 raw rows reached the target in 74 s by a catch-up but real time ran only ~60 s
later, against 99 s in real time from the start; with 89,000 rows the 10,000-people
pipeline test took 2:53 minutes, against 6:50 before (``BENCHMARKS.md``)."""


def realtime_started(checkpoint: Path) -> bool:
    """Whether a real-time query planned a batch under the normaliser's ``checkpoint``."""
    return planned(realtime_dir(checkpoint))


def _batch_ids(log: Path) -> list[int]:
    return sorted(int(p.name) for p in log.iterdir() if p.is_file() and p.name.isdigit()) if log.is_dir() else []


def committed_offsets(checkpoint: Path) -> Offsets | None:
    """Where the last committed batch of the micro-batch query at ``checkpoint`` ended: its
    offset log entry (``v1``, the batch's metadata, then one line per source) of the newest
    batch with a commit. None before its first commit."""
    done = set(_batch_ids(checkpoint / "commits"))
    for batch in reversed(_batch_ids(checkpoint / "offsets")):
        if batch in done:
            return batch_offsets(checkpoint, batch)
    return None


def starting_offsets(offsets: Offsets | None, topics: list[str]) -> str:
    """A real-time source's ``startingOffsets``: where the catch-up ended for ``topics``,
    else from their beginning."""
    if offsets is None or not all(t in offsets for t in topics):
        return "earliest"
    return json.dumps({t: offsets[t] for t in topics})


def catch_up(
    job: NormalizeJob,
    part: NormalizePlan,
    spark: SparkSession,
    stopping: StopRequest,
    above: int,
    on_query: Callable[[Any], None],
) -> Offsets | None:
    """Drain the raw backlog of ``part`` in micro-batches when the real-time queries never ran
    and more than ``above`` records wait (or an earlier catch-up did not finish); returns the
    offsets the real-time queries start from (None: from the beginning, no catch-up)."""
    location = job.checkpoint / "catchup"
    if realtime_started(job.checkpoint):
        return None
    resumed = location.is_dir()
    from mcq.topics.read import records_held

    waiting = records_held(job.settings, part.raw_topics)
    if not resumed and waiting <= above:
        return None
    log.info(
        f"normalize: {waiting:,} raw records wait and real time has not started here: catching up in "
        f"micro-batches first{' (continuing the catch-up a stop interrupted)' if resumed else ''}"
    )
    started = time.monotonic()
    query = job.part(part, location).start(spark, once=True)
    on_query(query)
    if not run_to_end(query, stopping):
        return None
    offsets = committed_offsets(location)
    if offsets is None:  # nothing was there after all: start from the beginning
        return None
    log.info(f"normalize: caught up in {time.monotonic() - started:.1f} s; real time starts where it ended")
    return offsets


def run_to_end(query: Any, stopping: StopRequest) -> bool:
    """Wait for a bounded (``once``) query to end; False if a stop was requested first (the
    query is stopped: its checkpoint resumes it). Raises what ended it, if that was an error."""
    while query.isActive and not stopping.requested:
        query.awaitTermination(0.5)
    if stopping.requested:
        if query.isActive:
            query.stop()
        return False
    query.awaitTermination()
    return True
