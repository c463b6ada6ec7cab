"""Read a whole topic, from its beginning to its end as it is now (consoles and reports)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # .admin re-exports it without __all__

from mcq.config import Settings


class TopicReadError(Exception):
    """The topic could not be read to its end; the message names it and why."""


_NOT_YET = {  # what a partition answers while its leader is being elected
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}


def watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float = 30.0) -> tuple[int, int]:
    """A partition's (low, high) offsets from the broker; a topic created a moment ago may
    have no leader yet, so that answer is waited out (up to ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0]
            passing = isinstance(err, KafkaError) and (err.retriable() or err.code() in _NOT_YET)
            if not passing or time.monotonic() > deadline:
                raise TopicReadError(f"reading {tp.topic}[{tp.partition}]: {err}") from None
            time.sleep(0.5)


def all_watermarks(
    admin: AdminClient, tps: list[TopicPartition], timeout_s: float = 30.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) of many partitions in two requests, through the admin client: a consumer's
    own offset queries wait behind its outstanding fetch (``fetch.wait.max.ms``) one by one."""
    if not tps:
        return {}
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            answers = []
            for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):  # type: ignore[no-untyped-call]
                futures = admin.list_offsets({TopicPartition(t.topic, t.partition): spec for t in tps},
                                             request_timeout=15)  # fmt: skip
                answers.append({(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()})
            return {key: (answers[0][key], answers[1][key]) for key in answers[1]}
        except KafkaException as exc:
            err = exc.args[0]
            passing = isinstance(err, KafkaError) and (err.retriable() or err.code() in _NOT_YET)
            if not passing or time.monotonic() > deadline:
                raise TopicReadError(f"reading offsets of {sorted({t.topic for t in tps})}: {err}") from None
            time.sleep(0.5)


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
            raise TopicReadError(f"reading {msg.topic()}[{msg.partition()}]: {err}")
    return out


def read_to_end(settings: Settings, topic: str, timeout_s: float = 60.0) -> list[Message]:
    """Every record of ``topic`` (partition by partition in offset order); [] if it does not exist."""
    consumer = Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"_mcq-reader-{uuid.uuid4().hex}",  # never commits
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        ends = {p: watermarks(consumer, TopicPartition(topic, p), timeout_s)[1] for p in meta.partitions}
        deadline = time.monotonic() + timeout_s
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, -2) for p in todo])  # -2: from the beginning
        out: list[Message] = []
        while todo:
            if time.monotonic() > deadline:
                raise TopicReadError(f"reading {topic}: not at its end after {timeout_s:.0f} s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    todo.discard(msg.partition() or 0)
                    continue
                raise TopicReadError(f"reading {topic}: {err}")
            out.append(msg)
            if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                todo.discard(msg.partition() or 0)
        return out
    finally:
        consumer.close()
