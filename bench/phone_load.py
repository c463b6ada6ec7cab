"""Telephone-number updates at a steady rate, timed commit -> logical topic: the load the
normaliser's real-time benchmarks run while something happens to it (a registry change,
a hand-over, a crash)."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
from confluent_kafka import Consumer
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mcq.config import Settings
from mcq.contract import registry_client
from mcq.testing.worlds import Captured


class PhoneLoad:
    """``drive`` commits one update per transaction at ``rate`` (each number ``R-<i>``,
    ``committed``); ``consume`` notes when each reaches the logical PERSON/Telephone topic
    (``arrived``). Both run in threads until ``stop``."""

    def __init__(self, settings: Settings, world: Captured, rate: int) -> None:
        table = world.registry.table("PERSON", "Telephone")
        assert table is not None
        self.settings, self.schema, self.rate = settings, world.schema, rate
        self.topic = table.topic(settings.topic_prefix)
        self.arrived: dict[str, float] = {}
        self.committed: dict[str, float] = {}
        self._stop, self._stop_driving = threading.Event(), threading.Event()
        self._driver: threading.Thread | None = None

    def consume(self) -> None:
        """Start noting arrivals (from the topic's beginning)."""
        threading.Thread(target=self._consume, daemon=True).start()

    def drive(self) -> None:
        """Start committing updates."""
        self._driver = threading.Thread(target=self._drive, daemon=True)
        self._driver.start()

    def stop_driving(self) -> None:
        self._stop_driving.set()
        if self._driver is not None:
            self._driver.join(10)

    def stop(self) -> None:
        self.stop_driving()
        self._stop.set()

    def _consume(self) -> None:
        des = AvroDeserializer(registry_client(self.settings))
        c = Consumer({**self.settings.kafka.client_config(), "group.id": f"bench-{uuid.uuid4().hex}",
                      "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})  # fmt: skip
        c.subscribe([self.topic])
        while not self._stop.is_set():
            msg = c.poll(0.2)
            if msg is None or msg.error() or msg.value() is None:
                continue
            value = des(msg.value(), SerializationContext(self.topic, MessageField.VALUE))
            number = (value.get("after") or {}).get("phone_number")
            if number and number.startswith("R-"):
                self.arrived.setdefault(number, time.time())
        c.close()

    def _drive(self) -> None:
        with psycopg.connect(self.settings.source.dsn(), autocommit=True) as conn:
            phones = conn.execute(
                f"SELECT person_id, tele_type FROM {self.schema}.directory_telephone ORDER BY 1, 2"
            ).fetchall()
            start, i = time.time(), 0
            while not self._stop_driving.is_set():
                if (wait := start + i / self.rate - time.time()) > 0:
                    time.sleep(wait)
                number = f"R-{i}"
                update = f"UPDATE {self.schema}.directory_telephone SET phone_number = %s WHERE person_id = %s"
                conn.execute(update + " AND tele_type = %s", (number, *phones[i % len(phones)]))
                self.committed[number] = time.time()
                i += 1

    def latencies(self, begun: float, ended: float) -> tuple[list[str], list[float]]:
        """The updates committed in [begun, ended), and the latencies of those that arrived."""
        numbers = [n for n, t in list(self.committed.items()) if begun <= t < ended]
        return numbers, [self.arrived[n] - self.committed[n] for n in numbers if n in self.arrived]
