"""``mcq entities run``: every entity of the registry written to its own compacted topic.

For each entity table, the job keeps its member tables' last state from their logical
topics (an :class:`EntityStore`, restored from a snapshot in ``MCQ_STATE_DIR`` when it
still describes them) and what the entity topic holds (read back from it at start). At
start it compares every entity with what was written; then every record read from a
member topic puts the entities it belongs to *dirty* (the fan-out, through the join
indexes), and each dirty entity is assembled again and written when it differs: an
INSERT when it appears, an UPDATE when any of its rows changed, a DELETE and a
tombstone when its root row goes. Listeners subscribe to the entity topic as to any
logical table, so their rules, allow-lists, refresh, replay and reconcile need nothing
of their own; a related row that moves an entity into or out of a listener's rule is an
UPDATE of the entity, which the listener's view turns into an INSERT or a DELETE.

Each record's position is its newest member row's source position, and always after the
one written before for the key, so a listener never skips it as old. Dirty entities are
written in chunks of ``CHUNK`` (the fan-out's memory is a chunk of rows, whatever it is),
each chunk flushed before the next is assembled; the snapshot is saved only after a
clean stop, so a crash reads again what it may not have written.

Why here and not in Spark: see docs/entities.md (measured in bench/entities.py).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from confluent_kafka import KafkaError, Producer
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from consumers import state_snapshot
from consumers.projection import KeyTuple
from mcq.change import POSITION_HEADER, Change, ChangeCodec, ChangeKey, ChangeType
from mcq.config import Settings
from mcq.contract import register_topic, registry_client
from mcq.health import HealthServer
from mcq.registry.exceptions import RegistryStoreError
from mcq.registry.model import LogicalTable, Registry
from mcq.registry.store import RegistryReader
from mcq.topics.plan import apply_topics, plan_topics
from streams.entities.index import Trigger, digest
from streams.entities.store import EntityStore, Written

log = logging.getLogger(__name__)

CHUNK = 500
"""Entities assembled and written at a time before their records are flushed."""


class EntityMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.records = Counter(
            "mcq_entity_records", "Entity records written, by change type", ["entity", "change_type"],
            registry=self.registry,
        )  # fmt: skip
        self.fanout = Histogram(
            "mcq_entity_fanout", "Entities a member change put dirty", ["entity"],
            buckets=(0, 1, 2, 5, 10, 100, 1_000, 10_000, 100_000), registry=self.registry,
        )  # fmt: skip
        self.rows = Gauge("mcq_entity_member_rows", "Member rows held", ["entity"], registry=self.registry)
        self.dirty = Gauge("mcq_entity_dirty", "Entities waiting to be assembled", ["entity"], registry=self.registry)


class EntityJob:
    """All entity tables of a registry (or those named), written to their topics."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        tables: list[str] | None = None,
        *,
        http: tuple[str, int] | None = None,
        reader: RegistryReader | None = None,
    ) -> None:
        """``reader``: the shared registry store, followed (an entity added, changed or removed
        is taken without a restart); without it, ``registry`` as given."""
        self.settings = settings
        self.names = tables
        self._reader = reader
        self._use(registry)
        self.metrics = EntityMetrics()
        self._stop = threading.Event()
        self._stores: dict[str, EntityStore] = {}
        self._written: dict[str, Written] = {}
        self._last_tick = time.monotonic()
        self._started = False
        self._health = HealthServer(*http, self._live, lambda: self._started, self.metrics.registry) if http else None
        self.written = 0
        self._errors: list[str] = []

    def _use(self, registry: Registry) -> None:
        self.registry = registry
        wanted = registry.entity_tables()
        if self.names:
            unknown = sorted(set(self.names) - {t.tname for t in wanted})
            if unknown:
                known = ", ".join(t.tname for t in wanted) or "none"
                raise ValueError(f"no entity named {', '.join(unknown)} in the registry (entities: {known})")
            wanted = [t for t in wanted if t.tname in self.names]
        self.tables = wanted

    def _shape(self, registry: Registry) -> dict[str, object]:
        """What this job's work depends on: its entities and their member tables' definitions."""
        tables = [t for t in registry.entity_tables() if not self.names or t.tname in self.names]
        members = {m for t in tables for m in (t.entity.members() if t.entity else [])}
        return {
            "entities": [t.model_dump() for t in tables],
            "members": [t.model_dump() for t in registry.tables if t.ref in members],
        }

    def _follow_registry(self) -> bool:
        """A registry change that touches an entity or its member tables: True (reopen)."""
        if self._reader is None or not self._reader.poll(0):
            return False
        try:
            registry = self._reader.registry()
        except (ValueError, RegistryStoreError) as exc:
            log.warning(f"entities: registry change not taken ({exc}); keeping the previous one")
            return False
        if self._shape(registry) == self._shape(self.registry):
            self.registry = registry
            return False
        try:
            self._use(registry)
        except (ValueError, RegistryStoreError) as exc:
            log.warning(f"entities: registry change not taken ({exc}); keeping the previous one")
            return False
        names = ", ".join(t.tname for t in self.tables) or "none"
        log.info(f"entities: the registry changed what is computed; reopening ({names})")
        return True

    def topic(self, table: LogicalTable) -> str:
        return table.topic(self.settings.topic_prefix)

    def _live(self) -> bool:
        return time.monotonic() - self._last_tick < 120

    def stop(self) -> None:
        self._stop.set()

    def open(self) -> None:
        """Topics and schemas in place, stores read, everything written compared."""
        names = {self.topic(t) for t in self.tables}
        members = {m for t in self.tables for m in (t.entity.members() if t.entity else [])}
        member_topics = {t.topic(self.settings.topic_prefix) for t in self.registry.tables if t.ref in members}
        specs = [s for s in plan_topics(self.registry, self.settings.topic_prefix) if s.name in names | member_topics]
        apply_topics(self.settings, specs)
        client = registry_client(self.settings)
        for name in sorted(names):
            register_topic(client, name)
        self._codec = ChangeCodec(client)
        self._producer = Producer({
            **self.settings.kafka.client_config(), "enable.idempotence": True, "linger.ms": 5,
            # the JVM's partitioner, as Spark's sink uses: one key, one partition, whoever writes it
            "partitioner": "murmur2_random",
        })  # fmt: skip
        if self._health and not self._started:
            self._health.start()
        for table in self.tables:
            snapshot = state_snapshot.path_of(self.settings, f"entity-{table.tname}", "store")
            store = self._stores[table.tname] = EntityStore(self.settings, self.registry, table, snapshot)
            store.catch_up(timeout_s=300.0)
            written = self._written[table.tname] = Written()
            written.read(self.settings, [self.topic(table)])
            store.on_fanout = self.metrics.fanout.labels(entity=table.tname).observe
            store.mark_all()
            for text in list(written.rows):  # written, and its root is gone: a delete to write
                fields = store.root_fields(ChangeKey.from_text(text))
                store.dirty.setdefault(ChangeKey(*fields).text(), (fields, Trigger()))
            log.info(
                f"entities: {table.tname}: {store.restored}; {store.size()} member rows, "
                f"{len(store.roots())} entities, {len(written.rows)} written before"
            )
        self._started = True

    def run(self, until_caught_up: bool = False) -> int:
        """Write until stopped (or, ``until_caught_up``, until the member topics' ends as
        of the start are written). Returns the exit code."""
        clean = False
        self.open()
        try:
            self._drain()
            while not self._stop.is_set():
                self._last_tick = time.monotonic()
                if self._follow_registry():
                    self.close(save=True)  # what was read so far was all written: its snapshot is good
                    self.open()
                    self._drain()
                    continue
                if until_caught_up:
                    for store in self._stores.values():
                        store.catch_up(timeout_s=300.0)
                    self._drain()
                    break
                took = False
                for store in self._stores.values():
                    took = store.take(0.1 if not took else 0) or took
                self._drain()
            clean = True
        finally:
            self.close(save=clean)
            self.shutdown()
        log.info(f"entities: {self.written} records written")
        return 0

    def _drain(self) -> None:
        for table in self.tables:
            store = self._stores[table.tname]
            self.metrics.dirty.labels(entity=table.tname).set(len(store.dirty))
            while store.dirty:
                chunk: list[tuple[str, tuple[KeyTuple, Trigger]]] = []
                while store.dirty and len(chunk) < CHUNK:
                    text = next(iter(store.dirty))
                    chunk.append((text, store.dirty.pop(text)))
                for text, (fields, trigger) in chunk:
                    self._write(table, store, text, fields, trigger)
                self._flush()
            self.metrics.rows.labels(entity=table.tname).set(store.size())
            self.metrics.dirty.labels(entity=table.tname).set(0)

    def _write(self, table: LogicalTable, store: EntityStore, root: str, fields: KeyTuple, trigger: Trigger) -> None:
        """Write the entity of a dirty root if it differs from what its topic holds."""
        written = self._written[table.tname]
        found = store.document(root)
        topic = self.topic(table)
        key = store.key_of(fields)
        text = key.text()
        if found is None:
            if text not in written.rows:
                return
            change_type: ChangeType = "DELETE"
            after, newest, fingerprint = None, trigger.position, b""
        else:
            doc, newest = found
            after = store.flat(doc)
            fingerprint = digest(after)
            if written.rows.get(text) == fingerprint:
                return
            change_type = "UPDATE" if text in written.rows else "INSERT"
            if trigger.position is not None and (newest is None or trigger.position > newest):
                newest = trigger.position
        position = written.next_position(text, newest)
        change = Change(
            key=key, change_type=change_type, position=position,
            entry_time=trigger.entry_time or datetime.now(UTC), source_table=trigger.source_table or table.tname,
            after=after, txid=trigger.txid, origin=f"entity {table.tname}",
        )  # fmt: skip
        k, v = self._codec.encode(topic, change)
        self._produce(topic, k, v)
        if change_type == "DELETE":
            self._produce(topic, k, None, [(POSITION_HEADER, str(position).encode())])
            written.rows.pop(text, None)
        else:
            written.rows[text] = fingerprint
        written.note(text, position)
        self.metrics.records.labels(entity=table.tname, change_type=change_type).inc()
        self.written += 1

    def _produce(
        self, topic: str, key: bytes, value: bytes | None, headers: list[tuple[str, str | bytes | None]] | None = None
    ) -> None:
        def delivered(err: KafkaError | None, msg: object) -> None:
            if err is not None:
                self._errors.append(f"{topic}: {err.str()}")

        while True:
            try:
                self._producer.produce(topic, value, key, headers=headers, on_delivery=delivered)
                return
            except BufferError:
                self._producer.poll(0.1)

    def _flush(self) -> None:
        left = self._producer.flush(60)
        if left or self._errors:
            errors, self._errors = self._errors, []
            raise RuntimeError(f"entities: {left} record(s) not delivered; {'; '.join(errors[:3])}")

    def close(self, save: bool) -> None:
        for store in self._stores.values():
            if save:
                store.close()
            else:
                store.abandon()
        self._stores.clear()
        self._written.clear()

    def shutdown(self) -> None:
        """After the last run: the health endpoint and the registry reader."""
        if self._health and self._started:
            self._health.stop()
        if self._reader is not None:
            self._reader.close()
