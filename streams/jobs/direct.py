"""The batch jobs' direct engine: what ``streams/laststate.py`` computes in Spark, read by one
consumer in this process, for topics whose records fit in its memory.

A Spark session, its JVM and the first plan take 5-15 s here before a record is read;
20,000 last states are read and decoded in about a second by a consumer, and on 2 cores a
direct read of 1,000,000 beats a Spark job too (:data:`DIRECT_MAX_RECORDS`). The semantics
are those of the Spark engine, record for record: a key's state is its record with the
highest offset (compaction keeps one, a key lives in one partition) before the ends given,
a DELETE record or a tombstone is no live state, the listener's applied positions are the
last value per key text. Which engine runs is chosen by the number of records to read
(:func:`records_to_read`); ``--engine`` chooses it by hand.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from consumers.runtime.view import ListenerView, project
from mcq import jsontext
from mcq.change import Change, ChangeCodec, ChangeKey, Position
from mcq.config import Settings
from mcq.registry.model import LogicalTable
from mcq.topics.exceptions import TopicError
from mcq.topics.read import read_batches

ENGINES = ("auto", "spark", "direct")
DIRECT_MAX_RECORDS = 1_500_000
"""Records to read up to which ``auto`` reads them directly. Measured (2026-12-05, this
2-core machine, 1,000,000 keys of a ``table`` target, `mcq rebuild --truncate` start to exit):
51-60 s read directly, 81 s in a Spark job (its CSV 38 s, COPY 12 s, applied positions 6 s,
the start); COPY alone 12-13 s. Since each row is written from its record (:func:`table_rows`),
17-18 s against COPY's 5.6-5.8 s and a warm Spark job's 35 s (`bench.batch_jobs`). A direct
read holds the records it reads: 1.3 GB of memory at 1,000,000, so above this a Spark job
(bounded memory, executors on a cluster) reads them."""

TP = tuple[str, int]


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


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic collector paused while a job holds a whole topic's records: every
    full collection walks all of them again, and with a million held it was half of a
    read's time (1,000,000 last states: 51 s, 25 s paused). Nothing the read allocates
    forms a cycle; what one left is collected when the collector runs again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class LiveStates:
    """The live last state of every key of ``tables`` in the partitions of ``ends`` (their
    records before those offsets), as ``streams.laststate.last_records`` gives it: an
    iterable of UPDATEs carrying the after-state and position, decoded one at a time as
    they are taken (a COPY sends each while the next is decoded). After the iteration,
    :attr:`records` and :attr:`keys` say what was read.

    A key's record is found by its key bytes; a value record carries its key's fields, so
    the key is read from the value, and a key whose last record is a tombstone or a DELETE
    is not decoded at all. Only where the keys were written in more than one key schema,
    and the same key may have two spellings, are the keys decoded to find each one's last."""

    def __init__(self, settings: Settings, codec: ChangeCodec, ends: dict[TP, int], tables: Iterable[LogicalTable]):
        self.settings = settings
        self.codec = codec
        self.ends = ends
        self.wanted = {(t.tname, t.subtype) for t in tables}
        self.records = 0
        self.keys = 0

    def _newest(self) -> Iterable[Message]:
        """Each key's record with the highest offset."""
        by_bytes: dict[bytes, Message] = {}  # key bytes -> its last record (offsets rise within a partition)
        for batch in read_batches(self.settings, self.ends):
            self.records += len(batch)
            for msg in batch:
                key = msg.key()
                if key is not None:
                    by_bytes[key] = msg
        if len({key[:5] for key in by_bytes}) <= 1:  # one key schema (magic byte, schema id): bytes are keys
            self.keys = len(by_bytes)
            return by_bytes.values()
        newest: dict[ChangeKey, Message] = {}
        for msg in by_bytes.values():
            offset = msg.offset() or 0
            k = self.codec.decode_key(msg.topic() or "", msg.partition() or 0, offset, msg.key())
            if k not in newest or (newest[k].offset() or 0) < offset:
                newest[k] = msg
        self.keys = len(newest)
        return newest.values()

    def values(self) -> Iterator[dict[str, Any]]:
        """The live last states as their decoded value records (what :meth:`__iter__` makes
        changes of), one at a time as they are taken."""
        wanted, decode = self.wanted, self.codec.decode_value
        for msg in self._newest():
            body = msg.value()
            if body is None:  # a tombstone
                continue
            value = decode(msg.topic() or "", msg.partition() or 0, msg.offset() or 0, body)
            if value["change_type"] != "DELETE" and (value["tname"], value.get("subtype")) in wanted:
                yield value

    def __iter__(self) -> Iterator[Change]:
        now = datetime.now(UTC)
        for value in self.values():
            yield state_of(value, now)


def state_of(value: dict[str, Any], now: datetime) -> Change:
    """The live state a value record carries, as an UPDATE (``streams.laststate.live_changes``)."""
    k = ChangeKey.from_record(value)
    source = value["source"]
    position = Position(int(source["last_commit_lsn"]), int(source["lsn"]))
    return Change(k, "UPDATE", position, now, k.ref, after=value.get("after") or {})


def applied_held(settings: Settings, topic: str, tables: Iterable[LogicalTable]) -> dict[str, str]:
    """A listener's applied positions of the keys of ``tables``: key text -> the last value
    (``commit/lsn[/+digest]``, ``/-`` when not at the target); marks left out. A key's
    table is told by how its text ends (:meth:`ChangeKey.ref_tail`), without parsing it."""
    from mcq.topics.read import read_to_end

    tails = tuple(ChangeKey.ref_tail(t.tname, t.subtype).encode() for t in tables)
    last: dict[bytes, bytes | None] = {}
    for msg in read_to_end(settings, topic):
        key = msg.key()
        if key is not None and key.startswith(b"{") and key.endswith(tails):  # not park:/dead:/exposed: marks
            last[key] = msg.value()
    return {key.decode(): value.decode() for key, value in last.items() if value is not None}


def applied_diff(loaded: dict[str, str], held: dict[str, str]) -> dict[str, str]:
    """What the applied positions must say where they do not already: every key ``loaded``
    at its position (``commit/lsn``), every other key ``held`` at the target, absent (``/-``
    appended)."""
    writes = {}
    for text, value in loaded.items():
        if held.get(text) != value:
            writes[text] = value
    for text, value in held.items():
        if text not in loaded and not value.endswith("/-"):
            writes[text] = value + "/-"
    return writes


BATCH = 10_000
"""Applied positions handed to librdkafka at once (``produce_batch``): 4.3 µs a record
against 7 µs one ``produce`` at a time (300,000 records, the stack's broker); the partition
of each is the same (librdkafka's partitioner either way, checked key by key)."""


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
    records: list[dict[str, Any]] = [{"key": text.encode(), "value": value.encode()} for text, value in writes.items()]
    for start in range(0, len(records), BATCH):
        batch = records[start : start + BATCH]
        while batch:
            if producer.produce_batch(topic, batch, on_delivery=delivered) == len(batch):
                break
            refused = [m for m in batch if "_error" in m]  # librdkafka's queue full: the rest waits for room
            for m in refused:
                err = m.pop("_error")
                if err.code() != KafkaError._QUEUE_FULL:
                    raise TopicError(f"writing {topic}: a record refused: {err}")
            batch = refused
            producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(60)
    if left or failed:
        raise TopicError(
            f"writing {topic}: {left} record(s) not acknowledged after 60 s"
            if left
            else f"writing {topic}: {len(failed)} record(s) refused, first: {failed[0]}"
        )


def _quoted(text: str | None) -> str:
    return "" if text is None else '"' + text.replace('"', '""') + '"'


def _number(value: int | None) -> str:
    return "" if value is None else str(value)


def table_rows(values: Iterable[dict[str, Any]], view: ListenerView, loaded: dict[str, str]) -> Iterator[bytes]:
    """The ``table`` target's COPY rows (``TableAdapter.COPY_COLUMNS``), as CSV chunks, of the
    live states in ``values`` (:meth:`LiveStates.values`) the listener's view admits, with the
    columns it sees (``ListenerView.see`` of a key not at the target); each row's position
    noted in ``loaded`` by its key text (``commit/lsn``).

    A NULL is an empty field, every text quoted (an empty text is ``""``); the state as JSON
    through :mod:`mcq.jsontext`. A table no content rule chooses rows of is written from the
    record itself, no change made of it: 1,000,000 rows in about half the time."""
    now, dumps = datetime.now(UTC), jsontext.dumps
    lines: list[str] = []
    for value in values:
        tname, subtype = value["tname"], value.get("subtype")
        verdict = view.unruled(tname, subtype)
        if verdict is None:  # a content rule chooses the rows: the view sees each
            seen = view.see(state_of(value, now), False)[0]
            if seen is None:
                continue
            after = seen.after
        elif verdict.interests:
            after = project(value.get("after") or {}, verdict.columns)
        else:
            continue
        source = value["source"]
        commit, lsn = int(source["last_commit_lsn"]), int(source["lsn"])
        text = ChangeKey.record_text(value)
        loaded[text] = f"{commit}/{lsn}"
        lines.append(
            f"{_quoted(text)},{_quoted(tname)},{_quoted(subtype)},{_number(value.get('person_id'))},"
            f"{_quoted(value.get('pkey_string'))},{_number(value.get('pkey_number'))},"
            f"{_quoted(value.get('aux_string'))},{_quoted(dumps(after).decode())},{commit},{lsn}"
        )
        if len(lines) >= 5000:
            yield ("\n".join(lines) + "\n").encode()
            lines = []
    if lines:
        yield ("\n".join(lines) + "\n").encode()
