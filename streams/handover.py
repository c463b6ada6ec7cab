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
import shutil
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
ASK_POLL_S = 0.05
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
    _write_text(path, json.dumps(content))


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
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
    if owner.get("host") == me["host"] and not _alive(owner.get("pid")):
        return None  # gone: a crash on this host
    return owner


def _alive(pid: object) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, killed and not yet reaped, does not)."""
    try:
        os.kill(int(str(pid)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, ValueError):
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


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


def answer(
    checkpoint: Path, me: dict[str, Any], to: dict[str, Any], since_ms: int, flushed: bool, fences: str | None = None
) -> None:
    """The running instance has stopped writing for ``to``; what its queries wrote after
    their last checkpoints was written after ``since_ms``; ``fences``: what it wrote, as
    its gate counted (``fence_lines``' format), when Kafka acknowledged all of it."""
    done = {"from": me, "to": to["id"], "since_ms": since_ms, "flushed": flushed, "fences": fences}
    _write(_dir(checkpoint) / "done.json", done)
    with contextlib.suppress(OSError):
        (_dir(checkpoint) / "request.json").unlink()


def wait_answer(
    checkpoint: Path, me: dict[str, Any], old: dict[str, Any], stopped: Callable[[], bool], poll_s: float = 0.05
) -> dict[str, Any] | None:
    """The old instance's answer to ``me``; None when it died first (its lease went stale)
    or ``stopped`` says this instance is stopping."""
    while not stopped():
        gone = holder(checkpoint, me) is None  # looked at first: an answer comes before the lease goes
        done = _read(_dir(checkpoint) / "done.json")
        if done is not None and done.get("to") == me["id"]:
            return done
        if gone:
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
                "fetch.wait.max.ms": 10,  # the tails are there: no waiting for more
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


def _gate(spark: SparkSession) -> Any:
    jvm: Any = spark._jvm
    return jvm.mcq.spark.HandOverGate


def can_gate(spark: SparkSession) -> bool:
    """Whether the tasks run in the driver's JVM (a local master), where the gate is."""
    if not str(spark.sparkContext.master).startswith("local"):
        return False
    try:
        return isinstance(_gate(spark).isOpen(), bool)
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
    gate = _gate(spark)
    gate.close()
    acknowledged = bool(gate.awaitSent(1000))
    return acknowledged, str(gate.passed()) if acknowledged and int(gate.failed()) == 0 else None


def fence_lines(fences: Fences) -> str:
    return "".join(
        f"{raw}\t{partition}\t{topic}\t{offset}\t{','.join(sorted(k.hex() for k in keys))}\n"
        for (raw, partition, topic), (offset, keys) in sorted(fences.items())
    )


def copy_checkpoint(checkpoint: Path) -> tuple[Path, int]:
    """A copy of the real-time queries' checkpoints for a take-over's queries, and when
    the oldest batch not committed in it began (ms): what was written since may be the
    old instance's, in a batch the copy does not know as committed."""
    from streams.checkpoint import clear_torn_writes, realtime_dir

    source = realtime_dir(checkpoint)
    copy = checkpoint / f"realtime.{uuid.uuid4().hex[:8]}"
    if source.is_dir():
        shutil.copytree(source, copy)
    else:
        copy.mkdir(parents=True)
    clear_torn_writes(copy)
    since = time.time()
    for query in [p for p in copy.iterdir() if p.is_dir()]:
        commits = [p for p in (query / "commits").glob("[0-9]*") if p.name.isdigit()]
        newest = max(commits, key=lambda p: int(p.name)) if commits else query / "metadata"
        with contextlib.suppress(OSError):
            since = min(since, newest.stat().st_mtime)
    return copy, int(since * 1000)


def make_current(checkpoint: Path, copy: Path) -> None:
    """The take-over's copy is the real-time checkpoint from now on; the old one goes."""
    from streams.checkpoint import REALTIME_POINTER, realtime_dir

    before = realtime_dir(checkpoint)
    _write_text(checkpoint / REALTIME_POINTER, copy.name)
    if before != copy:
        shutil.rmtree(before, ignore_errors=True)


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
    answered: threading.Event = dataclasses.field(default_factory=threading.Event)
    """Set once ``watch`` answered an ask: the queries, held at the gate, are to stop."""
    asked_by: dict[str, Any] | None = None
    """An ask ``watch`` left to the driver's loop (``give_over``)."""
    _unwatch: threading.Event | None = None
    copy: Path | None = None
    """The checkpoint copy the take-over's queries run on (``hold``)."""
    copy_since_ms: int = 0
    handed_to: str | None = None

    def __post_init__(self) -> None:
        self.lease = Lease(self.checkpoint, self.me)
        self.taking_over = holder(self.checkpoint, self.me)

    def who(self, instance: dict[str, Any]) -> str:
        return f"{instance.get('id')} (pid {instance.get('pid')} on {instance.get('host')})"

    def hold(self, spark: SparkSession) -> Path:
        """Before the take-over: close the gate and copy the checkpoint the queries then
        start from, held at the gate (returns the copy's directory)."""
        _gate(spark).close()
        self.copy, self.copy_since_ms = copy_checkpoint(self.checkpoint)
        return self.copy

    def take_over(
        self, settings: Settings, topics: list[str], report: Callable[[str], None], stopped: Callable[[], bool],
        spark: SparkSession | None = None,
    ) -> None:  # fmt: skip
        """Ask the running instance to hand over, wait for its answer and hold the lease.
        ``spark``: the queries started from ``hold``'s copy wait at the gate, which opens
        with the fences of what the old instance wrote (``topics``: every topic they
        write). Without: nothing runs on the checkpoint yet."""
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
            if self.copy is not None:
                shutil.rmtree(self.copy, ignore_errors=True)
            return
        self.lease.hold()
        waited = time.monotonic() - began
        fences = ""
        if done is None:
            report(f"normalize: {self.who(old)} stopped beating its lease: resuming from the checkpoint")
        elif spark is None or self.copy is None or not done.get("flushed"):
            report(
                f"normalize: took over from {self.who(old)} after {waited:.1f} s; it may have written its last "
                "records before its checkpoint: they may come again"
            )
        elif done.get("fences") is not None:  # its gate counted what it wrote
            fences = str(done["fences"])
            report(
                f"normalize: took over from {self.who(old)} after {waited:.2f} s; what it wrote after its last "
                f"checkpoint is not written again ({fences.count(chr(10))} raw partition/topic fences, its gate's)"
            )
        else:
            since = min(int(done["since_ms"]), self.copy_since_ms) - TAIL_MARGIN_MS
            fences = fence_lines(read_fences(settings, topics, since))
            report(
                f"normalize: took over from {self.who(old)} after {waited:.2f} s; what it wrote after its last "
                f"checkpoint is not written again ({fences.count(chr(10))} raw partition/topic fences, read from "
                f"the topics in {time.monotonic() - began - waited:.1f} s)"
            )
        if spark is not None and self.copy is not None:
            make_current(self.checkpoint, self.copy)
            _gate(spark).open(fences)

    def give_over(
        self, to: dict[str, Any], spark: SparkSession, queries: list[Any], realtime: Callable[[Any], bool],
        stop_all: Callable[[list[Any]], None], report: Callable[[str], None], started: dict[str, int],
        fallback_ms: int, gate: bool,
    ) -> None:  # fmt: skip
        """Stop writing for ``to``, then answer: a micro-batch query stops between two
        batches (a batch it wrote is then committed); the real-time ones' gate closes for
        good and Kafka acknowledges the records that passed it (``gate``; else, or when
        they are not within a second, the queries stop and the producers close, sending
        what they hold).
        The answer says when the oldest batch in flight began (``started``: each run's
        start, by run id, in ms; ``fallback_ms``: how long a batch may last, for a run not
        known there). The real-time queries stop after it."""
        began = time.monotonic()
        report(f"normalize: handing over to {self.who(to)}")
        for query in [q for q in queries if not realtime(q)]:
            deadline = time.monotonic() + 60
            while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.02)
            query.stop()
        running = [q for q in queries if realtime(q)]
        progress = {str(q.runId): q.lastProgress for q in running}
        closed, fences = close_for_good(spark) if gate else (False, None)
        if not closed:
            stop_all(running)
        flushed = flush_producers(spark)
        stopped_ms = int(time.time() * 1000)
        since_ms = stopped_ms - fallback_ms
        for run_id, last in progress.items():  # its batch in flight began when its last one did, or later
            begun = started.get(run_id)
            with contextlib.suppress(KeyError, TypeError, ValueError):
                begun = int(datetime.fromisoformat(last["timestamp"]).timestamp() * 1000)
            since_ms = since_ms if begun is None else min(since_ms, begun)
        answer(self.checkpoint, self.me, to, since_ms, flushed, fences)  # then the lease: no gap for a crash to show in
        self.lease.release()
        self.handed_to = str(to.get("id"))
        how = (
            "its gate closed, every record it let through acknowledged"
            if closed
            else f"its queries stopped{'' if not gate else f'; {_gate(spark).passing()} records unacknowledged'}"
        )
        report(f"normalize: handed over to {self.who(to)} in {time.monotonic() - began:.2f} s ({how})")
        if closed:
            stop_all(running)  # held at the gate: nothing they do is written any more
        queries.clear()

    def watch(self, spark: SparkSession | None, ordered: Callable[[], bool], report: Callable[[str], None]) -> None:
        """Look for an ask every ``ASK_POLL_S`` in a thread of its own. With the gate
        (``spark``) and no micro-batch query (``ordered``), answer it there: close the gate
        for good, wait until Kafka acknowledged what passed it, answer with what that was
        (``answered``). Otherwise, or when that does not hold within a second, leave it to
        the driver's loop (``asked_by``: ``give_over``)."""

        stop = self._unwatch = threading.Event()

        def run() -> None:
            while self.handed_to is None and not stop.is_set():
                to = asked(self.checkpoint, self.me)
                if to is None:
                    stop.wait(ASK_POLL_S)
                    continue
                began = time.monotonic()
                if spark is not None and not ordered():
                    report(f"normalize: handing over to {self.who(to)}")
                    _, fences = close_for_good(spark)
                    if fences is not None:  # all it let through is in Kafka
                        answer(self.checkpoint, self.me, to, int(time.time() * 1000), True, fences)
                        self.lease.release()
                        self.handed_to = str(to.get("id"))
                        report(
                            f"normalize: handed over to {self.who(to)} in {time.monotonic() - began:.2f} s (its "
                            "gate closed, every record it let through acknowledged)"
                        )
                        self.answered.set()
                        return
                self.asked_by = to
                return

        threading.Thread(target=run, name="mcq-normalize-handover", daemon=True).start()

    def unwatch(self) -> None:
        """Stop ``watch``'s thread (the queries it watched for are stopping)."""
        if self._unwatch is not None:
            self._unwatch.set()
