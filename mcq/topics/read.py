"""Read a whole topic, from its beginning to its end as it is now (consoles and reports)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from mcq.config import Settings


class TopicReadError(Exception):
    """The topic could not be read to its end; the message names it and why."""


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
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions}
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, -2) for p in todo])  # -2: from the beginning
        out: list[Message] = []
        deadline = time.monotonic() + timeout_s
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
