"""The change contract in the registry: topic name strategy, enforced compatibility."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import fastavro
import pytest

from mcq.config import Settings
from mcq.contract import SchemaRefused, parsed, register, register_topic, registry_client, schema_text
from mcq.stack import Stack


def test_key_and_record_register_under_the_topic_name_strategy_with_backward_compatibility(
    stack: Stack, settings: Settings, topic: str
) -> None:
    client = registry_client(settings)
    key_id, value_id = register_topic(client, topic)
    assert client.get_latest_version(f"{topic}-key").schema_id == key_id
    assert client.get_latest_version(f"{topic}-value").schema_id == value_id
    assert client.get_compatibility(f"{topic}-value") == "BACKWARD"
    assert register_topic(client, topic) == (key_id, value_id)  # idempotent


def test_a_compatible_evolution_is_accepted(stack: Stack, settings: Settings, topic: str) -> None:
    client = registry_client(settings)
    register_topic(client, topic)
    evolved = parsed("change_record")
    evolved["fields"].append({"name": "reason", "type": ["null", "string"], "default": None})
    new_id = register(client, f"{topic}-value", json.dumps(evolved))
    assert client.get_latest_version(f"{topic}-value").schema_id == new_id
    assert len(client.get_versions(f"{topic}-value")) == 2


def test_an_incompatible_evolution_is_refused_with_a_clear_message(
    stack: Stack, settings: Settings, topic: str
) -> None:
    client = registry_client(settings)
    register_topic(client, topic)
    broken = parsed("change_record")
    broken["fields"].append({"name": "reason", "type": "string"})  # no default: old records cannot be read
    with pytest.raises(SchemaRefused) as err:
        register(client, f"{topic}-value", json.dumps(broken))
    message = str(err.value)
    assert f"subject {topic}-value" in message and "BACKWARD" in message and "reason" in message
    assert len(client.get_versions(f"{topic}-value")) == 1


def test_a_change_record_round_trips_through_the_schema() -> None:
    schema = fastavro.parse_schema(json.loads(schema_text("change_record")))
    record = {
        "tname": "PERSON", "subtype": "Telephone", "change_type": "UPDATE", "person_id": 42,
        "pkey_string": None, "pkey_number": None, "aux_string": "campus",
        "entry_time": datetime(2026, 11, 22, 13, 30, tzinfo=UTC),
        "source": {"last_commit_lsn": 100, "lsn": 196, "txid": 7, "table": "campus.directory_telephone"},
        "after": {"phone_number": "+1 518 276 0002", "tele_type": "campus"},
        "before": {"phone_number": "+1 518 276 0001", "tele_type": "campus"},
        "provenance": {"origin": "table campus.directory_telephone", "call_stack": None},
    }  # fmt: skip
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, record)
    buf.seek(0)
    assert fastavro.schemaless_reader(buf, schema) == record
