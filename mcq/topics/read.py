"""Read a whole topic, from its beginning to its end as it is now (consoles and reports)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # .admin re-exports it without __all__

from mcq.config import Settings
from mcq.topics.exceptions import TopicReadError

__all__ = ["TopicReadError"]  # raised here, defined with its siblings


_NOT_YET = {  # what a partition answers while its leader is being elected or its broker restarts
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
    # a restarted broker bumps its partitions' leader epochs: a client that asked with the
    # epoch it knew is told so until its metadata is refreshed (seen after a broker SIGKILL)
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    # librdkafka's "Failed to query partition leaders: No leaders found" while a restarted
    # broker has not yet taken leadership of its partitions (tests/soak: a listener exited)
    KafkaError._NOENT,
}


def transient(error: BaseException) -> bool:
    """Whether ``error`` (a read error, or a Kafka client's exception) means "the broker is
    not answering right now" -- wait and ask again -- rather than a request that cannot succeed."""
    if isinstance(error, TopicReadError):
        return error.retriable
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        err = error.args[0]
        return bool(err.retriable() or err.code() in _NOT_YET)
    return False


def watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float = 30.0) -> tuple[int, int]:
    """A partition's (low, high) offsets from the broker; a topic created a moment ago may
    have no leader yet, so that answer is waited out (up to ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            return int(low), int(high)
        except KafkaException as exc:
            passing = transient(exc)
            if not passing or time.monotonic() > deadline:
                raise TopicReadError(f"reading {tp.topic}[{tp.partition}]: {exc.args[0]}", passing) from None
            time.sleep(0.5)


_STALE_EPOCH = {KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH}


class RenewingAdmin:
    """An admin client for a long-running process, made again when a broker restart left
    it with stale leader epochs: librdkafka's ListOffsets then asks again and again with
    the epoch it knew and fails FENCED_LEADER_EPOCH at every call, for ever (librdkafka
    #4620, still so in 2.16; seen here after a broker SIGKILL). A new client starts from
    fresh metadata."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self._conf = conf
        self.client = AdminClient(conf)

    def renew(self) -> None:
        self.client = AdminClient(self._conf)


def list_offsets(
    admin: AdminClient | RenewingAdmin, tps: list[TopicPartition], spec: OffsetSpec, timeout_s: float = 30.0
) -> dict[tuple[str, int], int]:
    """Each partition's offset by ``spec`` (earliest, latest, for a timestamp: -1 when no
    record is that new) in one request through the admin client, a broker restart waited
    out (up to ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        client = admin.client if isinstance(admin, RenewingAdmin) else admin
        try:
            futures = client.list_offsets({TopicPartition(t.topic, t.partition): spec for t in tps}, request_timeout=15)
            return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
        except KafkaException as exc:
            passing = transient(exc)
            if isinstance(admin, RenewingAdmin) and exc.args[0].code() in _STALE_EPOCH:
                admin.renew()
            if not passing or time.monotonic() > deadline:
                topics = sorted({t.topic for t in tps})
                raise TopicReadError(f"reading offsets of {topics}: {exc.args[0]}", passing) from None
            time.sleep(0.5)


def all_watermarks(
    admin: AdminClient | RenewingAdmin, tps: list[TopicPartition], timeout_s: float = 30.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) of many partitions in two requests, through the admin client: a consumer's
    own offset queries wait behind its outstanding fetch (``fetch.wait.max.ms``) one by one."""
    if not tps:
        return {}
    lows = list_offsets(admin, tps, OffsetSpec.earliest(), timeout_s)  # type: ignore[no-untyped-call]
    highs = list_offsets(admin, tps, OffsetSpec.latest(), timeout_s)  # type: ignore[no-untyped-call]
    return {key: (lows[key], highs[key]) for key in highs}


def _partitions(admin: AdminClient | RenewingAdmin, topics: list[str]) -> list[TopicPartition]:
    """Every partition of the existing ones of ``topics``. Topics are listed whole: asking
    a missing one by name would create it."""
    client = admin.client if isinstance(admin, RenewingAdmin) else admin
    meta = client.list_topics(timeout=30).topics
    return [TopicPartition(t, p) for t in topics if t in meta for p in meta[t].partitions]


def end_offsets(settings: Settings, topics: list[str]) -> dict[str, dict[int, int]]:
    """topic -> partition -> its end offset now, for the existing ones of ``topics``."""
    admin = RenewingAdmin(settings.kafka.client_config())
    tps = _partitions(admin, topics)
    ends = list_offsets(admin, tps, OffsetSpec.latest()) if tps else {}  # type: ignore[no-untyped-call]
    out: dict[str, dict[int, int]] = {}
    for (topic, partition), end in ends.items():
        out.setdefault(topic, {})[partition] = end
    return out


def offsets_since(settings: Settings, topics: list[str], since_ms: int) -> dict[str, dict[int, tuple[int, int]]]:
    """topic -> partition -> (the first offset written at or after ``since_ms``, the end)
    for the existing ones of ``topics``; a partition with nothing since has both at its end."""
    admin = RenewingAdmin(settings.kafka.client_config())
    tps = _partitions(admin, topics)
    if not tps:
        return {}
    ends = list_offsets(admin, tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    firsts = list_offsets(admin, tps, OffsetSpec.for_timestamp(since_ms))  # type: ignore[no-untyped-call]
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for (topic, partition), end in ends.items():
        first = firsts[(topic, partition)]
        out.setdefault(topic, {})[partition] = (end if first < 0 else first, end)  # -1: nothing since
    return out


def records_held(settings: Settings, topics: list[str]) -> int:
    """Records the existing ones of ``topics`` hold now (high - low watermark of every
    partition). Topics are listed whole: asking a missing one by name would create it."""
    return records_after(settings, topics, {})


def records_after(settings: Settings, topics: list[str], offsets: dict[str, dict[str, int]]) -> int:
    """Records the existing ones of ``topics`` hold at or after ``offsets`` (topic ->
    partition as text -> offset, Spark's form: a reader's next offset); a partition it does
    not name counts from its low watermark."""
    admin = AdminClient(settings.kafka.client_config())
    tps = _partitions(admin, topics)
    return sum(
        high - min(high, max(low, offsets.get(topic, {}).get(str(partition), low)))
        for (topic, partition), (low, high) in all_watermarks(admin, tps).items()
    )


def assign_now(consumer: Consumer, partitions: list[TopicPartition], timeout_s: float = 15.0) -> None:
    """Assign ``partitions``, their leaders known first. A consumer assigned a partition it
    has no metadata for defers the partition's offset query by librdkafka's 500 ms timer
    ("no current leader for partition: (re)starting offset query timer"): a new consumer's
    first record came 0.45-0.50 s after its assignment here, and 2-4 ms after it once the
    topic's metadata was asked for first (one request per topic; a consumer's metadata
    request never creates a topic)."""
    for topic in dict.fromkeys(tp.topic for tp in partitions):
        consumer.list_topics(topic, timeout=timeout_s)
    consumer.assign(partitions)


def take_fetched(consumer: Consumer, timeout_s: float, most: int = 1000) -> list[Message] | None:
    """What the consumer has fetched, up to ``most`` records in one call (a call per record
    cost more than the record: most of a scheduled run's start-up), waiting up to
    ``timeout_s`` for the first only; partition-end events left out. None when nothing came.
    A consumer error raises :class:`TopicReadError` naming the partition.

    ``consume(most, timeout)`` alone waits until it has ``most`` records *or* the whole
    timeout passed: every catch-up of a few records (a scheduled run's tail, a projection
    store before each batch) waited the full timeout, 0.5 s each."""
    first = consumer.poll(timeout_s)
    if first is None:
        return None
    messages = [first, *consumer.consume(most - 1, 0)] if most > 1 else [first]
    out: list[Message] = []
    for msg in messages:
        err = msg.error()
        if err is None:
            out.append(msg)
        elif err.code() != KafkaError._PARTITION_EOF:
            raise TopicReadError(f"reading {msg.topic()}[{msg.partition()}]: {err}", transient(KafkaException(err)))
    return out


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


def _reader(settings: Settings) -> Consumer:
    return Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"_mcq-reader-{uuid.uuid4().hex}",  # never commits
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **BULK_FETCH,
        }
    )


def read_batches(
    settings: Settings,
    ends: dict[tuple[str, int], int],
    timeout_s: float = 120.0,
    consumer: Consumer | None = None,
    starts: dict[tuple[str, int], int] | None = None,
) -> Iterator[list[Message]]:
    """Batches of the records of every partition in ``ends`` (topic, partition -> offset)
    from its offset in ``starts`` (default: its earliest) to before its end offset, in
    offset order within a partition. TopicReadError when no record comes for ``timeout_s``
    before the ends. ``consumer``: one to read with (left open; partition-end events on),
    else one of :func:`_reader`'s."""
    starts = starts or {}
    todo = {tp for tp, end in ends.items() if end > max(0, starts.get(tp, 0))}
    if not todo:
        return
    own = consumer is None
    consumer = _reader(settings) if consumer is None else consumer
    try:  # -2: the earliest offset
        assign_now(consumer, [TopicPartition(t, p, starts.get((t, p), -2)) for t, p in sorted(todo)])
        last_seen = time.monotonic()
        while todo:
            # the first record waited for, the rest taken as fetched (take_fetched: consume(1000,
            # 0.5) alone waits the whole 0.5 s for a batch the tail never fills; this one keeps
            # the partition-end events, which end a partition whose last records compaction removed)
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
                if offset >= ends.get(tp, 0):  # written after the end taken
                    todo.discard(tp)
                    continue
                batch.append(msg)
                if offset + 1 >= ends[tp]:
                    todo.discard(tp)
            if batch:
                yield batch
    finally:
        if own:
            consumer.close()


def read_to_end(
    settings: Settings, topic: str, timeout_s: float = 60.0, partitions: list[int] | None = None
) -> list[Message]:
    """Every record of ``topic`` (of ``partitions`` only, when given) before its end as it
    is now, in offset order within a partition; [] if it does not exist. TopicReadError
    when no record comes for ``timeout_s`` before the ends."""
    consumer = _reader(settings)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        wanted = meta.partitions if partitions is None else [p for p in partitions if p in meta.partitions]
        ends = {(topic, p): watermarks(consumer, TopicPartition(topic, p), timeout_s)[1] for p in wanted}
        return [msg for batch in read_batches(settings, ends, timeout_s, consumer) for msg in batch]
    finally:
        consumer.close()
