"""A second normaliser started beside a running one takes over from it (streams/handover.py)."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mcq.change import POSITION_HEADER
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.registry import parse_registry
from mcq.registry.store import RegistryStore
from mcq.stack import Stack
from mcq.testing.worlds import Captured, captured_world
from streams.plan import plan_normalize
from tests.support.waiting import until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def world(stack: Stack, settings: Settings) -> Iterator[Captured]:
    with captured_world(settings, people=60) as cap:
        yield cap


def _records(settings: Settings, topic: str) -> list[tuple[dict[str, Any], dict[str, Any] | None, bytes]]:
    """(key, value, position header) of every record of ``topic``, partition by partition in offset order."""
    des = AvroDeserializer(registry_client(settings))
    consumer = Consumer(
        {**settings.kafka.client_config(), "group.id": f"test-{uuid.uuid4().hex}", "enable.partition.eof": True}
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, -2) for p in parts])
        pending = set(parts)
        out: list[tuple[dict[str, Any], dict[str, Any] | None, bytes]] = []
        deadline = time.monotonic() + 120
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                pending.discard(msg.partition() or 0)
                continue
            key = des(msg.key(), SerializationContext(topic, MessageField.KEY))
            value = None if msg.value() is None else des(msg.value(), SerializationContext(topic, MessageField.VALUE))
            position = dict(msg.headers() or [])[POSITION_HEADER]
            assert isinstance(position, bytes), position
            out.append((key, value, position))
        assert not pending, f"{topic}: not read to its end"
        return out
    finally:
        consumer.close()


@pytest.mark.long  # two normalisers, one after the other, under load: minutes, in make long
@pytest.mark.extended(minutes=9)  # about 6 minutes on two cores: CI runs it when its time budget allows
@pytest.mark.timeout(1500)  # its own deadlines add up to 1,200 s
def test_a_normaliser_started_beside_a_running_one_takes_over_with_no_gap_and_no_duplicate(
    world: Captured, settings: Settings, tmp_path: Path
) -> None:
    """Telephone numbers change 20 times a second, each to a value never used before, while
    a second `mcq streams normalize` of the same checkpoint starts and takes over. Per
    key, the logical topic holds every value the source was given, once, in commit order,
    and no source position twice; the first normaliser ends with exit 0."""
    s = world.schema
    prefix = f"th{uuid.uuid4().hex[:8]}"
    wsettings = settings.model_copy(update={"topic_prefix": prefix})
    registry = parse_registry(world.registry_yaml, "campus.yaml")
    RegistryStore(wsettings).apply(registry)
    phones = next(f for f in plan_normalize(registry, prefix).feeds if f.ref == "PERSON/Telephone")
    command = [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--http-port", "0",
               "--checkpoint", str(tmp_path / "checkpoint"), "--checkpoint-interval", "10 seconds"]  # fmt: skip
    env = {**os.environ, "MCQ_TOPIC_PREFIX": prefix}
    with psycopg.connect(wsettings.source.dsn()) as conn:
        keys = conn.execute(f"SELECT person_id, tele_type FROM {s}.directory_telephone ORDER BY 1, 2").fetchall()
    written: dict[tuple[int, str], list[str]] = {}
    stop_load = threading.Event()

    def load() -> None:  # one writer: its order per key is the commit order
        numbers = itertools.count(1)
        with psycopg.connect(wsettings.source.dsn(), autocommit=True) as conn:
            while not stop_load.is_set():
                person, kind = random.choice(keys)
                number = f"H{next(numbers):08d}"
                conn.execute(
                    f"UPDATE {s}.directory_telephone SET phone_number = %s WHERE person_id = %s AND tele_type = %s",
                    (number, person, kind),
                )
                written.setdefault((person, kind), []).append(number)
                time.sleep(0.05)

    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    jobs: list[subprocess.Popen[bytes]] = []
    loader = threading.Thread(target=load, daemon=True)

    def logged(which: int, text: str) -> Callable[[], None]:
        def check() -> None:
            assert text in logs[which].read_text(), logs[which].read_text()[-3000:]

        return check

    try:
        for which in (0, 1):
            with logs[which].open("w") as log:
                jobs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True))  # fmt: skip
            if which == 0:
                until(time.monotonic() + 300, logged(0, "batch 0 of "))  # real time, its first batch ended
                loader.start()
                time.sleep(5)
        until(time.monotonic() + 300, logged(1, "normalize: took over from "))
        assert jobs[0].wait(120) == 0, logs[0].read_text()[-3000:]
        assert "normalize: handed over to " in logs[0].read_text()
        assert "what it wrote after its last checkpoint is not written again" in logs[1].read_text()
        time.sleep(10)  # the second one normalises the load for a while
        stop_load.set()
        loader.join(10)

        def arrived() -> None:
            assert jobs[1].poll() is None, logs[1].read_text()[-3000:]
            records = [
                (k, v, p)
                for k, v, p in _records(wsettings, phones.topic)
                if (k["tname"], k["subtype"]) == (phones.tname, phones.subtype)
            ]
            seen: dict[tuple[int, str], list[str]] = {}
            positions: dict[tuple[int, str], list[bytes]] = {}
            for _, value, position in records:
                assert value is not None and value["after"] is not None
                key = (int(value["after"]["person_id"]), value["after"]["tele_type"])
                positions.setdefault(key, []).append(position)
                if str(value["after"]["phone_number"]).startswith("H"):
                    seen.setdefault(key, []).append(value["after"]["phone_number"])
            wrong = {
                key: {
                    "missing": [n for n in values if n not in seen.get(key, [])],
                    "twice": sorted({n for n in seen.get(key, []) if seen[key].count(n) > 1}),
                    "unknown": [n for n in seen.get(key, []) if n not in values],
                }
                for key, values in written.items()
                if seen.get(key) != values
            }
            assert not wrong, wrong  # no gap, no duplicate, in commit order
            for key, held in positions.items():
                assert len(held) == len(set(held)), (key, held)

        until(time.monotonic() + 180, arrived)
        assert sum(len(v) for v in written.values()) > 200
    finally:
        stop_load.set()
        for job in jobs:
            if job.poll() is None:
                job.send_signal(signal.SIGTERM)
                job.wait(60)
