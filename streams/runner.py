"""Running the normaliser (``mcq streams normalize``) as a service: until caught up
(``--once``, micro-batches) or until stopped, in Real-Time Mode (``streams/realtime.py``)
or in micro-batches (``streams/normalize.py``'s job), with the catch-up before a first
real-time start (``streams/catchup.py``), the topics and schemas it writes prepared, its
health endpoint and metrics, SIGINT/SIGTERM as a request to stop safely
(``streams/stopping.py``), one line for each failure it knows (raw records lost to
retention, a fresh start over full topics: ``streams/notices.py``), and capture's keeper
(source tasks failed on a lost connection started again: ``mcq/capture/keeper.py``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcq.capture.connector import connector_name
from mcq.config import Settings
from mcq.health import HealthServer
from mcq.history.follower import CaptureFollower
from mcq.registry.model import Registry
from streams.beside import following, keeping
from streams.catchup import CATCH_UP_ABOVE, catch_up
from streams.checkpoint import clear_torn_writes, lost_raw_reason, planned, realtime_dir, started
from streams.exceptions import NormalizeError
from streams.handover import REHOLD_S, HandOver
from streams.handover_gate import await_tasks, can_gate, flush_producers
from streams.metrics import NormalizeMetrics
from streams.notices import fresh_start_line, lag_line, lost_raw_line, query_message
from streams.replan import remember, replay
from streams.reshape import ORDERED_QUERY, LiveQueries, apply_in_place
from streams.stopping import StopRequest

if TYPE_CHECKING:
    from streams.registry_watch import PlanChange
    from streams.session import JitProfile

from streams.normalize import NormalizeJob

log = logging.getLogger(__name__)


MODES = ("realtime", "microbatch")
REGISTRY_LOOK_S = 2.0
"""How often a running normaliser looks for a registry change."""
SPARE_SLOTS = 4
"""Local task slots beyond the real-time queries' need: for the queries of raw topics a
registry change adds while they run (an idle slot costs nothing)."""
SLOTS_WAIT_S = 60.0
"""How long a cluster's executors may take to register the slots the real-time queries need."""
RegistryChanged = Callable[[], "PlanChange | None"]
"""A new registry whose sources or tables differ from the running plan's (streams/registry_watch.py)."""
DefinedAt = Callable[["Registry"], dict[str, int]]
"""When each table/subtype's definition of a registry was stored (ms since the epoch)."""


def run_normalize(
    settings: Settings,
    registry: Registry,
    *,
    once: bool,
    trigger: str = "1 second",
    checkpoint: Path | None = None,
    master: str | None = None,
    max_offsets_per_trigger: int | None = None,
    mode: str = "microbatch",
    checkpoint_interval: str = "5 minutes",
    accept_lost_raw: bool = False,
    health: tuple[str, int] | None = None,
    catch_up_above: int = CATCH_UP_ABOVE,
    registry_changed: RegistryChanged | None = None,
    defined_at: DefinedAt | None = None,
    jit_by_backlog: bool = False,
    after_handover: str = "exit",
    standby: bool = False,
    standby_refresh_s: float = REHOLD_S,
) -> NormalizeJob:
    """Run the normaliser: until caught up (``once``, always micro-batches), or until
    stopped (SIGINT, SIGTERM) in ``mode``: ``realtime`` (Spark's Real-Time Mode, a
    checkpoint about every ``checkpoint_interval``: ``streams/realtime.py``) or ``microbatch``
    (a micro-batch every ``trigger``).

    A stop abandons the batch in flight, if any: the checkpoint makes a restart write it
    again. The modes keep their checkpoints apart (``realtime/`` and ``ordered/`` below
    the directory a micro-batch run uses): a switch of mode reads the raw topics again
    from their beginning, which the compacted, idempotently applied topics absorb.

    ``health`` (host, port): serve ``/livez``, ``/readyz`` and ``/metrics`` there
    (``streams/metrics.py``) while the queries run. ``catch_up_above``: a first real-time
    start with more raw records waiting drains them in micro-batches first
    (``streams/catchup.py``). ``registry_changed``: asked every few seconds while the
    queries run (``streams/registry_watch.py``); a new registry restarts them on its plan.
    ``defined_at``: when each table's definition was stored (``NormalizeJob.defined_at``).
    ``jit_by_backlog``: a ``--once`` run with few raw records waiting (``SHORT_RUN_RECORDS``)
    starts its JVM with C1 only, one with more with C2 for its hottest code alone. Only
    for a process of its own (the CLI): a caller that goes on using the JVM (a test
    session) would keep that JIT for all it runs later.
    A run until stopped started beside another of the same checkpoint takes over from it
    (``streams/handover.py``); one asked to hand over ends then (``after_handover``
    ``exit``), or stays up, not ready, until stopped (``idle``: a pod of a rolling update).
    ``standby``: started beside another, wait for it to crash or stop instead of asking;
    once it handed over (asked by another), it stands by again; its held queries start on a
    fresh copy of the checkpoint every ``standby_refresh_s``.
    Returns the job last run."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    if after_handover not in ("exit", "idle"):
        raise ValueError(f"after_handover {after_handover!r}: exit or idle")
    job = NormalizeJob(
        settings,
        registry,
        checkpoint or settings.stack.home / "checkpoints" / f"normalize-{settings.topic_prefix}",
        max_offsets_per_trigger,
        accept_lost_raw,
        defined_at=defined_at(registry) if defined_at else {},
    )
    stopping = StopRequest()
    follower = CaptureFollower(settings, logical_topics(registry, settings.topic_prefix))
    sources = [connector_name(s) for s in registry.sources]
    if registry_changed is not None:
        watched = registry_changed

        def registry_changed() -> PlanChange | None:  # the follower and the keeper follow the new plan
            change = watched()
            if change is not None:
                follower.follow(logical_topics(change.registry, settings.topic_prefix))
                sources[:] = [connector_name(s) for s in change.registry.sources]
            return change

    with stopping.on_signals(), following(follower, once), keeping(settings, lambda: list(sources), once):
        job.prepare()
        handover = (
            None
            if once
            else HandOver(job.checkpoint, idle=after_handover == "idle", standby=standby, rehold_s=standby_refresh_s)
        )
        if handover is None or handover.taking_over is None:  # else: once the other has stopped
            _clear_torn(job.checkpoint)
        run_mode = "realtime" if mode == "realtime" and not once else "microbatch"
        if not started(job.checkpoint, run_mode):
            line = fresh_start_line(job, run_mode)
            if line:
                log.info(line)
        if not stopping.requested:
            realtime = mode == "realtime" and not once
            job = _stream(job, stopping, once=once, trigger=trigger, master=master,
                          interval=checkpoint_interval if realtime else None, health=health,
                          catch_up_above=catch_up_above, defined_at=defined_at,
                          registry_changed=None if once else registry_changed,
                          jit_by_backlog=jit_by_backlog, handover=handover)  # fmt: skip
        if handover is not None:
            handover.lease.release()
        if handover is not None and handover.handed_to is not None:
            pass  # it said so
        elif stopping.requested:
            if run_mode == "realtime" and not planned(realtime_dir(job.checkpoint)):
                log.info(
                    f"normalize: stopped before its first real-time checkpoint (one every {checkpoint_interval}): "
                    "a restart reads again what this run read in real time"
                )
            else:
                log.info("normalize: stopped; a restart resumes after the last finished batch")
    return job


def _clear_torn(checkpoint: Path) -> None:
    torn = clear_torn_writes(checkpoint)
    if torn:
        log.warning(f"normalize: removed {len(torn)} half-written checkpoint file(s) a killed run left, e.g. {torn[0]}")


def logical_topics(registry: Registry, prefix: str) -> list[str]:
    return sorted({t.topic(prefix) for t in registry.tables})


def _stream(
    job: NormalizeJob, stopping: StopRequest, *, once: bool, trigger: str, master: str | None, interval: str | None,
    health: tuple[str, int] | None = None, catch_up_above: int = CATCH_UP_ABOVE,
    registry_changed: RegistryChanged | None = None, defined_at: DefinedAt | None = None,
    jit_by_backlog: bool = False, handover: HandOver | None = None,
) -> NormalizeJob:  # fmt: skip
    """Run the queries until they end, a stop is requested or another instance takes over
    (``handover``); ``interval`` set: real time.
    A registry change stops them and starts them again on its plan, the health endpoint
    answering throughout (not ready meanwhile). Returns the job last run."""
    metrics = NormalizeMetrics()
    queries: list[Any] = []  # filled as they start
    ticked = [time.monotonic()]

    def live() -> bool:  # the driver's loop goes round every half second once the queries run
        return time.monotonic() - ticked[0] < 60

    def ready() -> bool:  # not while its queries are held for a take-over, nor once it handed over
        if handover is not None and handover.handed_to is not None:
            return False
        if handover is not None and handover.taking_over is not None and not handover.standby:
            return False  # a standby is ready while it stands by: its held queries run
        return bool(queries) and all(q.isActive for q in queries)

    def running() -> list[dict[str, str]]:  # /queries: what runs, each since when
        metrics.note_runs(list(queries))  # a query started since the loop last went round is listed too
        runs = [metrics.runs.get(str(q.runId)) for q in list(queries) if q.isActive]
        return sorted((r for r in runs if r is not None), key=lambda r: r["name"])

    server = HealthServer(*health, live, ready, metrics.registry, {"/queries": running}) if health else None
    if server is not None:
        server.start()
        log.info(f"normalize: health {server.address}")
    try:
        while True:
            queries.clear()
            replan, job = _run_queries(job, stopping, once=once, trigger=trigger, master=master, interval=interval,
                                       metrics=metrics, queries=queries, ticked=ticked, catch_up_above=catch_up_above,
                                       registry_changed=registry_changed, jit_by_backlog=jit_by_backlog,
                                       defined_at=defined_at, handover=handover)  # fmt: skip
            if handover is not None and handover.handed_to is not None and handover.standby:
                handover.stand_by_again()  # asked to hand over (its old pod back): a standby again
                if not stopping.requested:
                    continue
            if handover is not None and handover.handed_to is not None and handover.idle:
                while not stopping.requested:  # live, not ready: a rolling update stops this pod
                    ticked[0] = time.monotonic()
                    time.sleep(0.5)
            if replan is None or stopping.requested:
                return job
            job = dataclasses.replace(
                job, registry=replan, only=None, defined_at=defined_at(replan) if defined_at else {}
            )
            job.prepare()
    finally:
        if server is not None:
            server.stop()


SHORT_RUN_RECORDS = 200_000
"""Raw records waiting up to which a ``--once`` run is short: its driver's JIT is C1 only
(``streams.session.SHORT_RUN_JIT``, measured there). Above, C2's code pays for its
compiling; 178,416 rows took as long either way. A larger backlog's C2 compiles its
hottest code alone (``streams.session.BACKLOG_RUN_JIT``)."""


def _waiting(job: NormalizeJob) -> int | None:
    """Raw records after the last committed batch of ``job``'s checkpoint (None: not known)."""
    from confluent_kafka import KafkaException

    from mcq.topics.read import TopicReadError, records_after
    from streams.catchup import committed_offsets

    try:
        return records_after(job.settings, job.plan.raw_topics, committed_offsets(job.checkpoint) or {})
    except (TopicReadError, KafkaException, OSError, ValueError):  # only a choice of JIT depends on it
        return None


def _run_queries(
    job: NormalizeJob, stopping: StopRequest, *, once: bool, trigger: str, master: str | None, interval: str | None,
    metrics: NormalizeMetrics, queries: list[Any], ticked: list[float], catch_up_above: int,
    registry_changed: RegistryChanged | None = None, jit_by_backlog: bool = False, defined_at: DefinedAt | None = None,
    handover: HandOver | None = None,
) -> tuple[Registry | None, NormalizeJob]:  # fmt: skip
    """Start the queries and watch them until they end, a stop is requested, or the
    registry changes what they normalise in a way the running queries cannot take
    (``streams/reshape.py``: in real time, only the queries a change touches restart):
    then the new registry is returned, the queries stopped. Returns it (or None) and the
    job last run."""
    import os

    from pyspark.errors import StreamingQueryException
    from pyspark.sql.streaming.listener import StreamingQueryListener

    from streams import realtime as rt
    from streams.lag import consumer_samples
    from streams.session import silence_jvm_log, spark_session, wait_for_slots

    realtime_part, ordered_part = rt.split_plan(job.plan) if interval else (job.plan, None)
    slots = shuffle = 0
    if interval:
        shuffle = int(os.environ.get("MCQ_SPARK_SHUFFLE_PARTITIONS", "4"))
        slots = rt.slots_needed(job.settings, realtime_part, ordered_part, shuffle, job.registry)
        # no master given, and not under spark-submit (whose --master is the one): local threads,
        # as many as the real-time tasks need (they mostly wait on Kafka), and some for raw
        # topics a registry change adds while they run (streams/reshape.py)
        if not (master or os.environ.get("MCQ_SPARK_MASTER") or os.environ.get("PYSPARK_GATEWAY_PORT")):
            master = f"local[{max(slots + SPARE_SLOTS, os.cpu_count() or 1)}]"
    jit: JitProfile | None = None
    if once and jit_by_backlog and (waiting := _waiting(job)) is not None:
        jit = "short" if waiting <= SHORT_RUN_RECORDS else "backlog"
        log.info(f"normalize: {waiting:,} raw records to read")
    with stopping.deferred():
        spark = spark_session(job.settings, "mcq-normalize", master, jit=jit)
        stopping.install()
    offered = wait_for_slots(spark, slots, SLOTS_WAIT_S) if interval else 0
    if interval and offered < slots:
        silence_jvm_log(spark)  # an executor still fetching the jars logs its closed connection
        spark.stop()
        raise NormalizeError(
            f"real-time mode needs {slots} task slots (a long-lived task per raw topic partition), the Spark "
            f"master {spark.sparkContext.master} offers {offered} after {SLOTS_WAIT_S:.0f} s: give it "
            f"{slots - offered} more executor cores, or run with --mode microbatch"
        )
    if interval:
        log.info(f"normalize: {slots} real-time task slots needed, {offered} offered by {spark.sparkContext.master}")
        metrics.watch_consumers(lambda: consumer_samples(spark), rt.QUERY_PREFIX)
    jobs: dict[str, NormalizeJob] = {}
    seen_output = threading.Event()

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = json.loads(event.progress.json)
            metrics.observe(progress)
            if str(progress.get("name")).startswith(rt.QUERY_PREFIX):
                log.info(rt.batch_line(progress, interval or ""))
                if (progress.get("sink") or {}).get("numOutputRows"):
                    seen_output.set()
            line = lag_line(progress, metrics.behind_now(str(progress.get("name") or progress.get("id")), progress))
            if line:
                log.info(line)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = Progress()
    spark.streams.addListener(listener)
    provenance: list[threading.Thread] = []  # the first-seen reader, while it reads
    replan: Registry | None = None
    fresh: Any = None  # the real-time queries' session, once made
    try:
        if stopping.requested:
            return None, job
        gate = bool(interval) and can_gate(spark)  # the real-time queries' hand-over gate (local masters)
        held: list[Any] = []  # real-time queries started before a take-over, held at its gate
        rehold: Callable[[], None] | None = None
        written = [*job.plan.logical_topics, job.plan.refresh_topic, job.plan.withheld_topic]
        if handover is not None and handover.taking_over is not None and gate and interval:
            fresh = rt.realtime_session(spark, listener, job, realtime_part)

            def hold() -> None:  # start the real-time queries on a copy of the checkpoint, held at the gate
                begun = time.monotonic()
                if held:  # a standby's, on an older copy
                    stopping.stop_all(held)
                    queries[:] = [q for q in queries if all(q is not h for h in held)]
                now = jobs["realtime"] = job.part(realtime_part, handover.hold(spark, job.settings, written))
                held[:] = rt.start_realtime(now, fresh, interval, gate=True)
                queries.extend(held)
                tasks = rt.raw_partitions(job.settings, realtime_part.raw_topics, job.registry)
                running = await_tasks(spark, tasks, lambda: stopping.requested)
                log.info(
                    f"normalize: {len(held)} real-time queries started in {time.monotonic() - begun:.1f} s, held at "
                    f"the gate ({running} of {tasks} tasks running)"
                )

            hold()
            rehold = hold
        if handover is not None:  # the lease, from another instance if one runs (it stops first)
            took = handover.taking_over is not None
            handover.take_over(
                job.settings, written, lambda: stopping.requested, spark if held else None, rehold,
                waiting=lambda: ticked.__setitem__(0, time.monotonic()),  # live while it stands by
            )  # fmt: skip
            if stopping.requested:
                return None, job
            if took and not held:
                _clear_torn(job.checkpoint)
            if held:
                log.info(
                    f"normalize: real time, {len(held)} queries, {slots} task slots, checkpoint every {interval} "
                    "(taken over)"
                )
        replayed: list[Any] = []
        replay(job, spark, stopping, replayed.append)  # a registry change's window, first
        queries.extend(replayed)  # stopped with the others if it is still running
        if stopping.requested:
            return None, job
        queries[:] = [q for q in queries if all(q is not r for r in replayed)]  # it has ended
        if interval is None:
            queries.append(job.start(spark, once=once, trigger=trigger))
        else:
            if ordered_part is not None:
                ordered = jobs["ordered"] = job.part(ordered_part, job.checkpoint / "ordered")
                log.info(
                    "normalize: fed by two or more raw topics, ordered by source position in micro-batches: "
                    + ", ".join(sorted(job.plan.shared_topics))
                )
                queries.append(ordered.start(spark, once=False, trigger=trigger))
        if interval and not held:
            fresh = rt.realtime_session(spark, listener, job, realtime_part)
            catching: list[Any] = []
            begun = time.monotonic()
            offsets = catch_up(job, realtime_part, spark, stopping, catch_up_above, catching.append)
            queries.extend(catching)  # stopped with the others if it is still running
            if stopping.requested:
                return None, job
            queries[:] = [q for q in queries if all(q is not c for c in catching)]  # it has ended
            now = jobs["realtime"] = job.part(realtime_part, realtime_dir(job.checkpoint))
            caught_up = time.monotonic()
            started = rt.start_realtime(now, fresh, interval, offsets, gate=gate)
            queries.extend(started)
            log.info(
                f"normalize: real time, {len(started)} queries, {slots} task slots, checkpoint every {interval} "
                f"(catch-up {caught_up - begun:.1f} s, queries started in {time.monotonic() - caught_up:.1f} s)"
            )
        if handover is not None:  # answers a take-over's ask at once when the gate can (its own thread)
            handover.watch(spark if gate else None, lambda: any(q.name == ORDERED_QUERY for q in list(queries)))
        live: LiveQueries | None = None
        if "realtime" in jobs:
            live = LiveQueries(spark, fresh, interval or "", trigger, offered, shuffle, queries, jobs, gate)
        try:
            look_at = time.monotonic() + REGISTRY_LOOK_S
            while not stopping.requested:
                ticked[0] = time.monotonic()
                metrics.note_runs(queries)
                if handover is not None and handover.answered.is_set():  # by its watch: stop what it held
                    silence_jvm_log(spark)  # the tasks held at the gate end with an interrupt
                    stopping.stop_all(queries)
                    queries.clear()
                    return None, job
                to = handover.asked_by if handover is not None else None
                if handover is not None and to is not None:
                    if interval:
                        silence_jvm_log(spark)  # the real-time tasks log their aborted writes
                    handover.give_over(
                        to, spark, queries, lambda q: str(q.name).startswith(rt.QUERY_PREFIX),
                        stopping.stop_all, metrics.started_ms(),
                        rt.interval_ms(interval or "1 minute") * 2, gate,
                    )  # fmt: skip
                    return None, job
                ended = next((q for q in queries if not q.isActive), None)
                if ended is not None:
                    ended.awaitTermination()  # raises what ended it, if that was an error
                    break
                if registry_changed is not None and ticked[0] >= look_at:
                    change = registry_changed()
                    if change is not None:
                        remember(job.checkpoint, change)  # before the stop: what it commits is run again
                        defined = defined_at(change.registry) if defined_at else {}
                        reshaped = None
                        if live is not None:
                            stop_some = stopping.stop_all
                            reshaped = apply_in_place(live, job, change, defined, stopping, stop_some)
                        if reshaped is None:
                            replan = change.registry
                            log.info(
                                f"normalize: the registry changed what it normalises "
                                f"({', '.join(change.definitions)}): restarting its queries on the new plan"
                            )
                            break
                        job = reshaped
                    look_at = time.monotonic() + REGISTRY_LOOK_S
                time.sleep(0.2)
                if seen_output.is_set() and "realtime" in jobs and not (provenance and provenance[0].is_alive()):
                    seen_output.clear()
                    if jobs["realtime"]._unseen_refs():  # seconds of reads: the loop goes on meanwhile
                        provenance[:] = [threading.Thread(target=rt.record_first_seen, args=(jobs["realtime"],),
                                                          name="mcq-provenance", daemon=True)]  # fmt: skip
                        provenance[0].start()
        except StreamingQueryException as exc:
            if not stopping.requested:
                reason = lost_raw_reason(query_message(exc))
                if reason is not None:
                    raise NormalizeError(lost_raw_line(reason)) from None
                raise
        finally:
            if handover is not None:
                handover.unwatch()
            with stopping.unless_jvm_gone():
                if interval:
                    # interrupted real-time tasks log their aborted writes: expected, not news
                    silence_jvm_log(spark)
                stopping.stop_all(queries)
                if gate:  # what the pooled producers hold is sent before the lease goes (a standby reads it)
                    flush_producers(spark)
    finally:
        with stopping.unless_jvm_gone():
            # before Python goes away: the JVM would call back into a closed py4j gateway
            spark.streams.removeListener(listener)
            if fresh is not None:
                fresh.streams.removeListener(listener)
            spark.stop()
    return replan, job
