"""``mcq rebuild``: rebuild a stopped listener's target from the compacted logical topics
in a Spark batch job, without consuming them through Kafka, and let the listener resume
where the rebuild read up to.

1. Refused while an instance of the listener runs (its groups have live members).
2. The end offsets of the listener's logical topics now (E); Spark reads every record
   before E: the last state of every key as of E.
3. Through the listener's view (its rules and column allow-lists): what its target holds.
4. The load. A ``table`` target: Spark writes the rows as CSV and they are COPY'd in one
   transaction (``--truncate``: TRUNCATE then COPY, readers wait for the commit; else a
   staging table merged in, readers see the old rows until the commit), so the table
   holds exactly the rebuilt rows. Other targets: every state through the adapter's own
   batch path (``apply_batch``); where the adapter can read its target back (LDAP,
   files), what it holds beyond that is deleted.
5. The listener's applied positions: every key loaded at its state's position, at the
   target; every other key it had at the target, absent.
6. Its real-time group moves to E on the logical topics: whatever is committed during the
   rebuild (after E) is applied by its next run. The retry and bulk lanes are left as they
   are: a parked change older than the rebuilt state is superseded when its time comes.

A failure before step 6 leaves the listener's offsets where they were: its next run
applies again what it had not applied, and no older change overwrites a rebuilt row (the
``table`` target keeps each row's source position and refuses older ones).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka.admin._listoffsets import OffsetSpec  # .admin re-exports it without __all__

from consumers.adapter import ReadBack, make_adapter
from consumers.exceptions import ConsumerError, ListenerConfigError
from consumers.runtime.groups import TP, ListenerGroups
from consumers.runtime.view import ListenerView
from consumers.table.adapter import TableAdapter
from mcq.change import Change, Position
from mcq.config import Settings
from mcq.registry.model import Registry
from streams.jobs import direct
from streams.jobs.progress import stage_progress
from streams.jobs.tableview import in_view, with_key_text
from streams.laststate import FIELDS, applied_values, last_records, live_changes

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BATCH = 1000
ENGINE_SAID = {"spark": "in a Spark job", "direct": "directly, without Spark"}
CHUNK = 1 << 20


class RebuildFailed(ConsumerError):
    """Changes the target refused during a rebuild: the listener's offsets were not moved."""


@dataclass
class RebuildSummary:
    listener: str
    path: str = ""
    loaded: int = 0
    removed: int = 0
    absent: int = 0
    ends: dict[TP, int] = field(default_factory=dict)
    seconds: float = 0.0
    engine: str = "spark"

    def lines(self) -> list[str]:
        records = sum(self.ends.values())
        return [
            f"read the compacted topics up to their ends ({len(self.ends)} partition(s), offsets summing to "
            f"{records:,}) {ENGINE_SAID[self.engine]}; {self.path}",
            f"{self.loaded:,} object(s) loaded, {self.removed:,} removed; applied positions: {self.loaded:,} at the "
            f"target, {self.absent:,} no longer ({self.seconds:.1f} s)",
        ]


class Rebuild:
    def __init__(self, settings: Settings, registry: Registry, name: str, truncate: bool) -> None:
        self.groups = ListenerGroups(settings, registry, name)  # an unknown listener: ListenerConfigError
        listener = registry.listener(name)
        assert listener is not None
        self.adapter = make_adapter(listener, settings)
        self.adapter.bind(registry)
        if truncate and not isinstance(self.adapter, TableAdapter):
            raise ListenerConfigError(
                f"--truncate empties a table target first; the target of {name} is {listener.adapter.type}, "
                "whose rebuild writes every state through the adapter"
            )
        self.settings, self.registry, self.name, self.truncate = settings, registry, name, truncate
        self.tables = registry.tables_of(name)
        self.view = ListenerView(registry, name)

    def run(
        self,
        spark: SparkSession | None = None,
        dry_run: bool = False,
        engine: str = "auto",
        start_spark: Callable[[], SparkSession] | None = None,
    ) -> RebuildSummary:
        """Rebuild the target. ``engine``: ``spark``, ``direct`` (``streams/jobs/direct.py``) or
        ``auto``: direct for topics of at most ``DIRECT_MAX_RECORDS`` records. The Spark
        engine runs on ``spark``, else on the session ``start_spark`` starts when needed."""
        from confluent_kafka import TopicPartition

        started = time.monotonic()
        label = f"rebuild {self.name}"
        self.groups.refuse_while_running("rebuild")
        if not dry_run:  # its applied positions are written: its topics exist, as its first run makes them
            from mcq.topics.plan import apply_topics

            apply_topics(self.settings, self.groups.topics.specs())
        topics = self.groups.logical_topics()
        meta = self.groups.admin.list_topics(timeout=30).topics
        tps = [TopicPartition(t, p) for t in topics if t in meta for p in sorted(meta[t].partitions)]
        summary = RebuildSummary(self.name)
        summary.ends = self.groups.offsets(tps, OffsetSpec.latest()) if tps else {}  # type: ignore[no-untyped-call]
        records = direct.records_to_read(self.settings, summary.ends)
        summary.engine = direct.choose(engine, records)
        fast = isinstance(self.adapter, TableAdapter)
        summary.path = "bulk COPY into the table" if fast else f"through the {type(self.adapter).kind} adapter"
        log.info(
            f"{label}: reading {len(tps)} partition(s) of {len(topics)} logical topic(s) to their ends "
            f"(at most {records:,} records, {ENGINE_SAID[summary.engine]})"
        )
        if summary.engine == "direct":
            self._run_direct(summary, dry_run)
        else:
            if spark is None:
                if start_spark is None:
                    raise ValueError("the Spark engine needs a session or a way to start one")
                spark = start_spark()
            self._run_spark(spark, summary, dry_run)
        if summary.ends and not dry_run:
            self.groups.move(self.groups.topics.group, summary.ends)
        summary.seconds = time.monotonic() - started
        return summary

    def _run_spark(self, spark: SparkSession, summary: RebuildSummary, dry_run: bool) -> None:
        from pyspark.sql import functions as F

        with stage_progress(spark, f"rebuild {self.name}"):
            live = last_records(spark, self.settings, sorted({t for t, _ in summary.ends}), self.tables, summary.ends)
            live = live.where(F.col("live"))
            if dry_run:
                summary.loaded = live.count()
                summary.path += f"; dry run: {summary.loaded:,} live state(s), nothing written"
                return
            if isinstance(self.adapter, TableAdapter):
                summary.loaded, summary.absent = self._rebuild_table(spark, live)
            else:
                summary.loaded, summary.removed, summary.absent = self._rebuild_through_adapter(spark, live)

    # ------------------------------------------------------------------ small topics: read directly

    def _run_direct(self, summary: RebuildSummary, dry_run: bool) -> None:
        from mcq.change import ChangeCodec
        from mcq.contract import registry_client

        begun = time.monotonic()
        codec = ChangeCodec(registry_client(self.settings))
        states = direct.LiveStates(self.settings, codec, summary.ends, self.tables)
        with direct.paused_gc():
            if dry_run:
                summary.loaded = sum(1 for _ in states.values())
                summary.path += f"; dry run: {summary.loaded:,} live state(s), nothing written"
            elif isinstance(self.adapter, TableAdapter):
                loaded: dict[str, str] = {}
                try:  # each row sent while the next is decoded: PostgreSQL loads on the other core
                    rows = direct.table_rows(states.values(), self.view, loaded)
                    summary.loaded = self.adapter.load_csv(rows, self.truncate)
                finally:
                    self.adapter.close()
            else:
                seen, summary.removed = self._through_adapter(iter(states))
                loaded = {c.key.text(): str(c.position) for c in seen}
                summary.loaded = len(seen)
            took = time.monotonic() - begun
            log.info(f"rebuild {self.name}: {states.records:,} record(s) of {states.keys:,} key(s) read"
                     f"{'' if dry_run else f', {summary.loaded:,} loaded'} in {took:.1f} s")  # fmt: skip
            if dry_run:
                return
            held = direct.applied_held(self.settings, self.groups.topics.applied, self.tables)
            writes = direct.applied_diff(loaded, held)
            direct.write_applied(self.settings, self.groups.topics.applied, writes)
        summary.absent = sum(1 for text in writes if text not in loaded)

    # ------------------------------------------------------------------ a table target: Spark and COPY

    def _rebuild_table(self, spark: SparkSession, live: DataFrame) -> tuple[int, int]:
        from pyspark.sql import functions as F

        assert isinstance(self.adapter, TableAdapter)
        from pyspark import StorageLevel

        states = in_view(live.select(*FIELDS, "after", "pos"), self.view, self.tables)
        states = states.persist(StorageLevel.MEMORY_AND_DISK)  # read once, written twice (rows, positions)
        rows = with_key_text(states)
        staging = self.settings.stack.home / "tmp" / f"rebuild-{self.name}-{uuid.uuid4().hex[:8]}"
        try:
            csv = rows.select(
                "change_key", *FIELDS, F.to_json("after", {"ignoreNullFields": "false"}), "pos.c", "pos.l"
            )
            begun = time.monotonic()
            csv.write.option("escape", '"').option("header", "false").csv(str(staging))
            log.info(
                f"rebuild {self.name}: rows written as CSV in {time.monotonic() - begun:.1f} s; "
                f"loading into {self.adapter.settings.table}"
            )
            begun = time.monotonic()
            # what the applied positions must say is worked out by Spark while PostgreSQL loads
            # (a core each); it is written only once the load has committed
            with ThreadPoolExecutor(1, thread_name_prefix="applied-diff") as pool:
                diff = pool.submit(self._applied_diff, spark, rows.select(F.col("change_key").alias("text"), "pos"))
                try:
                    loaded = self.adapter.load_csv(_chunks(staging), self.truncate)
                except BaseException:
                    with contextlib.suppress(Exception):
                        diff.result()[0].unpersist()
                    raise
                log.info(f"rebuild {self.name}: {loaded:,} rows loaded in {time.monotonic() - begun:.1f} s")
                changes = diff.result()
            begun = time.monotonic()
            absent = self._write_diff(changes)
            log.info(f"rebuild {self.name}: applied positions written in {time.monotonic() - begun:.1f} s")
        finally:
            self.adapter.close()
            shutil.rmtree(staging, ignore_errors=True)
            states.unpersist()
        return loaded, absent

    def _write_applied(self, spark: SparkSession, loaded: DataFrame) -> int:
        """Every key loaded at its position, at the target; every other key of these tables
        the applied positions had at the target, absent. The number of keys now absent."""
        return self._write_diff(self._applied_diff(spark, loaded))

    def _applied_diff(self, spark: SparkSession, loaded: DataFrame) -> tuple[DataFrame, dict[bool, int]]:
        """The applied-position records to write (persisted) and their counts (by whether
        the key is gone): only where the topic says otherwise already (a target rebuilt
        after a loss: hardly any)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        held = applied_values(spark, self.settings, self.groups.topics.applied, self.tables)
        new = loaded.select("text", F.concat_ws("/", "pos.c", "pos.l").alias("new"))
        both = new.join(held.select("text", F.col("value").alias("held")), "text", "full_outer")
        gone = F.col("new").isNull() & F.col("held").isNotNull() & ~F.col("held").endswith("/-")
        stale = F.col("new").isNotNull() & (F.col("held").isNull() | (F.col("held") != F.col("new")))
        writes = both.where(gone | stale).select(
            "text",
            F.when(stale, F.col("new")).otherwise(F.concat(F.col("held"), F.lit("/-"))).alias("value"),
            gone.alias("gone"),
        )
        writes = writes.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts = {bool(r["gone"]): int(r["count"]) for r in writes.groupBy("gone").count().collect()}
        except BaseException:
            writes.unpersist()
            raise
        return writes, counts

    def _write_diff(self, diff: tuple[DataFrame, dict[bool, int]]) -> int:
        """Write the records as the listener writes them: its producer's partition
        (librdkafka's default: CRC-32 of the key)."""
        from pyspark.sql import functions as F

        writes, counts = diff
        topic = self.groups.topics.applied
        try:
            partitions = len(self.groups.admin.list_topics(topic, timeout=30).topics[topic].partitions)
            if partitions == 0:
                raise ConsumerError(f"rebuild {self.name}: {topic} has no partitions; the listener's offsets stay")
            out = writes.select(
                F.col("text").cast("binary").alias("key"),
                F.col("value").cast("binary").alias("value"),
                F.pmod(F.crc32(F.col("text").cast("binary")), F.lit(partitions)).cast("int").alias("partition"),
            )
            if counts:
                out.write.format("kafka").options(**self.settings.kafka.spark_options()).option("topic", topic).save()
        finally:
            writes.unpersist()
        return counts.get(True, 0)

    # ------------------------------------------------------------------ any other target: its batch path

    def _rebuild_through_adapter(self, spark: SparkSession, live: DataFrame) -> tuple[int, int, int]:
        seen, removed = self._through_adapter(live_changes(live))
        loaded = spark.createDataFrame(
            [(c.key.text(), (c.position.last_commit_lsn, c.position.lsn)) for c in seen],
            "text string, pos struct<c: long, l: long>",
        )
        return len(seen), removed, self._write_applied(spark, loaded)

    def _through_adapter(self, live: Iterator[Change]) -> tuple[list[Change], int]:
        """Every live state the view admits through the adapter's batch path, what the
        target holds beyond them removed: (the states written, the objects removed)."""
        adapter = self.adapter
        adapter.open()
        seen: list[Change] = []
        batch: list[Change] = []
        dead = self._dead_lettered()
        skipped = 0
        try:
            for change in live:
                state, _ = self.view.see(change, False)
                if state is None:
                    continue
                if state.key.text() in dead:
                    skipped += 1  # the listener could not apply it: its dead letter says why, and stays
                    continue
                seen.append(state)
                batch.append(state)
                if len(batch) >= BATCH:
                    self._apply(batch)
                    batch = []
                    if len(seen) % (BATCH * 20) == 0:
                        log.info(f"rebuild {self.name}: {len(seen):,} state(s) written")
            self._apply(batch)
            removed = self._remove_extra(seen)
        finally:
            adapter.close()
        if skipped:
            log.warning(f"rebuild {self.name}: {skipped} key(s) left out: dead-lettered and unresolved "
                        f"(`mcq dlq list {self.name}`)")  # fmt: skip
        return seen, removed

    def _dead_lettered(self) -> set[str]:
        """The keys of the listener's unresolved dead letters: what it could not apply (a
        name collision, a template that fails for that row), left out of the rebuild as
        the listener left them out of the target."""
        from consumers.runtime.dlq import DeadLetters
        from mcq.change import ChangeCodec
        from mcq.contract import registry_client

        entries = DeadLetters(self.settings, self.name).entries()
        if not entries:
            return set()
        codec = ChangeCodec(registry_client(self.settings))
        return {codec.decode_key("dlq", e.partition, e.offset, e.key).text() for e in entries if e.key}

    def _apply(self, batch: list[Change]) -> None:
        if not batch:
            return
        outcomes = self.adapter.apply_batch(batch)
        failed = [(c, e) for c, e in zip(batch, outcomes, strict=True) if e is not None]
        if failed:
            change, error = failed[0]
            raise RebuildFailed(
                f"rebuild {self.name}: the target refused {len(failed)} change(s) of a batch, first {change.key}: "
                f"{error}; the listener's offsets were not moved"
            )

    def _remove_extra(self, seen: list[Change]) -> int:
        """What the target holds beyond the rebuilt states, deleted (adapters that read back)."""
        if not isinstance(self.adapter, ReadBack):
            return 0
        held = self.adapter.objects_held()  # what it read when it opened, as the writes left it
        if held is not None:  # every state it was given is written (a refusal fails the rebuild)
            extra = sorted(held - {str(c.key) for c in seen})
        else:
            expected = set(self.adapter.expected(self.view, seen))
            extra = [obj for obj in self.adapter.read_back() if obj not in expected]
        newest = max((c.position for c in seen), default=Position(0, 0))
        now = datetime.now(UTC)
        deletes = [
            Change(key, "DELETE", newest, now, key.ref, cause="refresh")
            for obj in extra
            for key in self.adapter.keys_of(obj)
        ]
        for i in range(0, len(deletes), BATCH):
            self._apply(deletes[i : i + BATCH])
        return len(extra)


def _chunks(directory: Path) -> Iterator[bytes]:
    for part in sorted(directory.glob("part-*.csv")):
        with part.open("rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk
