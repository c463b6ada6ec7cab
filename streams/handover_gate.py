"""The Spark side of a hand-over (``streams/handover.py``): the gate every real-time
record passes (jvm/spark-gate's ``HandOverGate``), which holds a new instance's records
until the old one stopped and counts what the old one's producers had acknowledged; the
fences that say what the old one wrote; Spark's pooled producers, closed to send what they
hold; the tasks a held query runs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcq.change import RAW_HEADER

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from mcq.config import Settings

Fences = dict[tuple[str, int, str], tuple[int, frozenset[bytes]]]
"""(raw topic, raw partition, output topic) -> (the highest raw offset the old instance
wrote there, the keys it wrote at that offset)."""


def flush_producers(spark: SparkSession) -> bool:
    """Close the driver JVM's pooled Kafka producers (Spark's Kafka sink), which sends what
    they hold. True when the tasks ran in the driver (a local master), so nothing else
    holds records."""
    if not str(spark.sparkContext.master).startswith("local"):
        return False
    jvm: Any = spark._jvm
    pool = jvm.org.apache.spark.util.Utils.classForName(
        "org.apache.spark.sql.kafka010.producer.InternalKafkaProducerPool$", True, False
    )
    pool.getField("MODULE$").get(None).reset()
    return True


def read_fences(settings: Settings, topics: list[str], since_ms: int) -> Fences:
    """What the old instance wrote to ``topics`` since ``since_ms``, by raw partition: the
    highest raw offset in any output partition. Only for an old instance that stopped
    writing with everything it sent acknowledged (its producers closed)."""
    tails, _ = _tails(settings, topics, since_ms)
    return {at: _at(list(parts.values()), max(o for o, _ in parts.values())) for at, parts in tails.items()}


def read_landed(settings: Settings, topics: list[str], since_ms: int) -> str:
    """What a crashed instance wrote to ``topics`` since ``since_ms`` and Kafka has: the
    gate's fences per output partition (``landed_lines``)."""
    return landed_lines(*_tails(settings, topics, since_ms))


Tails = dict[tuple[str, int, str], dict[int, tuple[int, frozenset[bytes]]]]
"""(raw topic, raw partition, output topic) -> output partition -> the highest raw offset
written there and the keys at it."""


def landed_lines(tails: Tails, partitions: dict[str, int]) -> str:
    """The gate's fences after a crash, one per raw partition, output topic and output
    partition (``partitions``: each output topic's count). Its producer lost what it had in
    flight: a record of one output partition may be lost while a later one of another
    landed. Per output partition, what landed is a prefix of what it sent (an idempotent
    producer keeps a partition's order), so each partition's highest raw offset is its
    own fence, and a partition with none has none: a record not in Kafka is written
    again, never taken as written."""
    return "".join(
        f"{raw}\t{partition}\t{topic}\t{offset}\t{','.join(sorted(k.hex() for k in keys))}\t{out}\t"
        f"{partitions[topic]}\n"
        for (raw, partition, topic), by_partition in sorted(tails.items())
        for out, (offset, keys) in sorted(by_partition.items())
    )


def tail_reader(settings: Settings, fetch_wait_ms: int, partition_eof: bool = False) -> Any:
    """A consumer of the output topics for the fences: a group of its own that never
    commits; a fetch at a partition's end waits ``fetch_wait_ms``."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"_mcq-handover-{uuid.uuid4().hex}",  # never commits
            "enable.auto.commit": False,
            "fetch.wait.max.ms": fetch_wait_ms,
            "enable.partition.eof": partition_eof,
        }
    )


def _tails(settings: Settings, topics: list[str], since_ms: int) -> tuple[Tails, dict[str, int]]:
    """What was written to ``topics`` since ``since_ms`` (every record carries ``mcq.raw``:
    its raw topic, partition and offset), and each topic's partitions."""
    from mcq.topics.read import offsets_since, read_batches

    spans = offsets_since(settings, topics, since_ms)
    todo = [(t, p, first, end) for t, parts in spans.items() for p, (first, end) in parts.items() if first < end]
    seen: Seen = {}
    if todo:
        consumer = tail_reader(settings, fetch_wait_ms=10, partition_eof=True)  # the tails are there: no waiting
        try:  # a standby reads the tails on a crash: not a moment to wait for
            starts, ends = {(t, p): first for t, p, first, _ in todo}, {(t, p): end for t, p, _, end in todo}
            for batch in read_batches(settings, ends, timeout_s=120, consumer=consumer, starts=starts):
                for msg in batch:
                    note_landed(seen, msg)
        finally:
            consumer.close()
    tails = {at: {p: (o, frozenset(keys)) for p, (o, keys) in parts.items()} for at, parts in seen.items()}
    return tails, {topic: len(parts) for topic, parts in spans.items()}


Seen = dict[tuple[str, int, str], dict[int, tuple[int, set[bytes]]]]
"""``Tails`` as a reader builds them."""


def note_landed(seen: Seen, msg: Any) -> tuple[tuple[str, int, str], int] | None:
    """Note an output record in ``seen`` by its ``mcq.raw`` header (its raw topic, partition
    and offset); returns where it counts (raw topic, raw partition, output topic) and its
    raw offset, None for a record without the header (not a normaliser's)."""
    raw = dict(msg.headers() or []).get(RAW_HEADER)
    if not isinstance(raw, bytes):
        return None
    raw_topic, _, rest = raw.decode().rpartition("[")
    partition, _, offset = rest.partition("]@")
    at = (raw_topic, int(partition), msg.topic() or "")
    by_partition = seen.setdefault(at, {})
    out = msg.partition() or 0
    highest, keys = by_partition.get(out, (-1, set()))
    if int(offset) > highest:
        by_partition[out] = (int(offset), {msg.key() or b""})
    elif int(offset) == highest:
        keys.add(msg.key() or b"")
    return at, int(offset)


def _at(offsets: list[tuple[int, frozenset[bytes]]], offset: int) -> tuple[int, frozenset[bytes]]:
    """The fence at ``offset``: the keys of every output partition whose highest it is."""
    return offset, frozenset().union(*(keys for at, keys in offsets if at == offset))


GATE = "mcq.spark.HandOverGate"
"""jvm/spark-gate: holds the real-time queries' records until the old instance stopped."""


def gated(key: Column) -> Column:
    """False for a record the old instance wrote already; waits while the gate is closed.
    Columns: ``raw_topic``, ``raw_partition``, ``raw_offset``, ``topic`` (where it is
    written); ``key`` the record's key as written."""
    from pyspark.sql import functions as F

    written = F.reflect(
        F.lit(GATE), F.lit("written"), F.col("raw_topic"), F.col("raw_partition").cast("int"), F.col("topic"),
        F.col("raw_offset").cast("long"), F.hex(key),
    )  # fmt: skip
    return written != F.lit("true")


def gate_of(spark: SparkSession) -> Any:
    jvm: Any = spark._jvm
    return jvm.mcq.spark.HandOverGate


def can_gate(spark: SparkSession) -> bool:
    """Whether the tasks run in the driver's JVM (a local master), where the gate is."""
    if not str(spark.sparkContext.master).startswith("local"):
        return False
    try:
        return isinstance(gate_of(spark).isOpen(), bool)
    except Exception:  # py4j: the class is not on the class path
        return False


def await_tasks(spark: SparkSession, expected: int, stopped: Callable[[], bool], timeout_s: float = 180) -> int:
    """Wait until ``expected`` tasks run (the held queries' real-time tasks, one per raw
    partition: then a record waits at the gate, not for a query's first batch to be
    planned); returns how many ran when it stopped waiting."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout_s
    running = 0
    while not stopped() and time.monotonic() < deadline:
        stages = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
        running = sum(stage.numActiveTasks for stage in stages if stage is not None)
        if running >= expected:
            break
        time.sleep(0.1)
    return running


def close_for_good(spark: SparkSession) -> tuple[bool, str | None]:
    """Close this instance's gate for good; whether Kafka acknowledged every record that
    passed it within a second, and then, if none failed, what it wrote (the next
    instance's fences, ``fence_lines``' format)."""
    gate = gate_of(spark)
    gate.close()
    acknowledged = bool(gate.awaitSent(1000))
    return acknowledged, str(gate.passed()) if acknowledged and int(gate.failed()) == 0 else None


def fence_lines(fences: Fences) -> str:
    return "".join(
        f"{raw}\t{partition}\t{topic}\t{offset}\t{','.join(sorted(k.hex() for k in keys))}\n"
        for (raw, partition, topic), (offset, keys) in sorted(fences.items())
    )
