"""Hand-over: a second normaliser of one checkpoint takes over from the running one
without a stall of its start-up, a gap or a duplicate (a deploy, a rolling update).

The running instance holds a lease in the checkpoint directory (``handover/owner.json``,
beaten every second). A new instance that finds a live lease starts its Spark session
and builds its queries first (the seconds a cold start costs), then asks
(``handover/request.json``). The old instance stops its queries (a micro-batch query
between two batches), closes Spark's pooled Kafka producers, which sends every record it
wrote (``flush_producers``), and answers (``handover/done.json``) with the moment it
stopped. The new instance reads what the old one wrote since its last checkpoint from
the output topics' tails (every record carries ``mcq.raw``: its raw topic, partition
and offset) and starts from the checkpoint with a fence per raw partition and output
topic: a record the old instance already wrote is not written again (``Fences``).

A real-time task writes its raw partition's records in offset order through one
producer, so what landed for an output topic is a prefix of that order: below the
highest raw offset seen, all; at it, the keys seen (one raw record may write two keys).
With executors of their own (a cluster master) their producers are not the driver's to
close: the new instance then starts without fences and may write the old one's last
records again (a compacted topic, applied idempotently, absorbs them).

A lease that is not beaten for ``LEASE_S`` (or whose process is gone, on this host) is
a crash: the new instance resumes from the checkpoint at once."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcq.change import RAW_HEADER

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from mcq.config import Settings

LEASE_S = 10.0
"""A lease not beaten for this long is a crashed instance's."""
BEAT_S = 1.0
TAIL_MARGIN_MS = 30_000
"""Read the output topics' tails from this long before the old instance's oldest batch
in flight began (clocks of two hosts, a record's create time)."""

Fences = dict[tuple[str, int, str], tuple[int, frozenset[bytes]]]
"""(raw topic, raw partition, output topic) -> (the highest raw offset the old instance
wrote there, the keys it wrote at that offset)."""


def new_instance() -> dict[str, Any]:
    return {"id": uuid.uuid4().hex[:12], "pid": os.getpid(), "host": socket.gethostname()}


def _dir(checkpoint: Path) -> Path:
    return checkpoint / "handover"


def _write(path: Path, content: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(content))
    tmp.replace(path)  # whole or not at all: another instance reads it


def _read(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def holder(checkpoint: Path, me: dict[str, Any]) -> dict[str, Any] | None:
    """The other instance that holds the lease on ``checkpoint`` and is alive, if any."""
    owner = _read(_dir(checkpoint) / "owner.json")
    if owner is None or owner.get("id") == me["id"]:
        return None
    if time.time() - float(owner.get("beat", 0)) > LEASE_S:
        return None
    if owner.get("host") == me["host"]:
        try:
            os.kill(int(owner["pid"]), 0)
        except ProcessLookupError:
            return None  # gone: a crash on this host
        except (PermissionError, OSError, ValueError):
            pass
    return owner


class Lease:
    """This instance's lease on a checkpoint, beaten every ``BEAT_S`` by a thread."""

    def __init__(self, checkpoint: Path, me: dict[str, Any]) -> None:
        self.path = _dir(checkpoint) / "owner.json"
        self.me = me
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self) -> None:
        if self._thread is not None:
            return
        self._beat()
        self._thread = threading.Thread(target=self._run, name="mcq-normalize-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        _write(self.path, {**self.me, "beat": time.time()})

    def _run(self) -> None:
        while not self._stop.wait(BEAT_S):
            with contextlib.suppress(OSError):
                self._beat()

    def release(self) -> None:
        """Stop beating and give the lease up (a clean stop or a hand-over)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        owner = _read(self.path)
        if owner is not None and owner.get("id") == self.me["id"]:
            with contextlib.suppress(OSError):
                self.path.unlink()


def ask(checkpoint: Path, me: dict[str, Any]) -> None:
    """Ask the running instance to hand over to ``me``."""
    with contextlib.suppress(OSError):
        (_dir(checkpoint) / "done.json").unlink()
    _write(_dir(checkpoint) / "request.json", {**me, "at": time.time()})


def asked(checkpoint: Path, me: dict[str, Any]) -> dict[str, Any] | None:
    """The instance that asked ``me`` (the running one) to hand over, if one did."""
    request = _read(_dir(checkpoint) / "request.json")
    return request if request is not None and request.get("id") != me["id"] else None


def answer(checkpoint: Path, me: dict[str, Any], to: dict[str, Any], since_ms: int, flushed: bool) -> None:
    """The running instance has stopped its queries for ``to``; what they wrote after their
    last checkpoints was written after ``since_ms``."""
    _write(_dir(checkpoint) / "done.json", {"from": me, "to": to["id"], "since_ms": since_ms, "flushed": flushed})
    with contextlib.suppress(OSError):
        (_dir(checkpoint) / "request.json").unlink()


def wait_answer(
    checkpoint: Path, me: dict[str, Any], old: dict[str, Any], stopped: Callable[[], bool], poll_s: float = 0.05
) -> dict[str, Any] | None:
    """The old instance's answer to ``me``; None when it died first (its lease went stale)
    or ``stopped`` says this instance is stopping."""
    while not stopped():
        done = _read(_dir(checkpoint) / "done.json")
        if done is not None and done.get("to") == me["id"]:
            return done
        if holder(checkpoint, me) is None:
            return None
        time.sleep(poll_s)
    return None


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
    """What the old instance wrote to ``topics`` since ``since_ms``, by raw partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from mcq.topics.read import offsets_since

    spans = offsets_since(settings, topics, since_ms)
    wanted = [
        TopicPartition(t, p, first) for t, parts in spans.items() for p, (first, end) in parts.items() if first < end
    ]
    ends = {(t, p): end for t, parts in spans.items() for p, (_, end) in parts.items()}
    fences: dict[tuple[str, int, str], tuple[int, set[bytes]]] = {}
    if wanted:
        consumer = Consumer(
            {
                **settings.kafka.client_config(),
                "group.id": f"_mcq-handover-{uuid.uuid4().hex}",  # never commits
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        try:
            consumer.assign(wanted)
            todo = {(tp.topic, tp.partition) for tp in wanted}
            deadline = time.monotonic() + 120
            while todo and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 0.5):
                    where = (msg.topic() or "", msg.partition() or 0)
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            todo.discard(where)
                            continue
                        raise RuntimeError(f"reading {where[0]}[{where[1]}]: {err}")
                    if (msg.offset() or 0) + 1 >= ends[where]:
                        todo.discard(where)
                    raw = dict(msg.headers() or []).get(RAW_HEADER)
                    if not isinstance(raw, bytes):
                        continue
                    raw_topic, _, rest = raw.decode().rpartition("[")
                    partition, _, offset = rest.partition("]@")
                    fence = (raw_topic, int(partition), where[0])
                    seen, keys = fences.get(fence, (-1, set()))
                    if int(offset) > seen:
                        fences[fence] = (int(offset), {msg.key() or b""})
                    elif int(offset) == seen:
                        keys.add(msg.key() or b"")
            if todo:
                raise RuntimeError(f"reading the output topics' tails: {sorted(todo)} not at their end after 120 s")
        finally:
            consumer.close()
    return {fence: (offset, frozenset(keys)) for fence, (offset, keys) in fences.items()}


def fenced(fences: Fences, raw_topics: list[str], key: Column) -> Column | None:
    """The records (of a query of ``raw_topics``) the old instance already wrote: true for
    them. Columns: ``raw_topic``, ``raw_partition``, ``raw_offset``, ``r.topic``; ``key``
    the record's key as written. None: no fence concerns these raw topics."""
    from pyspark.sql import functions as F

    out: Column | None = None
    for (raw_topic, partition, topic), (offset, keys) in sorted(fences.items()):
        if raw_topic not in raw_topics:
            continue
        at = F.col("raw_offset") < F.lit(offset)
        if keys:
            at = at | ((F.col("raw_offset") == F.lit(offset)) & key.isin([F.lit(bytearray(k)) for k in sorted(keys)]))
        one = (
            (F.col("raw_topic") == F.lit(raw_topic))
            & (F.col("raw_partition") == F.lit(partition))
            & (F.col("r.topic") == F.lit(topic))
            & at
        )
        out = one if out is None else out | one
    return out


@dataclasses.dataclass
class HandOver:
    """One normaliser instance's part in hand-overs: the lease it holds, the instance it
    takes over from, the one it handed over to."""

    checkpoint: Path
    idle: bool = False
    """After a hand-over, stay up (not ready) until stopped rather than end."""
    me: dict[str, Any] = dataclasses.field(default_factory=new_instance)
    lease: Lease = dataclasses.field(init=False)
    taking_over: dict[str, Any] | None = None
    """The running instance found at start, until it answered."""
    fences: Fences | None = None
    handed_to: str | None = None

    def __post_init__(self) -> None:
        self.lease = Lease(self.checkpoint, self.me)
        self.taking_over = holder(self.checkpoint, self.me)

    def who(self, instance: dict[str, Any]) -> str:
        return f"{instance.get('id')} (pid {instance.get('pid')} on {instance.get('host')})"

    def take_over(
        self, settings: Settings, topics: list[str], report: Callable[[str], None], stopped: Callable[[], bool],
    ) -> None:  # fmt: skip
        """Ask the running instance to hand over, wait for its answer, hold the lease and
        read the fences (``topics``: every topic the queries write). Nothing runs on the
        checkpoint meanwhile."""
        old = self.taking_over
        if old is None:
            self.lease.hold()
            return
        began = time.monotonic()
        report(f"normalize: started beside {self.who(old)}: asking it to hand over")
        ask(self.checkpoint, self.me)
        done = wait_answer(self.checkpoint, self.me, old, stopped)
        self.taking_over = None
        if stopped():
            return
        self.lease.hold()
        if done is None:
            report(f"normalize: {self.who(old)} stopped beating its lease: resuming from the checkpoint")
            return
        waited = time.monotonic() - began
        if not done.get("flushed"):
            report(
                f"normalize: took over from {self.who(old)} after {waited:.1f} s; its executors were its own, so "
                "its last records may be written again"
            )
            return
        self.fences = read_fences(settings, topics, int(done["since_ms"]) - TAIL_MARGIN_MS)
        report(
            f"normalize: took over from {self.who(old)} after {waited:.1f} s; what it wrote after its last "
            f"checkpoint is not written again ({len(self.fences)} raw partition/topic fences, read in "
            f"{time.monotonic() - began - waited:.1f} s)"
        )

    def give_over(
        self, to: dict[str, Any], spark: SparkSession, queries: list[Any], realtime: Callable[[Any], bool],
        stop_all: Callable[[list[Any]], None], report: Callable[[str], None], started: dict[str, int],
        fallback_ms: int,
    ) -> None:  # fmt: skip
        """Stop ``queries`` for ``to``: a micro-batch query between two batches (a batch it
        wrote is then committed), the real-time ones at once; close the producers, then answer
        with the moment the oldest batch in flight began (``started``: each run's start, by run
        id, in ms; ``fallback_ms``: how long a batch may last, for a run not known there)."""
        began = time.monotonic()
        report(f"normalize: handing over to {self.who(to)}")
        for query in [q for q in queries if not realtime(q)]:
            deadline = time.monotonic() + 60
            while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.02)
            query.stop()
        running = [q for q in queries if realtime(q)]
        progress = {str(q.runId): q.lastProgress for q in running}
        stop_all(running)
        queries.clear()
        flushed = flush_producers(spark)
        stopped_ms = int(time.time() * 1000)
        since_ms = stopped_ms - fallback_ms
        for run_id, last in progress.items():  # its batch in flight began when its last one did, or later
            begun = started.get(run_id)
            with contextlib.suppress(KeyError, TypeError, ValueError):
                begun = int(datetime.fromisoformat(last["timestamp"]).timestamp() * 1000)
            since_ms = since_ms if begun is None else min(since_ms, begun)
        self.lease.release()
        answer(self.checkpoint, self.me, to, since_ms, flushed)
        self.handed_to = str(to.get("id"))
        report(f"normalize: handed over to {self.who(to)} in {time.monotonic() - began:.1f} s")
