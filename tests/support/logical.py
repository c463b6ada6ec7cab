"""The logical topics as a test reads them: every record decoded, and the last state per key."""

from __future__ import annotations

from typing import Any

from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mcq.config import Settings
from mcq.contract import registry_client
from mcq.refs import KEY_FIELDS
from mcq.testing.worlds import read_topic_to_end

KeyT = tuple[Any, ...]


def decode_topic(settings: Settings, topic: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(key, value) of every record, in offset order within each partition."""
    des = AvroDeserializer(registry_client(settings))
    out = []
    for key, value, _, _ in read_topic_to_end(settings, topic):
        k = des(key, SerializationContext(topic, MessageField.KEY))
        v = des(value, SerializationContext(topic, MessageField.VALUE)) if value is not None else None
        out.append((k, v))
    return out


def key_tuple(key: dict[str, Any]) -> KeyT:
    return tuple(key[f] for f in ("tname", "subtype", *KEY_FIELDS))


def last_state(records: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> dict[KeyT, dict[str, Any]]:
    state: dict[KeyT, dict[str, Any]] = {}
    for k, v in records:
        if v is None or v["change_type"] == "DELETE":
            state.pop(key_tuple(k), None)
        else:
            state[key_tuple(k)] = v
    return state
