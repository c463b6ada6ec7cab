"""What Kafka tells a client it refuses: an admin's metadata request, a consumer's read and a
producer's write, each as the error text a test can check."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
)


def refusal_of(conf: dict[str, Any], timeout_s: float = 10.0) -> str:
    """What a client of CONF is told when it asks for metadata: an error within TIMEOUT_S
    (a refusal, not a hang), and what the client reported meanwhile."""
    seen: list[str] = []
    admin = AdminClient({**conf, "error_cb": lambda err: seen.append(str(err))})
    started = time.monotonic()
    with pytest.raises(KafkaException) as caught:
        admin.list_topics(timeout=timeout_s)
    assert time.monotonic() - started < timeout_s + 5
    admin.poll(1)  # serves the error callbacks
    return " | ".join([str(caught.value), *seen])


def consume_error(conf: dict[str, Any], group: str, topic: str, timeout_s: float = 30.0) -> KafkaError:
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                return msg.error()
        raise AssertionError(f"no error within {timeout_s:.0f} s reading {topic} in group {group}")
    finally:
        consumer.close()


def produce_error(conf: dict[str, Any], topic: str) -> str:
    errors: list[str] = []
    producer = Producer({**conf, "message.timeout.ms": 15000})
    try:
        producer.produce(topic, key=b"k", value=b"v", on_delivery=lambda err, _: errors.append(str(err)))
    except KafkaException as exc:
        return str(exc)
    producer.flush(20)
    assert errors and errors[0] != "None", f"a write to {topic} was accepted"
    return errors[0]
