"""A registry change applied to a running real-time normaliser query by query.

Real time runs one query per raw topic (``streams/realtime.py``), and a query's work is
fixed by that topic's feeds: the logical tables/subtypes it feeds, their keys, captured
and watched columns, and when each table's definition was stored. A registry change that
leaves those of a raw topic as they were leaves its query running: its task, its position
and its latency are untouched. Only the queries whose feeds differ stop; the raw records
of the changed feeds captured since the change are normalised again on the new plan
(``streams/replan.py``); then the changed and new queries start, each from its checkpoint
(a new raw topic from its beginning). The outbox's query (the explicit tables) and the
ordered micro-batch query (logical tables fed by two or more raw topics) are each one
query in this sense.

Not in place (the caller stops every query and starts again on the new plan): a change
of a source (every raw topic's connector and topics may differ), more task slots than the
running Spark application offers, or micro-batch mode (one query reads every raw topic).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streams import realtime as rt
from streams.checkpoint import realtime_dir
from streams.plan import NormalizePlan

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streams.normalize import NormalizeJob
    from streams.registry_watch import PlanChange
    from streams.stopping import StopRequest

ORDERED_QUERY = "mcq-normalize"
"""The ordered micro-batch query's name (``NormalizeJob.start``)."""


def signatures(plan: NormalizePlan, defined_at: dict[str, int]) -> dict[str, object]:
    """What each real-time query of ``plan`` does, by its query name: equal signatures, the
    same query."""
    out: dict[str, object] = {}
    for raw in sorted({f.raw_topic for f in plan.feeds}):
        feeds = tuple(f for f in plan.feeds if f.raw_topic == raw)
        out[raw] = (feeds, tuple(defined_at.get(f.ref, 0) for f in feeds), plan.withheld_topic)
    if plan.outbox_topics:
        out[rt.group_name(plan.outbox_topics)] = (
            plan.outbox_topics, plan.outbox_sources, plan.explicit_topics, plan.refresh_topic,
        )  # fmt: skip
    return out


def ordered_signature(plan: NormalizePlan | None, defined_at: dict[str, int]) -> object:
    if plan is None:
        return None
    return (plan.feeds, tuple(defined_at.get(f.ref, 0) for f in plan.feeds), plan.withheld_topic)


@dataclasses.dataclass(frozen=True)
class Reshape:
    """Which running queries a registry change stops, and which it starts."""

    stop: tuple[str, ...]
    """Real-time queries (by ``streams.realtime.group_name``) that stop: changed or gone."""
    start: tuple[str, ...]
    """Real-time queries that start: changed or new."""
    ordered: bool
    """Whether the ordered micro-batch query stops (and starts again if the new plan has one)."""
    kept: int
    """Real-time queries left running."""


def reshape(
    old: NormalizePlan, old_ordered: NormalizePlan | None, old_defined: dict[str, int],
    new: NormalizePlan, new_ordered: NormalizePlan | None, new_defined: dict[str, int],
) -> Reshape:  # fmt: skip
    """The queries a change from the real-time plan ``old`` to ``new`` touches (pure)."""
    before, after = signatures(old, old_defined), signatures(new, new_defined)
    stop = tuple(name for name in before if after.get(name) != before[name])
    start = tuple(name for name in after if before.get(name) != after[name])
    ordered = ordered_signature(old_ordered, old_defined) != ordered_signature(new_ordered, new_defined)
    return Reshape(stop, start, ordered, sum(1 for name in before if name not in stop))


@dataclasses.dataclass
class LiveQueries:
    """The running normaliser's queries and what they run, changed in place."""

    spark: SparkSession
    """The session of the micro-batch queries (the ordered one, a replan's window)."""
    fresh: SparkSession
    """The session of the real-time queries (Kafka's V2 source)."""
    interval: str
    trigger: str
    """The ordered micro-batch query's trigger."""
    offered: int
    """Task slots the Spark application offers."""
    shuffle: int
    queries: list[Any]
    jobs: dict[str, NormalizeJob]
    """``realtime`` (and ``ordered``): the parts of the plan running."""
    gate: bool = False
    """The real-time queries pass the hand-over gate (``streams/handover_gate.py``)."""


def apply_in_place(
    live: LiveQueries,
    job: NormalizeJob,
    change: PlanChange,
    defined_at: dict[str, int],
    stopping: StopRequest,
    stop_all: Callable[[list[Any]], None],
) -> NormalizeJob | None:
    """Apply ``change`` to the running queries of ``job``; returns the new job, or None (nothing
    stopped) when it cannot be done in place."""
    from streams.replan import replay

    if any(d.startswith("source/") for d in change.definitions) or "realtime" not in live.jobs:
        return None
    new = dataclasses.replace(job, registry=change.registry, only=None, defined_at=defined_at)
    new_rt, new_ordered = rt.split_plan(new.plan)
    needed = rt.slots_needed(new.settings, new_rt, new_ordered, live.shuffle, new.registry)
    if needed > live.offered:
        log.info(
            f"normalize: the new plan needs {needed} task slots, the Spark application offers {live.offered}: "
            "restarting every query"
        )
        return None
    old_ordered = live.jobs["ordered"].plan if "ordered" in live.jobs else None
    plan = reshape(live.jobs["realtime"].plan, old_ordered, job.defined_at, new_rt, new_ordered, defined_at)
    new.prepare()
    touched = ", ".join(
        [*plan.stop, *(n for n in plan.start if n not in plan.stop)] + (["ordered"] if plan.ordered else [])
    )
    log.info(
        f"normalize: the registry changed what it normalises ({', '.join(change.definitions)}): restarting the "
        f"queries of {touched or 'none'} on the new plan; {plan.kept} other real-time quer"
        f"{'y runs' if plan.kept == 1 else 'ies run'} on"
    )
    stopped = {rt.QUERY_PREFIX + name for name in plan.stop}
    doomed = [q for q in live.queries if q.name in stopped or (plan.ordered and q.name == ORDERED_QUERY)]
    stop_all(doomed)
    live.queries[:] = [q for q in live.queries if all(q is not d for d in doomed)]
    live.jobs["realtime"] = new.part(new_rt, realtime_dir(new.checkpoint))
    live.jobs.pop("ordered", None)
    outbox = rt.group_name(new_rt.outbox_topics) if new_rt.outbox_topics else None
    starting = [t for t in new_rt.raw_topics if t in plan.start or (outbox in plan.start and t in new_rt.outbox_topics)]
    for topic in rt.ensure_raw_topics(new.settings, starting, new.registry):
        log.info(f"normalize: created raw topic {topic} (no change captured in it yet)")
    replayed: list[Any] = []
    replay(new, live.spark, stopping, replayed.append)  # the change's window, before the new queries write
    live.queries[:] = [q for q in live.queries if all(q is not r for r in replayed)]
    if stopping.requested:
        live.queries.extend(q for q in replayed if q.isActive)  # stopped with the others
        return new
    if new_ordered is not None:
        live.jobs["ordered"] = new.part(new_ordered, new.checkpoint / "ordered")
        if plan.ordered:
            live.queries.append(live.jobs["ordered"].start(live.spark, once=False, trigger=live.trigger))
    begun = time.monotonic()
    started = rt.start_realtime(live.jobs["realtime"], live.fresh, live.interval, only=set(plan.start), gate=live.gate)
    live.queries.extend(started)
    log.info(
        f"normalize: the new plan runs: {len(started)} real-time quer{'y' if len(started) == 1 else 'ies'} "
        f"started in {time.monotonic() - begun:.1f} s"
    )
    return new
