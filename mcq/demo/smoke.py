"""The smoke pipeline: proof that every part of the stack does real work together.

1. capture  — a table in the source database, a Debezium connector registered through
   Connect's REST API, then an insert, an update and a delete that must arrive in Kafka
   in that order (the delete followed by its tombstone);
2. registry — an Avro record produced and consumed through the schema registry by
   confluent-kafka (Confluent wire format: magic byte, schema id, Avro body);
3. spark    — PySpark reading both topics through spark-sql-kafka, decoding the CDC
   JSON with from_json and the Avro records with spark-avro's from_avro.

Every step uses names of its own (schema, table, slot, publication, topics, subject),
so it can run beside anything else on the same cluster, and cleans up after itself.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mcq.capture.connector import RAW_TOPIC_ROOT, raw_topic_durability
from mcq.config import Settings
from mcq.connect_rest import ConnectClient, ConnectError, debezium_postgres_source
from mcq.errors import McqError
from mcq.topics.plan import delete_topics

log = logging.getLogger(__name__)


SMOKE_SCHEMA = {
    "type": "record",
    "name": "SmokePing",
    "namespace": "mcq.smoke",
    "doc": "A record that proves the registry round trip.",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "status", "type": ["null", "string"], "default": None},
    ],
}


class SmokeFailed(McqError):
    """A smoke step did not see what it should; the message says which step and what."""


@dataclass(frozen=True)
class SmokeNames:
    """Unique names for one smoke run, so runs never collide."""

    token: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    @property
    def schema(self) -> str:
        return f"smoke_{self.token}"

    @property
    def table(self) -> str:
        return "person"

    @property
    def connector(self) -> str:
        return f"mcq-smoke-{self.token}"

    @property
    def slot(self) -> str:
        return f"mcq_smoke_{self.token}"

    @property
    def publication(self) -> str:
        return f"mcq_smoke_{self.token}"

    @property
    def topic_prefix(self) -> str:
        return f"{RAW_TOPIC_ROOT}.smoke-{self.token}"  # raw CDC topics: what the Connect worker may write

    @property
    def cdc_topic(self) -> str:
        return f"{self.topic_prefix}.{self.schema}.{self.table}"

    @property
    def avro_topic(self) -> str:
        return f"smoke-{self.token}.avro"


@dataclass(frozen=True)
class CdcEvent:
    """One record of a Debezium topic, as Kafka delivered it."""

    offset: int
    key: dict[str, Any] | None
    op: str | None  # c, u, d, r; None for a tombstone
    before: dict[str, Any] | None
    after: dict[str, Any] | None


# ------------------------------------------------------------------ step 1: capture


def _pg(settings: Settings) -> Any:
    import psycopg

    return psycopg.connect(settings.source.dsn(), autocommit=True, connect_timeout=5)


@contextmanager
def captured_table(settings: Settings, names: SmokeNames) -> Iterator[None]:
    """A source table with a RUNNING Debezium connector on it; all of it removed after."""
    with _pg(settings) as conn:
        conn.execute(f'CREATE SCHEMA "{names.schema}"')
        conn.execute(
            f'CREATE TABLE "{names.schema}".{names.table} (id integer PRIMARY KEY, name text NOT NULL, status text)'
        )
        # before-images of updates and deletes need the whole old row
        conn.execute(f'ALTER TABLE "{names.schema}".{names.table} REPLICA IDENTITY FULL')
    log.info(f"capture: created table {names.schema}.{names.table} in {settings.source}")
    config = debezium_postgres_source(
        settings.source,
        topic_prefix=names.topic_prefix,
        slot_name=names.slot,
        publication_name=names.publication,
        tables=[f"{names.schema}.{names.table}"],
        **{"snapshot.mode": "no_data", **raw_topic_durability(settings)},
    )
    with ConnectClient(settings.connect) as connect:
        try:
            connect.put(names.connector, config)
            connect.wait_running(names.connector)
            _wait_slot_active(settings, names.slot)
            log.info(f"capture: connector {names.connector} RUNNING, slot {names.slot} streaming")
            yield
        finally:
            connect.delete(names.connector)
            _drop_capture(settings, names)


def _wait_slot_active(settings: Settings, slot: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    with _pg(settings) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
            if row and row[0]:
                return
            time.sleep(0.3)
    raise SmokeFailed(f"capture: replication slot {slot} did not become active in {timeout_s:.0f} s")


def _drop_capture(settings: Settings, names: SmokeNames) -> None:
    with _pg(settings) as conn:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the slot stays active until the task has stopped
            row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (names.slot,)).fetchone()
            if row is None:
                break
            if not row[0]:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (names.slot,))
                break
            time.sleep(0.3)
        conn.execute(f'DROP PUBLICATION IF EXISTS "{names.publication}"')
        conn.execute(f'DROP SCHEMA IF EXISTS "{names.schema}" CASCADE')


def change_rows(settings: Settings, names: SmokeNames) -> None:
    """Insert, update and delete one row, each its own transaction."""
    t = f'"{names.schema}".{names.table}'
    with _pg(settings) as conn:
        conn.execute(f"INSERT INTO {t} (id, name, status) VALUES (1, 'Ada Lovelace', 'staff')")
        conn.execute(f"UPDATE {t} SET status = 'faculty' WHERE id = 1")
        conn.execute(f"DELETE FROM {t} WHERE id = 1")
    log.info(f"capture: committed insert, update, delete of {t} id=1")


def read_cdc(settings: Settings, topic: str, expect: int, timeout_s: float = 60.0) -> list[CdcEvent]:
    """Read a Debezium topic from the beginning until `expect` records arrived."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"mcq-smoke-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    events: list[CdcEvent] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(events) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            raw_key, raw_value = msg.key(), msg.value()
            key = json.loads(raw_key) if raw_key else None
            value = json.loads(raw_value) if raw_value is not None else None
            events.append(
                CdcEvent(
                    offset=msg.offset() or 0,
                    key=key,
                    op=value.get("op") if value else None,
                    before=value.get("before") if value else None,
                    after=value.get("after") if value else None,
                )
            )
    finally:
        consumer.close()
    return events


def capture_round_trip(settings: Settings, names: SmokeNames) -> list[CdcEvent]:
    """Step 1: insert, update, delete in the source arrive in Kafka in commit order."""
    with captured_table(settings, names):
        change_rows(settings, names)
        events = read_cdc(settings, names.cdc_topic, expect=4)
    log.info(f"capture: {names.cdc_topic} holds {[e.op or 'tombstone' for e in events]}")
    if [e.op for e in events] != ["c", "u", "d", None]:
        raise SmokeFailed(f"capture: expected c, u, d, tombstone on {names.cdc_topic}, got {[e.op for e in events]}")
    return events


# ------------------------------------------------------------------ step 2: registry


@dataclass(frozen=True)
class AvroRoundTrip:
    sent: dict[str, Any]
    received: dict[str, Any]
    schema_id: int
    subject: str
    raw: bytes


def avro_round_trip(settings: Settings, topic: str) -> AvroRoundTrip:
    """Step 2: produce an Avro record through the registry and consume it back."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = SchemaRegistryClient(settings.registry.client_config())
    schema_str = json.dumps(SMOKE_SCHEMA)
    serializer = AvroSerializer(registry, schema_str)
    deserializer = AvroDeserializer(registry)
    sent = {"id": 42, "name": "Grace Hopper", "status": "faculty"}
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer(settings.kafka.client_config())
    payload = serializer(sent, ctx)
    assert payload is not None
    producer.produce(topic, key=b"42", value=payload)
    if producer.flush(15) != 0:
        raise SmokeFailed(f"registry: the Avro record to {topic} was not delivered")
    subject = f"{topic}-value"
    schema_id = registry.get_latest_version(subject).schema_id
    if schema_id is None:
        raise SmokeFailed(f"registry: {subject} has no schema id")
    log.info(f"registry: registered {subject} as schema id {schema_id} at {settings.registry.url}")

    consumer = Consumer(
        {**settings.kafka.client_config(), "group.id": f"mcq-smoke-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            raw = msg.value()
            if raw is None:
                continue
            received = deserializer(raw, ctx)
            log.info(f"registry: consumed {received} from {topic}")
            return AvroRoundTrip(sent, received, schema_id, subject, raw)
    finally:
        consumer.close()
    raise SmokeFailed(f"registry: nothing consumed from {topic} in 30 s")


# ------------------------------------------------------------------ step 3: spark


@dataclass(frozen=True)
class SparkRead:
    cdc_ops: list[str | None]
    cdc_after_names: list[str | None]
    avro_rows: list[dict[str, Any]]


def spark_read(settings: Settings, cdc_topic: str, avro_topic: str) -> SparkRead:
    """Step 3: PySpark reads both topics through spark-sql-kafka (batch, from earliest)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from streams.session import spark_session

    spark = spark_session(settings, "mcq-smoke")
    try:

        def read(topic: str) -> Any:
            return (
                spark.read.format("kafka")
                .options(**settings.kafka.spark_read_options())
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("endingOffsets", "latest")
                .load()
            )

        row = "STRUCT<id INT, name STRING, status STRING>"
        envelope = f"op STRING, before {row}, after {row}"
        cdc = (
            read(cdc_topic)
            .select("offset", F.from_json(F.col("value").cast("string"), envelope).alias("e"))
            .orderBy("offset")
            .select("e.op", "e.after.name")
            .collect()
        )
        # Confluent wire format: 1 magic byte + 4-byte schema id, then the Avro body
        avro = (
            read(avro_topic)
            .select(from_avro(F.expr("substring(value, 6, length(value) - 5)"), json.dumps(SMOKE_SCHEMA)).alias("r"))
            .select("r.*")
            .collect()
        )
    finally:
        spark.stop()
    result = SparkRead(
        cdc_ops=[r["op"] for r in cdc],
        cdc_after_names=[r["name"] for r in cdc],
        avro_rows=[r.asDict() for r in avro],
    )
    log.info(f"spark: read {cdc_topic} ops {result.cdc_ops}; {avro_topic} rows {result.avro_rows}")
    return result


# ------------------------------------------------------------------ the whole pipeline


def run_smoke(settings: Settings, names: SmokeNames | None = None) -> SparkRead:
    """Run all three steps; raise :class:`SmokeFailed` naming the first that fails."""
    names = names or SmokeNames()
    started = time.monotonic()
    try:
        capture_round_trip(settings, names)
        trip = avro_round_trip(settings, names.avro_topic)
        if trip.received != trip.sent:
            raise SmokeFailed(f"registry: sent {trip.sent}, received {trip.received}")
        result = spark_read(settings, names.cdc_topic, names.avro_topic)
        if result.cdc_ops != ["c", "u", "d", None] or result.avro_rows != [trip.sent]:
            raise SmokeFailed(f"spark: unexpected rows {result}")
    except ConnectError as exc:
        raise SmokeFailed(f"capture: {exc}") from None
    finally:
        delete_topics(settings, [names.cdc_topic, names.avro_topic])
    log.info(f"smoke pipeline passed in {time.monotonic() - started:.1f} s")
    return result
