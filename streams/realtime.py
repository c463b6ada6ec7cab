"""The normaliser in Spark's Real-Time Mode: a committed row reaches its logical topic in
milliseconds after Debezium wrote it, not at the next micro-batch.

Real-Time Mode (Spark 4.1, ``Trigger.RealTime``) runs one long-lived task per raw topic
partition; each reads records as they arrive, projects them and hands them to the Kafka
sink at once. The trigger's duration is a *checkpoint interval*: at its end the offsets
read so far are committed to the checkpoint and the next batch starts. Between batches
the driver plans the next one (an offset look-up per source), so a change that arrives
then waits that long: a longer interval means fewer such waits (``BENCHMARKS.md``).

What Real-Time Mode allows decides the shape of the query:

- stateless only: no shuffle, no sort. Per-key order then comes from the raw partition:
  Debezium writes a table's changes to one partition in commit order and one task reads
  it in order, so every logical key fed by **one** raw topic keeps source order. A
  logical table fed by **two or more** raw topics (one key from two source tables) needs
  the micro-batch sort by source position: its feeds run as a micro-batch query beside
  the real-time one (``split_plan``), in the same Spark application;
- no union of one source with itself: every raw topic is read by a Kafka source of its
  own, its projection applied to it, and the parts are unioned;
- no ``foreachBatch``: counters come from the query's progress, a raw record the
  normaliser cannot read goes to the withheld topic like in micro-batches (its
  projection routes it there), and first-seen provenance is read back from the logical
  topics off the record path (``first_records``);
- task slots must cover every raw partition at once: ``slots_needed``.

Restarts are as safe as in micro-batch mode: the sink is at-least-once, a restart
replays from the last checkpoint in raw partition order, so the last record of every
key is still the newest and a listener skips what it already applied.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mcq.refs import table_ref
from streams.catchup import starting_offsets
from streams.checkpoint import Offsets
from streams.plan import NormalizePlan

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from mcq.config import Settings
    from mcq.registry.model import Registry
    from streams.normalize import NormalizeJob


def split_plan(plan: NormalizePlan) -> tuple[NormalizePlan, NormalizePlan | None]:
    """(what runs in real time, what needs the ordered micro-batch query, if anything).

    The outbox and its explicit tables stay real-time: an explicit table's key has one
    outbox per source, and entries of two databases have no common order to keep."""
    shared = plan.shared_topics
    realtime = replace(plan, feeds=tuple(f for f in plan.feeds if f.topic not in shared))
    if not shared:
        return realtime, None
    ordered = replace(
        plan,
        feeds=tuple(f for f in plan.feeds if f.topic in shared),
        outbox_topics=(),
        outbox_sources=(),
        explicit_topics=(),
    )
    return realtime, ordered


def raw_partitions(settings: Settings, topics: list[str], registry: Registry | None = None) -> int:
    """Partitions of the raw topics; for a topic Debezium has not created yet, those its
    feed asks for (``raw_partitions``: ``ensure_raw_topics`` creates it so), else one."""
    from confluent_kafka.admin import AdminClient

    from mcq.capture.connector import raw_topic_partitions

    asked = raw_topic_partitions(registry) if registry is not None else {}
    known = AdminClient(settings.kafka.client_config()).list_topics(timeout=15).topics
    return sum(len(known[t].partitions) if t in known else asked.get(t, 1) for t in topics)


def slots_needed(
    settings: Settings,
    plan: NormalizePlan,
    ordered: NormalizePlan | None,
    shuffle: int,
    registry: Registry | None = None,
) -> int:
    """Task slots the queries need at once: a long-lived task per raw partition read in
    real time, plus the ordered micro-batch query's tasks and one to spare."""
    slots = raw_partitions(settings, plan.raw_topics, registry) + 1
    if ordered is not None:
        slots += shuffle
    return slots


UNITS_MS = {"ms": 1, "millisecond": 1, "second": 1000, "s": 1000, "minute": 60_000, "min": 60_000, "hour": 3_600_000}


def interval_ms(text: str) -> int:
    """``"5 minutes"``, ``"90 seconds"``, ``"1 hour"`` -> milliseconds (ValueError otherwise)."""
    found = re.fullmatch(r"\s*(\d+)\s*([a-z]+)\s*", text.lower())
    unit = found.group(2) if found else ""
    unit = unit if unit in UNITS_MS else unit.removesuffix("s")
    if not found or unit not in UNITS_MS or int(found.group(1)) <= 0:
        raise ValueError(f"{text!r} is not an interval like '5 minutes', '90 seconds' or '1 hour'")
    return int(found.group(1)) * UNITS_MS[unit]


def realtime_trigger(spark: SparkSession, milliseconds: int) -> Any:
    """``Trigger.RealTime(ms)``: pyspark 4.1 has no keyword for it (4.2 has
    ``trigger(realTime=...)``), and spark-avro 4.2 is not on Maven Central yet."""
    return spark._jvm.org.apache.spark.sql.streaming.Trigger.RealTime(milliseconds)  # type: ignore[union-attr]


def ensure_raw_topics(settings: Settings, topics: list[str], registry: Registry) -> list[str]:
    """Create the raw topics Debezium has not created yet (a table without a change so far,
    the outbox before its first entry), as its connector would: one partition or those the
    feed asks for (``raw_partitions``), deletion by the broker's retention
    (``connect/source-postgres.json``). Returns those created.

    Each real-time source then subscribes to its topic by name. A pattern would do
    without them, but every source would list and match every topic of the cluster at
    every checkpoint (seconds on a cluster of thousands of topics, during which no
    change moves), and a topic appearing later would wait for the next checkpoint."""
    from mcq.capture.connector import raw_topic_partitions
    from mcq.topics.plan import TopicSpec, apply_topics

    asked = raw_topic_partitions(registry)
    specs = [TopicSpec(t, asked.get(t, 1), {"cleanup.policy": "delete"}, "raw CDC") for t in topics]
    report = apply_topics(settings, specs)
    return report.created


def _source(job: NormalizeJob, spark: SparkSession, topics: list[str], offsets: Offsets | None) -> DataFrame:
    return (
        spark.readStream.format("kafka")
        .options(**job.settings.kafka.spark_options())
        .option("subscribe", ",".join(topics))  # by name: ensure_raw_topics
        # where a catch-up ended (streams/catchup.py); a query with a checkpoint ignores it
        .option("startingOffsets", starting_offsets(offsets, topics))
        .option("failOnDataLoss", str(not job.accept_lost_raw).lower())
        .load()
    )


def group_name(group: tuple[str, ...]) -> str:
    """A projection group's query name (less ``QUERY_PREFIX``): its raw topic, or ``outbox``
    for the outbox topics together."""
    return group[0] if len(group) == 1 else "outbox"


def realtime_records(
    job: NormalizeJob,
    spark: SparkSession,
    offsets: Offsets | None = None,
    only: set[str] | None = None,
    gate: bool = False,
) -> list[tuple[int, str, DataFrame]]:
    """(index, raw topic, its query's records: topic, key, value, headers) for every raw topic
    (the outbox topics together, named ``outbox``), each from a Kafka source of its own;
    ``only``: for those names only (the index stays the one among all); ``gate``: held at
    the hand-over gate, less what the instance handing over wrote (``streams/handover.py``)."""
    from pyspark.sql import functions as F

    from streams.handover_gate import gated
    from streams.wire import position_headers

    key_bytes, value_bytes = job.wire.columns()
    headers = position_headers()
    groups = [
        (i, topics[0] if len(topics) == 1 else "outbox", topics)
        for i, topics in enumerate(job.projector.projection_groups())
    ]

    wire = ["topic", "key", "value", "headers"]

    def records(topics: tuple[str, ...]) -> DataFrame:
        out = (
            job.projector.project(job.parse(_source(job, spark, list(topics), offsets)), topics)
            .where(F.col("r").isNotNull())
            .select(
                F.col("r.topic").alias("topic"),
                key_bytes.alias("key"),
                value_bytes.alias("value"),
                headers.alias("headers"),
                *(["raw_topic", "raw_partition", "raw_offset"] if gate else []),
            )
        )
        # the gate sees each record as written (its key's bytes): the last filter, so that a
        # record it lets through is written
        return out.where(gated(F.col("key"))).select(*wire) if gate else out

    return [
        (i, name, records(topics))
        # the projections: SQL text, one parse per raw topic (streams/sqltext.py)
        for i, name, topics in groups
        if only is None or name in only
    ]


QUERY_PREFIX = "mcq-normalize-realtime "
GATE_SENT = "mcq.spark.HandOverGate$Sent"
START_THREADS = 4
"""Queries started at once: a start waits for its query's thread to come up, which
overlaps well (the 17 campus queries: ~4.5 s of starts -> 1.5 s). Building them does not:
the projections' columns (then ~5 s of py4j calls, now SQL text) and each query's eager
analyses (0.2-2 s) took longer side by side than one after the other (17.1 s against 11.5 s)."""


def start_realtime(
    job: NormalizeJob,
    spark: SparkSession,
    interval: str,
    offsets: Offsets | None = None,
    only: set[str] | None = None,
    gate: bool = False,
) -> list[Any]:
    """Start one real-time query per raw topic (returns pyspark's StreamingQuery objects);
    ``only``: the queries of those raw topics (``outbox``: the outbox's) only.

    One query per topic, not one for all: between two checkpoints the driver plans the
    next batch of a query, and no change of that query moves meanwhile. A query of all
    17 campus topics took ~3 s of planning and ~5 s of task start-up at every checkpoint
    (p99 of 11-23 s at 60 s intervals); a query of one topic plans in a fraction of
    that, and each query checkpoints on its own. Their intervals differ by a few seconds
    so that their pauses drift apart instead of coinciding (each pause is a few seconds
    of planning and task start-up on a shared driver: ``BENCHMARKS.md``). A query new
    here starts at ``offsets`` (where a catch-up ended), else at the beginning."""
    from concurrent.futures import ThreadPoolExecutor

    base = interval_ms(interval)

    def writer(i: int, raw: str, records: DataFrame) -> Any:
        out = (
            records.writeStream.queryName(QUERY_PREFIX + raw)
            .format("kafka")
            .options(**job.settings.kafka.spark_options())
            .option("checkpointLocation", str(job.checkpoint / re.sub(r"[^A-Za-z0-9._-]", "_", raw)))
            .outputMode("update")
        )
        if gate:  # counts the records that passed the gate out (streams/handover.py)
            out = out.option("kafka.interceptor.classes", GATE_SENT)
        stagger = i * min(5_000, base // 20)
        out._jwrite = out._jwrite.trigger(realtime_trigger(spark, base + stagger))
        return out

    writers = [writer(i, raw, records) for i, raw, records in realtime_records(job, spark, offsets, only, gate)]
    with ThreadPoolExecutor(START_THREADS, thread_name_prefix="start-realtime") as pool:
        return list(pool.map(lambda w: w.start(), writers))


def first_records(settings: Settings, topics: dict[str, str], timeout_s: float = 10.0) -> dict[str, str]:
    """ref -> origin of the first record of its logical topic (``origin: call stack``),
    for those of ``topics`` (ref -> topic) that hold a record. The first record of a
    topic is the first change ever seen of its table/subtype: its provenance."""
    import uuid

    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from mcq.contract import registry_client

    found: dict[str, str] = {}
    if not topics:
        return found
    consumer = Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"_mcq-provenance-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        des = AvroDeserializer(registry_client(settings))
        meta = consumer.list_topics(timeout=timeout_s).topics
        for ref, topic in topics.items():
            if topic not in meta:
                continue
            first: tuple[int, str] | None = None
            for partition in meta[topic].partitions:
                tp = TopicPartition(topic, partition)
                low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
                if high <= low:
                    continue
                consumer.assign([TopicPartition(topic, partition, low)])
                msg = consumer.poll(timeout_s)
                while msg is not None and not msg.error() and msg.value() is None and (msg.offset() or 0) + 1 < high:
                    msg = consumer.poll(timeout_s)  # a tombstone carries no provenance
                if msg is None or msg.error() or msg.value() is None:
                    continue
                value = des(msg.value(), SerializationContext(topic, MessageField.VALUE))
                source = value.get("source") or {}
                position = int(source.get("lsn") or 0)
                provenance = value.get("provenance") or {}
                origin = ": ".join(x for x in (provenance.get("origin"), provenance.get("call_stack")) if x)
                if first is None or position < first[0]:
                    first = (position, origin or "unknown")
            if first is not None:
                found[ref] = first[1]
    finally:
        consumer.close()
    return found


def record_first_seen(job: NormalizeJob) -> None:
    """First-seen provenance of the tables/subtypes whose first records are out now."""
    from mcq.registry.store import RegistryStore

    topics = {f.ref: f.topic for f in job.plan.feeds if f.ref not in job._known_refs}
    for tname, subtype, topic in job.plan.explicit_topics:
        ref = table_ref(tname, subtype)
        if ref not in job._known_refs:
            topics[ref] = topic
    found = first_records(job.settings, topics)
    if not found:
        return
    for ref, provenance in sorted(RegistryStore(job.settings).record_first_seen_all(found).items()):
        job._known_refs.add(ref)
        log.info(f"provenance: {ref} first seen from {provenance.origin.splitlines()[0]}")


def batch_line(progress: dict[str, Any], interval: str) -> str:
    """A real-time query's line per finished batch (checkpoint interval)."""
    out = (progress.get("sink") or {}).get("numOutputRows", 0)
    durations = progress.get("durationMs") or {}
    seconds = durations.get("triggerExecution", 0) / 1000
    planning = durations.get("queryPlanning", 0) / 1000
    raw = str(progress.get("name") or "").removeprefix(QUERY_PREFIX)
    return (
        f"batch {progress.get('batchId')} of {raw}: in {progress.get('numInputRows', 0)}, out {out} "
        f"(real time, checkpoint every {interval}), {seconds:.1f} s, planning {planning:.1f} s"
    )


def realtime_session(spark: SparkSession, listener: Any, job: NormalizeJob, part: NormalizePlan) -> Any:
    """The real-time queries' session: they read Kafka through the V2 source, which
    Real-Time Mode needs (streams/session.py keeps micro-batch queries on V1)."""
    fresh = spark.newSession()
    fresh.conf.set("spark.sql.streaming.disabledV2MicroBatchReaders", "")
    fresh.conf.set("spark.sql.adaptive.enabled", "false")  # not in streaming; said twice otherwise
    fresh.streams.addListener(listener)  # before the queries start: their start is news too
    for topic in ensure_raw_topics(job.settings, part.raw_topics, job.registry):
        log.info(f"normalize: created raw topic {topic} (no change captured in it yet)")
    return fresh
