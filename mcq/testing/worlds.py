"""Helpers for integration tests that capture a world of their own.

``captured_world`` creates a schema with a generated campus world, moves
examples/campus.yaml onto it (its own source, slot, publication, raw topics) and
applies capture; everything is removed afterwards.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from confluent_kafka import Consumer, TopicPartition

from mcq.capture.apply import apply_capture
from mcq.capture.connector import HEARTBEAT_TABLE, OUTBOX_TABLE, raw_topic
from mcq.capture.remove import remove_capture
from mcq.config import Settings
from mcq.registry import Registry, parse_registry
from mcq.registry.model import Source
from mcq.resources import read_text
from mcq.topics import delete_topics
from mcq.topics.read import watermarks
from mcq.world import create_schema, generate, load


@dataclass(frozen=True)
class Captured:
    registry: Registry
    source: Source
    schema: str
    registry_yaml: str

    def topic(self, table: str) -> str:
        return raw_topic(self.source, table)


def campus_registry_yaml(schema: str, token: str) -> str:
    """examples/campus.yaml moved onto a schema, source, slot and publication of the test's own."""
    return (
        read_text("examples", "campus.yaml")
        .replace("schemas: [campus]", f"schemas: [{schema}]")
        .replace("table: campus.", f"table: {schema}.")
        .replace("mcq_campus", f"mcq_t{token}")
        .replace("name: campus", f"name: t{token}")
        .replace("source: campus", f"source: t{token}")
    )


def wait_slot_active(settings: Settings, slot: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
            if row and row[0]:
                return
            time.sleep(0.5)
    raise AssertionError(f"slot {slot} never became active")


def wait_raw_records(settings: Settings, topic: str, at_least: int, timeout_s: float = 120) -> None:
    """Until Debezium has written ``at_least`` records to a raw topic: a job that reads
    the raw topics only up to their current ends (``--once``) must not start before the
    changes a test made are all there."""
    from confluent_kafka.admin import AdminClient

    from mcq.topics.read import all_watermarks

    admin = AdminClient(settings.kafka.client_config())
    deadline, count = time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        # every topic's metadata: asking for this one by name has the broker create it with its
        # defaults (3 partitions) before Debezium creates it as the connector says (1)
        meta = admin.list_topics(timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions:
            marks = all_watermarks(admin, [TopicPartition(topic, p) for p in meta.partitions])
            count = sum(high for _, high in marks.values())
            if count >= at_least:
                return
        time.sleep(0.5)
    raise AssertionError(f"{topic}: {count} records after {timeout_s:.0f} s, expected at least {at_least}")


def uncapture(settings: Settings, registry: Registry, schema: str) -> None:
    """Undo a test's capture: its sources' connectors, slots and publications (what
    ``mcq connect remove`` does), its schema, and the raw topics of its feeds and outbox."""
    remove_capture(list(registry.sources), settings)
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    delete_topics(
        settings,
        [
            raw_topic(source, table)
            for source in registry.sources
            for table in [
                *{f.table for t in registry.tables for f in t.feeds if f.source == source.name},
                OUTBOX_TABLE,
                HEARTBEAT_TABLE,
            ]
        ],
    )


@contextmanager
def captured_world(
    settings: Settings,
    people: int = 60,
    seed: int = 7,
    slot_timeout_s: float = 90,
    raw_partitions: dict[str, int] | None = None,
) -> Iterator[Captured]:
    """The campus world in a schema of its own, captured; ``raw_partitions``: campus table
    name -> its feed's ``raw_partitions``."""
    token = uuid.uuid4().hex[:8]
    schema = f"w_{token}"
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        create_schema(conn, schema)
        load(conn, schema, generate(people, seed=seed))
    text = campus_registry_yaml(schema, token)
    for table, n in (raw_partitions or {}).items():
        line = f"        table: {schema}.{table}\n"
        assert line in text, f"no feed of {table} in the campus registry"
        text = text.replace(line, f"{line}        raw_partitions: {n}\n")
    registry = parse_registry(text, "campus-test.yaml")
    source = registry.sources[0]
    apply_capture(registry, settings)
    wait_slot_active(settings, source.slot_name, slot_timeout_s)  # active once the snapshot is read
    cap = Captured(registry, source, schema, text)
    try:
        yield cap
    finally:
        uncapture(settings, registry, schema)


def read_json_events(
    settings: Settings, topic: str, want: Callable[[Any, Any], bool], expect: int, timeout_s: float = 90
) -> list[dict[str, Any]]:
    """Read a raw (JSON) topic from the beginning; keep the records `want` selects (tombstones: op None).
    A value carrying its Connect schema is given as its payload, the Debezium envelope."""
    consumer = Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    found: list[dict[str, Any]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(found) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            key = json.loads(msg.key() or b"null")
            raw = msg.value()
            value = json.loads(raw) if raw is not None else None
            if isinstance(value, dict) and set(value) == {"schema", "payload"}:
                value = value["payload"]  # JSON with its Connect schema (value.converter.schemas.enable)
            if want(key, value):
                found.append({"key": key, **(value or {"op": None})})
    finally:
        consumer.close()
    return found


def read_topic_to_end(settings: Settings, topic: str) -> list[tuple[bytes | None, bytes | None, int, int]]:
    """Every record of a topic as it is now: (key, value, partition, offset), in partition order."""
    consumer = Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: list[tuple[bytes | None, bytes | None, int, int]] = []
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = []
        marks = {p: watermarks(consumer, TopicPartition(topic, p)) for p in meta.partitions}
        for p, (low, high) in marks.items():
            if high > low:
                parts.append(TopicPartition(topic, p, low))
        if not parts:
            return out
        consumer.assign(parts)
        pending = {tp.partition for tp in parts}
        ends = {tp.partition: marks[tp.partition][1] for tp in parts}
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                pending.discard(msg.partition())
                continue
            out.append((msg.key(), msg.value(), msg.partition() or 0, msg.offset() or 0))
            if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                pending.discard(msg.partition())
    finally:
        consumer.close()
    return out
