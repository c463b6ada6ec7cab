"""A user's own table with a column of each type (NULLs, fractions of a second before
the epoch, JSON, arrays), created by the test and captured only through
``apply_capture`` (registry -> replica identity -> connector), as a user's table would be."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from confluent_kafka import Producer

from mcq.capture.apply import apply_capture
from mcq.capture.connector import raw_topic
from mcq.config import Settings
from mcq.registry import Registry, parse_registry
from mcq.testing.worlds import uncapture, wait_slot_active

if TYPE_CHECKING:
    from consumers.runtime.listener import ListenerRuntime

# nullable columns with defaults: Debezium puts a column's DEFAULT in its Connect schema, and
# Kafka Connect's Struct.get and JsonConverter answer a NULL with it unless told not to
COLUMNS = {
    "id": "integer PRIMARY KEY",
    "born": "date DEFAULT '2000-01-01'",
    "seen": "timestamp DEFAULT '2001-02-03 04:05:06'",
    "seen_ms": "timestamp(3)",
    "changed": "timestamptz",
    "opens": "time DEFAULT '08:00'",
    "amount": "numeric(12,2) DEFAULT 9.99",
    "active": "boolean DEFAULT true",
    "ref": "uuid",
    "doc": "jsonb",
    "tags": "text[]",
    "n": "integer DEFAULT 7",
    "note": "text DEFAULT 'none'",
    "addr": "inet",
    "code": "char(4)",
    "ratio": "numeric",  # unconstrained: the only numeric that holds an infinity
    "span": "interval",
    "local": "timetz",
    # arrays whose elements Debezium encodes as a lone value of their type (day numbers,
    # microseconds) or sends as strings (numeric, jsonb)
    "days": "date[]",
    "stamps": "timestamp[]",
    "instants": "timestamptz[]",
    "times": "time[]",
    "zones": "timetz[]",
    "amounts": "numeric[]",
    "docs": "jsonb[]",
    "blobs": "bytea[]",
    "flags": "bit(12)",  # Debezium: bytes, lowest bit first
    "flag": "bit(1)",  # Debezium: a boolean
}
ROWS = [
    "(1, '1987-06-05', '2024-02-29 13:14:15.123456', '2024-02-29 13:14:15.5', '2024-02-29 13:14:15.5+02', "
    "'13:14:15.25', 1234.50, true, 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '{\"b\": [1, 2], \"a\": \"x\"}', "
    "ARRAY['x', 'y \"q\"', NULL], 42, 'plain', '10.0.0.1', 'ab', 'NaN', '1 year 2 mons 3 days 04:05:06.5', "
    "'13:14:15.5+02', '{1987-06-05,NULL,infinity}', '{\"2024-02-29 13:14:15.123456\",\"1969-12-31 23:59:59.5\"}', "
    "'{\"2024-02-29 13:14:15.5+02\"}', '{13:14:15.25,00:00:00}', '{13:14:15.5+02}', '{1.50,2,-0.001,NULL}', "
    "ARRAY['{\"b\": [1, 2], \"a\": \"x\"}'::jsonb, NULL], ARRAY['\\x0102'::bytea, NULL, ''::bytea], "
    "B'100000000001', B'1')",
    "(2, '1969-12-31', '1969-12-31 23:59:59', '2000-01-01 00:00:00', '1999-12-31 23:00:00-05', "
    "'00:00:00', -0.05, false, '00000000-0000-0000-0000-000000000000', '[]', '{}', -7, '', '192.168.1.5/24', "
    "'wxyz', 'Infinity', '-1 day 02:00:00', '00:00:00-05:30', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', "
    "B'000000000000', B'0')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    # fractions of a second before the epoch: negative counts of micro/milliseconds
    "(4, '1969-12-31', '1969-12-31 23:59:59.999999', '1969-12-31 23:59:59.5', '1969-12-31 23:59:59.25+00', "
    "'23:59:59.999999', 'NaN', NULL, NULL, 'null', ARRAY[]::text[], 0, 'before the epoch', NULL, NULL, "
    "'-Infinity', '1 year -1 mons 0.000001 seconds', '23:59:59.999999+00', '{1969-12-31}', "
    "'{\"1969-12-31 23:59:59.999999\"}', '{\"1969-12-31 23:59:59.25+00\"}', '{23:59:59.999999}', '{00:00:00-05:30}', "
    "'{0}', '{}', NULL, B'011111111110', NULL)",
    # PostgreSQL's infinite dates and timestamps (an account valid until 'infinity'); the
    # columns left out take their defaults
    "(5, 'infinity', 'infinity', '-infinity', '-infinity')",
    "(6, '-infinity', '-infinity', 'infinity', 'infinity')",
]


@dataclass(frozen=True)
class TypedWorld:
    registry: Registry
    registry_yaml: str
    table: str
    raw_topic: str


def typed_registry_yaml(token: str, schema: str) -> str:
    return f"""
sources:
  - name: y{token}
    schemas: [{schema}]
    publication: mcq_y{token}
    slot: mcq_y{token}
tables:
  - tname: TYPED
    comment: test only - one column of each type
    feeds:
      - source: y{token}
        table: {schema}.typed
        keys: {{pkey_number: id}}
        columns: [{", ".join(COLUMNS)}]
listeners: []
"""


def debezium_row(**values: str) -> dict[str, str | None]:
    """A typed row as Debezium sends it: every captured column, NULL but for ``values``."""
    return {**dict.fromkeys(COLUMNS), **values}


def produce_updates(
    settings: Settings, topic: str, changes: list[tuple[int, str, int]], partition: int | None = None
) -> None:
    """(id, note, LSN) as Debezium's JSON update events of the typed table, to ``topic``
    (to ``partition`` when given, else by key)."""
    producer = Producer(settings.kafka.client_config())
    where = {} if partition is None else {"partition": partition}
    for pk, note, lsn in changes:
        value = {"op": "u", "before": None, "after": debezium_row(id=str(pk), note=note), "source": {"lsn": lsn}}
        producer.produce(topic, key=json.dumps({"id": pk}).encode(), value=json.dumps(value).encode(), **where)
    assert producer.flush(10) == 0


def sql(settings: Settings, *statements: str) -> None:
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt)


@contextmanager
def typed_world(settings: Settings) -> Iterator[TypedWorld]:
    """A table with a column of each type, default replica identity, captured through apply_capture."""
    token = uuid.uuid4().hex[:8]
    schema = f"y_{token}"
    columns = ", ".join(f"{name} {decl}" for name, decl in COLUMNS.items())
    sql(
        settings,
        f"CREATE SCHEMA {schema}",
        f"CREATE TABLE {schema}.typed ({columns})",
        *(f"INSERT INTO {schema}.typed VALUES {row}" for row in ROWS),
    )
    text = typed_registry_yaml(token, schema)
    registry = parse_registry(text, "typed-test.yaml")
    source = registry.sources[0]
    apply_capture(registry, settings)
    wait_slot_active(settings, source.slot_name)
    try:
        yield TypedWorld(registry, text, f"{schema}.typed", raw_topic(source, f"{schema}.typed"))
    finally:
        uncapture(settings, registry, schema)


TABLE_LISTENER = """
listeners:
  - {{name: Table, owner: tests@example, adapter: {{type: table, settings: {{table: {target}}}}}}}
interests:
  - {{listener: Table, tname: TYPED}}
"""


@dataclass(frozen=True)
class Listening:
    """A typed world with one ``table`` listener (Table) that holds every row."""

    world: TypedWorld
    settings: Settings
    """The test's own topic prefix."""
    target: str
    registry: Registry
    registry_file: Path
    checkpoint: Path
    runtime: ListenerRuntime


@contextmanager
def typed_listener(settings: Settings, tmp_path: Path, tag: str) -> Iterator[Listening]:
    """The typed world normalised once (prefix ``<tag><token>``) and applied to its listener."""
    from consumers.runtime.listener import ListenerRuntime
    from mcq.testing.listeners import target_state
    from mcq.testing.worlds import wait_raw_records
    from streams.runner import run_normalize

    with typed_world(settings) as world:
        token = uuid.uuid4().hex[:8]
        tsettings = settings.model_copy(update={"topic_prefix": f"{tag}{token}"})
        target = f"{tag}_{token}.typed"
        text = world.registry_yaml.replace("listeners: []\n", TABLE_LISTENER.format(target=target))
        registry_file = tmp_path / "registry.yaml"
        registry_file.write_text(text)
        registry = parse_registry(text, str(registry_file))
        checkpoint = tmp_path / "checkpoint"
        wait_raw_records(settings, world.raw_topic, len(ROWS))
        run_normalize(tsettings, registry, once=True, checkpoint=checkpoint)
        runtime = ListenerRuntime(tsettings, "Table", registry=registry, http_port=None)
        assert runtime.run(until_caught_up=True) == 0
        assert len(target_state(tsettings, target)) == len(ROWS)
        yield Listening(world, tsettings, target, registry, registry_file, checkpoint, runtime)
