"""The batch jobs' direct engine: what ``streams/laststate.py`` computes in Spark, read by one
consumer in this process, for topics small enough that a Spark start costs more than the read.

A Spark session, its JVM and the first plan take 5-15 s here before a record is read;
20,000 last states are read and decoded in about a second by a consumer. The semantics
are those of the Spark engine, record for record: a key's state is its record with the
highest offset (compaction keeps one, a key lives in one partition) before the ends given,
a DELETE record or a tombstone is no live state, the listener's applied positions are the
last value per key text. Which engine runs is chosen by the number of records to read
(:func:`records_to_read`); ``--engine`` chooses it by hand.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from mcq import jsontext
from mcq.change import Change, ChangeCodec, ChangeKey, Position
from mcq.config import Settings
from mcq.registry.model import LogicalTable
from mcq.topics.exceptions import TopicError, TopicReadError

ENGINES = ("auto", "spark", "direct")
DIRECT_MAX_RECORDS = 250_000
"""Records to read up to which ``auto`` reads them directly. Measured (``bench/batch_jobs.py``):
a direct read and decode runs at 60,000-100,000 records/s in one Python thread, a Spark
job's start alone is 5-15 s; at this size both take a few seconds, above it Spark's
parallel read and COPY by file win."""

TP = tuple[str, int]

BULK_FETCH = {
    "fetch.max.bytes": 100 * 1024 * 1024,
    "max.partition.fetch.bytes": 10 * 1024 * 1024,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 256 * 1024,
}
"""A whole topic read at once: big fetches, and librdkafka's queue kept full ahead of the
Python loop. Measured (300,000 records, 3 partitions, the stack's broker): 1.0-1.1 s to read
them all against 1.8-2.7 s with librdkafka's defaults, which fetch in 1 MiB steps and keep
only 100,000 messages queued."""


def choose(engine: str, records: int) -> str:
    """``spark`` or ``direct`` for ``engine`` (one of :data:`ENGINES`) and the records to read."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    if engine != "auto":
        return engine
    return "direct" if records <= DIRECT_MAX_RECORDS else "spark"


def records_to_read(settings: Settings, ends: dict[TP, int]) -> int:
    """Records between each partition's earliest offset and its end in ``ends`` (an upper
    bound: compaction leaves gaps)."""
    from confluent_kafka.admin import AdminClient

    from mcq.topics.read import all_watermarks

    if not ends:
        return 0
    admin = AdminClient(settings.kafka.client_config())
    marks = all_watermarks(admin, [TopicPartition(t, p) for t, p in ends])
    return sum(max(0, ends[tp] - low) for tp, (low, _) in marks.items() if tp in ends)


def _records(settings: Settings, ends: dict[TP, int], timeout_s: float = 120.0) -> Iterator[list[Message]]:
    """Batches of the records of every partition in ``ends`` before its end offset."""
    todo = {tp for tp, end in ends.items() if end > 0}
    if not todo:
        return
    consumer = Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"_mcq-direct-{uuid.uuid4().hex}",  # never commits
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **BULK_FETCH,
        }
    )
    try:
        consumer.assign([TopicPartition(t, p, -2) for t, p in sorted(todo)])  # -2: the earliest offset
        last_seen = time.monotonic()
        while todo:
            # the first record waited for, the rest taken as fetched (mcq.topics.read.take_fetched:
            # consume(1000, 0.5) alone waits the whole 0.5 s for a batch the tail never fills;
            # this one keeps the partition-end events, which end a partition whose last records
            # compaction removed)
            first = consumer.poll(0.5)
            messages = [first, *consumer.consume(999, 0)] if first is not None else []
            if not messages:
                if time.monotonic() - last_seen > timeout_s:
                    raise TopicReadError(
                        f"reading {', '.join(f'{t}[{p}]' for t, p in sorted(todo))}: no record for {timeout_s:.0f} s "
                        "before the end offsets"
                    )
                continue
            last_seen = time.monotonic()
            batch = []
            for msg in messages:
                tp = (msg.topic() or "", msg.partition() or 0)
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        todo.discard(tp)
                        continue
                    raise TopicReadError(f"reading {tp[0]}[{tp[1]}]: {err}")
                offset = msg.offset() or 0
                if offset >= ends.get(tp, 0):
                    todo.discard(tp)
                    continue
                batch.append(msg)
                if offset + 1 >= ends[tp]:
                    todo.discard(tp)
            if batch:
                yield batch
    finally:
        consumer.close()


@dataclass(frozen=True)
class LastState:
    """A key's last record before the ends: whether it is a live state, and if so its change."""

    key: ChangeKey
    change: Change | None
    """Its state as an UPDATE carrying the after-state and position; None: not live."""


def last_states(
    settings: Settings, codec: ChangeCodec, ends: dict[TP, int], tables: Iterable[LogicalTable]
) -> list[LastState]:
    """The last state of every key of ``tables`` in the partitions of ``ends`` (their records
    before those offsets), as ``streams.laststate.last_records`` gives it."""
    wanted = {(t.tname, t.subtype) for t in tables}
    by_bytes: dict[bytes, tuple[int, Message]] = {}  # key bytes -> (offset, the message)
    for batch in _records(settings, ends):
        for msg in batch:
            key = msg.key()
            if key is not None:
                by_bytes[key] = (msg.offset() or 0, msg)  # offsets rise within a partition
    newest: dict[ChangeKey, tuple[int, Message]] = {}
    for offset, msg in by_bytes.values():
        k = codec.decode_key(msg.topic() or "", msg.partition() or 0, offset, msg.key())
        if (k.tname, k.subtype) in wanted and (k not in newest or newest[k][0] < offset):
            newest[k] = (offset, msg)
    now = datetime.now(UTC)
    out = []
    for k, (offset, msg) in newest.items():
        body = msg.value()
        value = None if body is None else codec.decode_value(msg.topic() or "", msg.partition() or 0, offset, body)
        if value is None or value["change_type"] == "DELETE":
            out.append(LastState(k, None))
            continue
        source = value["source"]
        position = Position(int(source["last_commit_lsn"]), int(source["lsn"]))
        out.append(LastState(k, Change(k, "UPDATE", position, now, k.ref, after=dict(value.get("after") or {}))))
    return out


def applied_held(settings: Settings, topic: str, tables: Iterable[LogicalTable]) -> dict[str, str]:
    """A listener's applied positions of the keys of ``tables``: key text -> the last value
    (``commit/lsn[/+digest]``, ``/-`` when not at the target); marks left out."""
    from mcq.topics.read import read_to_end

    wanted = {(t.tname, t.subtype) for t in tables}
    last: dict[str, str | None] = {}
    for msg in read_to_end(settings, topic):
        key = msg.key()
        if key is None or not key.startswith(b"{"):  # park:/dead:/exposed: marks
            continue
        body = msg.value()
        last[key.decode()] = body.decode() if body is not None else None
    out = {}
    for text, value in last.items():
        if value is None:
            continue
        k = ChangeKey.from_text(text)
        if (k.tname, k.subtype) in wanted:
            out[text] = value
    return out


def applied_diff(loaded: dict[str, Position], held: dict[str, str]) -> dict[str, str]:
    """What the applied positions must say where they do not already: every key ``loaded``
    at its position, every other key ``held`` at the target, absent (``/-`` appended)."""
    writes = {}
    for text, position in loaded.items():
        value = f"{position.last_commit_lsn}/{position.lsn}"
        if held.get(text) != value:
            writes[text] = value
    for text, value in held.items():
        if text not in loaded and not value.endswith("/-"):
            writes[text] = value + "/-"
    return writes


def write_applied(settings: Settings, topic: str, writes: dict[str, str]) -> None:
    """Write applied-position records as the listener does (its producer's partitioner:
    librdkafka's default, CRC-32 of the key); raises unless every one was acknowledged."""
    if not writes:
        return
    failed: list[str] = []

    def delivered(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer({**settings.kafka.client_config(), "enable.idempotence": True, "linger.ms": 20})
    for text, value in writes.items():
        while True:
            try:
                producer.produce(topic, key=text.encode(), value=value.encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(60)
    if left or failed:
        raise TopicError(
            f"writing {topic}: {left} record(s) not acknowledged after 60 s"
            if left
            else f"writing {topic}: {len(failed)} record(s) refused, first: {failed[0]}"
        )


def csv_rows(states: Iterable[Change]) -> Iterator[bytes]:
    """The ``table`` target's COPY rows (``TableAdapter.COPY_COLUMNS``) of ``states``, as CSV
    chunks: a NULL is an empty field, every text quoted (an empty text is ``""``); the state
    as JSON through :mod:`mcq.jsontext` (a fifth of the time of the standard library's)."""

    def field(value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, int):
            return str(value)
        return '"' + str(value).replace('"', '""') + '"'

    lines: list[str] = []
    for c in states:
        k = c.key
        row = (
            k.text(), k.tname, k.subtype, k.person_id, k.pkey_string, k.pkey_number, k.aux_string,
            jsontext.dumps(c.after).decode(), c.position.last_commit_lsn, c.position.lsn,
        )  # fmt: skip
        lines.append(",".join(map(field, row)))
        if len(lines) >= 5000:
            yield ("\n".join(lines) + "\n").encode()
            lines = []
    if lines:
        yield ("\n".join(lines) + "\n").encode()
