"""``mcq streams normalize``: raw Debezium topics -> compacted logical change topics.

Per micro-batch (``foreachBatch``, all DataFrame operations, nothing collected but counts):

1. parse each raw record's envelope generically (before/after as ``map<string,string>``,
   every value decoded to its natural text by the column types the record's schema
   names: ``streams/debezium.py``), with its source position: Debezium's ``sequence`` =
   [last commit LSN, LSN];
2. project every feed and the outbox into logical records, withholding by name what
   cannot be delivered whole (``streams/projection.py``: ``Projector``), only for the raw
   topics the batch read;
3. count them per table/subtype (the batch's line, first-seen provenance), resolve the
   deletes of keys another source table still holds (``streams/siblings.py``);
4. write them in Confluent's wire format with their position headers, each key's
   records in source commit order (``streams/wire.py``: ``WireFormat``).

The checkpoint makes a restart resume after the last committed batch; a batch cut short
is written again whole (at-least-once), which a compacted, idempotently applied topic
absorbs: the last record per key is still the newest. SIGINT/SIGTERM stop the stream the
same safe way (a batch in flight is abandoned and re-run after a restart) and return.

The job holds what the steps share (settings, registry, plan, schema ids, known
provenance) and runs them; running it as a service is ``streams/runner.py``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcq.config import Settings
from mcq.contract import register_topic, registry_client
from mcq.refs import table_ref
from mcq.registry.model import Registry
from mcq.registry.store import RegistryStore
from mcq.topics.plan import apply_topics, plan_topics
from streams.checkpoint import topics_read
from streams.debezium import EnvelopeReader
from streams.frames import shuffle_partitions
from streams.plan import NormalizePlan, plan_normalize
from streams.projection import UNAVAILABLE, Projector, garbled
from streams.siblings import SiblingLookup, resolve_deletes
from streams.wire import WireFormat

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


# a micro-batch is written all at once: full batches, compressed, rather than the
# producer's defaults for a trickle (16 KB batches sent as soon as possible); kafka.extra
# overrides these
BATCH_PRODUCER = {
    # (Kafka's default, said here because each key's order rests on it: a retried batch
    # never lands behind a later one)
    "kafka.enable.idempotence": "true",
    "kafka.linger.ms": "10",
    "kafka.batch.size": str(1 << 20),
    "kafka.compression.type": "lz4",
}


@dataclass
class BatchStats:
    """What one micro-batch did; the job logs one line per batch."""

    batch_id: int
    rows_in: int = 0
    records_out: int = 0
    tombstones: int = 0
    housekeeping: int = 0
    refresh: int = 0
    withheld: int = 0
    withheld_topic: str = ""
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    """Where the batch's time went: read and counted (first-seen provenance with it), written."""
    projected: tuple[int, int] = (0, 0)
    """(projections planned, the job's projections): only those of the raw topics the batch read."""

    def line(self) -> str:
        phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.phases.items())
        return (
            f"batch {self.batch_id}: in {self.rows_in}, out {self.records_out} (+{self.tombstones} tombstones, "
            f"{self.refresh} refresh requests), dropped as housekeeping {self.housekeeping}, "
            + (f"WITHHELD {self.withheld} (see {self.withheld_topic}), " if self.withheld else "")
            + f"{self.seconds:.1f} s"
            + (f" ({phases})" if phases else "")
            + (
                f"; {self.projected[0]} of {self.projected[1]} raw topics read"
                if self.projected[0] < self.projected[1]
                else ""
            )
        )


@dataclass
class NormalizeJob:
    """One normaliser: its plan, schema ids, and the Spark stream that runs it."""

    settings: Settings
    registry: Registry
    checkpoint: Path
    max_offsets_per_trigger: int | None = None
    accept_lost_raw: bool = False
    """Go on past raw records deleted before they were read (Spark's failOnDataLoss off):
    only once the operator has refreshed what they carried (``lost_raw_line``)."""
    only: NormalizePlan | None = None
    """Part of the registry's plan to run (``streams.realtime.split_plan``); all of it when None."""
    defined_at: dict[str, int] = field(default_factory=dict)
    """When each table/subtype's definition was stored (ms): an insert or update committed
    before it that lacks a column its feed captures is from before that column was captured,
    and flows as it did then; one committed after it is withheld. Unknown (0): withheld."""
    plan: NormalizePlan = field(init=False)
    projector: Projector = field(init=False)
    """Every raw row's logical records (streams/projection.py)."""
    wire: WireFormat = field(init=False)
    """How they are written (streams/wire.py)."""
    schema_ids: dict[str, tuple[int, int]] = field(init=False, default_factory=dict)
    """(key, value) schema id of each topic written; shared with ``wire``: filled in place, never replaced."""
    history: list[BatchStats] = field(init=False, default_factory=list)
    _known_refs: set[str] = field(init=False, default_factory=set)
    _built: dict[str, Any] = field(init=False, default_factory=dict)
    """Column expressions built once and applied to every micro-batch: the parse's and the
    wire format's are py4j calls, the projections' an SQL parse per raw topic."""

    def _once(self, name: str, build: Callable[[], Any]) -> Any:
        if name not in self._built:
            self._built[name] = build()
        return self._built[name]

    def __post_init__(self) -> None:
        self.plan = self.only or plan_normalize(self.registry, self.settings.topic_prefix)
        self.projector = Projector(self.plan, self.defined_at)
        self.wire = WireFormat(self.plan, self.schema_ids)

    def part(self, plan: NormalizePlan, checkpoint: Path) -> NormalizeJob:
        """A job for part of this plan, sharing its schema ids and known provenance."""
        job = NormalizeJob(
            self.settings, self.registry, checkpoint, self.max_offsets_per_trigger,
            self.accept_lost_raw, only=plan, defined_at=self.defined_at,
        )  # fmt: skip
        job.schema_ids = job.wire.schema_ids = self.schema_ids
        job._known_refs = self._known_refs
        return job

    # ------------------------------------------------------------------ set-up

    def prepare(self) -> None:
        """Create missing output topics, register their schemas, load known provenance."""
        report = apply_topics(self.settings, plan_topics(self.registry, self.settings.topic_prefix))
        for line in report.drift:
            log.warning(f"normalize: topic drift (left as it is): {line}")
        client = registry_client(self.settings)
        for topic in [*self.plan.logical_topics, self.plan.refresh_topic, self.plan.withheld_topic]:
            self.schema_ids[topic] = register_topic(client, topic)
        store = RegistryStore(self.settings)
        self._known_refs = {p.ref for p in store.provenance()}
        log.info(f"normalize: reading {len(self.plan.raw_topics)} raw topics: {', '.join(self.plan.raw_topics)}")
        log.info(
            f"normalize: writing {len(self.plan.logical_topics)} logical topics: {', '.join(self.plan.logical_topics)}"
            f" (refresh requests to {self.plan.refresh_topic})"
        )
        log.info(f"normalize: checkpoint {self.checkpoint}")

    # ------------------------------------------------------------------ transformation

    def parse(self, raw: DataFrame) -> DataFrame:
        """Kafka rows -> parsed envelopes with source position (raw tombstones dropped)."""
        from pyspark.sql import functions as F

        def build() -> tuple[EnvelopeReader, list[Column]]:
            # (measured: Spark's JSON parser reads this small array faster than a pattern or a split)
            seq = F.from_json(F.col("e.source.sequence"), "ARRAY<STRING>")
            return EnvelopeReader(), [
                F.coalesce(seq.getItem(0).cast("long"), F.lit(0)).alias("last_commit_lsn"),
                F.coalesce(F.col("e.source.lsn"), seq.getItem(1).cast("long"), F.lit(0)).alias("lsn"),
                F.coalesce(
                    F.timestamp_micros(F.col("e.source.ts_us")),
                    F.timestamp_millis(F.col("e.source.ts_ms")),
                    F.timestamp_millis(F.col("e.ts_ms")),
                    F.current_timestamp(),
                ).alias("entry_time"),
                F.coalesce(
                    F.exists(F.map_values(F.col("e.after")), lambda v: v.contains(UNAVAILABLE)), F.lit(False)
                ).alias("unavailable"),
                F.coalesce(F.exists(F.map_values(F.col("e.after")), garbled), F.lit(False)).alias("garbled"),
            ]

        reader: EnvelopeReader
        positions: list[Column]
        reader, positions = self._once("parse", build)
        rows = raw.where(F.col("value").isNotNull()).select(
            F.col("topic").alias("raw_topic"),
            F.col("partition").alias("raw_partition"),
            F.col("offset").alias("raw_offset"),
            "value",
        )
        return reader.apply(rows).drop("value").select("*", *positions)

    # ------------------------------------------------------------------ the stream

    def process_batch(self, raw: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        started = time.monotonic()
        stats = BatchStats(batch_id, withheld_topic=self.plan.withheld_topic)
        refresh = F.col("topic") == self.plan.refresh_topic
        withheld = F.col("topic") == self.plan.withheld_topic
        tombstone = F.coalesce(F.col("r.tombstone"), F.lit(False))

        def count(condition: Column) -> Column:
            return F.sum(F.when(condition, 1).otherwise(0))

        # cached, counted (which fills the cache), then written from the cache: two Spark
        # jobs per batch. (An Observation would save one, but Spark never reports observed
        # metrics for a write to the Kafka sink: its get() waits for ever.) The count is
        # grouped by table/subtype, so the same pass gives each one's first-seen origin
        # (a third pass over the batch cost as much as the count).
        # the batch is parsed once: the per-topic projections each read it, and would
        # otherwise each read Kafka again
        # only the projections of the raw topics this batch read records of (its offset log
        # entries tell) are planned
        read = self.projector.groups_read(topics_read(self.checkpoint, batch_id))
        stats.projected = (len(read), len(self.projector.projection_groups()))
        parsed = self.parse(raw).coalesce(shuffle_partitions(raw)).persist()
        transformed = self.projector.transform(parsed, read)
        if transformed is None:  # no raw topic of this job moved: nothing to read
            parsed.unpersist()
            stats.seconds = time.monotonic() - started
            self.history.append(stats)
            log.info(stats.line())
            return
        records = turned = transformed.persist()
        try:
            lookup = self._once("siblings", lambda: SiblingLookup(self.settings, self.registry, self.plan))
            if lookup.shared:  # a DELETE another source table of its key still holds is no delete
                records, kept = resolve_deletes(lookup, turned)
                if kept:
                    records = records.persist()
            delivered = F.col("r").isNotNull() & ~withheld
            groups = (
                records.groupBy(F.col("r.key.tname").alias("tname"), F.col("r.key.subtype").alias("subtype"))
                .agg(
                    count(F.col("pos").isNull() | (F.col("pos") == 0)).alias("rows_in"),
                    count(delivered & ~tombstone & ~refresh).alias("out"),
                    count(tombstone).alias("tombstones"),
                    count(F.col("housekeeping")).alias("housekeeping"),
                    count(refresh).alias("refresh"),
                    count(withheld).alias("withheld"),
                    F.max("raw_partition").alias("raw_partition"),
                    F.min_by(
                        F.when(delivered, F.struct(F.col("r.origin").alias("o"), F.col("r.call_stack").alias("s"))),
                        F.when(delivered, F.col("lsn")),
                    ).alias("origin"),
                )
                .collect()
            )
            stats.phases["read"] = time.monotonic() - started
            stats.rows_in = sum(int(g["rows_in"] or 0) for g in groups)
            stats.records_out = sum(int(g["out"] or 0) for g in groups)
            stats.tombstones = sum(int(g["tombstones"] or 0) for g in groups)
            stats.housekeeping = sum(int(g["housekeeping"] or 0) for g in groups)
            stats.refresh = sum(int(g["refresh"] or 0) for g in groups)
            stats.withheld = sum(int(g["withheld"] or 0) for g in groups)
            if stats.records_out + stats.tombstones + stats.refresh + stats.withheld:
                mark = time.monotonic()
                one_partition = all(not g["raw_partition"] for g in groups)
                self.wire.serialize(records, one_partition).write.format("kafka").options(**BATCH_PRODUCER).options(
                    **self.settings.kafka.spark_options()
                ).save()
                stats.phases["written"] = time.monotonic() - mark
            # recorded once the records are in their topics: a first-seen origin never names
            # a table whose changes were not written
            self._record_provenance(
                [(g["tname"], g["subtype"], ": ".join(filter(None, g["origin"]))) for g in groups if g["origin"]]
            )
        finally:
            records.unpersist()
            turned.unpersist()
            parsed.unpersist()
        stats.seconds = time.monotonic() - started
        self.history.append(stats)
        log.info(stats.line())

    def _unseen_refs(self) -> bool:
        explicit = (f"{t}/{s}" if s else t for t, s, _ in self.plan.explicit_topics)
        feeds = (f.ref for f in self.plan.feeds)
        return any(ref not in self._known_refs for ref in (*feeds, *explicit))

    def _record_provenance(self, seen: list[tuple[str, str | None, str]]) -> None:
        """First-seen provenance of each table/subtype (the paper's call-stack column):
        (tname, subtype, the origin of its first record in source order) of a batch."""
        origins = {table_ref(tname, subtype): origin for tname, subtype, origin in seen}
        origins = {ref: origin for ref, origin in origins.items() if ref not in self._known_refs}
        if not origins:
            return
        for ref, provenance in sorted(RegistryStore(self.settings).record_first_seen_all(origins).items()):
            self._known_refs.add(ref)
            log.info(f"provenance: {ref} first seen from {provenance.origin.splitlines()[0]}")

    def start(self, spark: SparkSession, once: bool, trigger: str = "1 second", starting: str = "earliest") -> Any:
        """Start the streaming query (returns pyspark's StreamingQuery); ``starting``: its
        source's ``startingOffsets`` when it has no checkpoint yet."""
        reader = (
            spark.readStream.format("kafka")
            .options(**self.settings.kafka.spark_read_options())
            # a pattern, not a list: a raw topic appears only once Debezium has a change
            # for its table (an empty table, the outbox before its first entry), and Spark
            # reads a topic that appears later from its beginning
            .option("subscribePattern", "^(" + "|".join(re.escape(t) for t in self.plan.raw_topics) + ")$")
            .option("startingOffsets", starting)
            # raw topics are never compacted or truncated under us: a gap means lost changes, so stop
            .option("failOnDataLoss", str(not self.accept_lost_raw).lower())
        )
        if self.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(self.max_offsets_per_trigger))
        writer = (
            reader.load()
            .writeStream.queryName("mcq-normalize")
            .option("checkpointLocation", str(self.checkpoint))
            .foreachBatch(self.process_batch)
        )
        writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=trigger)
        return writer.start()
