"""Smoke tests on the real stack: capture through Debezium, Avro through the registry,
PySpark through spark-sql-kafka."""

from __future__ import annotations

import json

import httpx

from mcq.config import Settings
from mcq.demo.smoke import SMOKE_SCHEMA, SmokeNames, avro_round_trip, capture_round_trip, run_smoke
from mcq.stack import Stack
from mcq.testing.logs import log_lines
from mcq.topics import delete_topics


def test_insert_update_delete_arrive_in_kafka_in_commit_order(stack: Stack, settings: Settings) -> None:
    names = SmokeNames()
    try:
        events = capture_round_trip(settings, names)
    finally:
        delete_topics(settings, [names.cdc_topic])
    assert [e.op for e in events] == ["c", "u", "d", None]
    assert [e.offset for e in events] == sorted(e.offset for e in events)
    assert all(e.key == {"id": 1} for e in events)
    insert, update, delete, tombstone = events
    assert insert.before is None and insert.after == {"id": 1, "name": "Ada Lovelace", "status": "staff"}
    assert update.before == {"id": 1, "name": "Ada Lovelace", "status": "staff"}  # REPLICA IDENTITY FULL
    assert update.after == {"id": 1, "name": "Ada Lovelace", "status": "faculty"}
    assert delete.before == update.after and delete.after is None
    assert tombstone.after is None and tombstone.before is None
    # the capture cleaned up after itself: no connector left registered
    assert (
        names.connector
        not in httpx.get(f"{settings.connect.url}/connectors", auth=settings.connect.auth(), timeout=10).json()
    )


def test_avro_record_round_trips_through_the_registry(stack: Stack, settings: Settings, topic: str) -> None:
    try:
        trip = avro_round_trip(settings, topic)
    finally:
        delete_topics(settings, [topic])
    assert trip.received == trip.sent
    assert trip.raw[0] == 0  # Confluent wire format: magic byte, then the schema id
    assert int.from_bytes(trip.raw[1:5], "big") == trip.schema_id
    registered = httpx.get(f"{settings.registry.url}/schemas/ids/{trip.schema_id}", timeout=10).json()
    assert json.loads(registered["schema"])["name"] == SMOKE_SCHEMA["name"]
    # the subject by name: the registry's list of every subject is capped (1,000 in Apicurio)
    versions = httpx.get(f"{settings.registry.url}/subjects/{trip.subject}/versions", timeout=10)
    assert versions.status_code == 200 and versions.json(), versions.text


def test_smoke_pipeline_end_to_end_with_pyspark_reading_both_topics(stack: Stack, settings: Settings) -> None:
    with log_lines() as lines:
        result = run_smoke(settings)
    assert result.cdc_ops == ["c", "u", "d", None]
    assert result.cdc_after_names == ["Ada Lovelace", "Ada Lovelace", None, None]
    assert result.avro_rows == [{"id": 42, "name": "Grace Hopper", "status": "faculty"}]
    assert any(line.startswith("spark: read") for line in lines)
    assert lines[-1].startswith("smoke pipeline passed")
