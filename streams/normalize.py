"""``mcq streams normalize``: raw Debezium topics -> compacted logical change topics.

Per micro-batch (``foreachBatch``, all DataFrame operations, nothing collected but counts):

1. parse each raw record's envelope generically (before/after as ``map<string,string>``,
   every value decoded to its natural text by the column types the record's schema
   names: ``streams/debezium.py``), with its source position: Debezium's ``sequence`` =
   [last commit LSN, LSN];
2. project every feed: map the row to its logical (TNAME, subtype) and key fields; an
   insert or snapshot read is INSERT, a delete is DELETE followed by a tombstone, an
   update whose logical key changed is DELETE of the old key then INSERT of the new, and
   an update touching none of the watched columns is dropped as housekeeping;
3. explicit log entries (the outbox) go to their logical topic or the refresh topic;
   what cannot be delivered whole is **withheld**: written to ``<prefix>._withheld``
   instead, named by its raw topic/partition/offset and why, and the rest flows
   (``mcq status`` alerts, ``mcq withheld list``): a raw record that is not a Debezium
   change event (a connector with another converter), a TRUNCATE (no change names the
   keys it deleted), an operation mcq does not know, a row without a column its table's
   key is read from, and an update carrying Debezium's
   placeholder for a large value left out of the WAL (``UNAVAILABLE``), which would
   overwrite the real value at every target;
4. serialise key and value with the Avro schemas in Confluent's wire format (magic byte,
   registry schema id, Avro body) — what confluent-kafka's deserialisers read — and give
   every record, tombstones included, the header ``mcq.position`` = ``<last commit LSN>/<LSN>``;
5. repartition by key and sort within partitions by (key, last commit LSN, LSN, raw
   offset), so every key's records reach its Kafka partition in source commit order,
   even when they came from different source tables in the same micro-batch.

The checkpoint makes a restart resume after the last committed batch; a batch cut short
is written again whole (at-least-once), which a compacted, idempotently applied topic
absorbs: the last record per key is still the newest. SIGINT/SIGTERM stop the stream the
same safe way (a batch in flight is abandoned and re-run after a restart) and return.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcq.config import Settings
from mcq.contract import register_topic, registry_client, schema_text
from mcq.health import HealthServer
from mcq.registry.model import Registry
from mcq.registry.store import RegistryStore
from mcq.topics.plan import apply_topics, plan_topics
from streams.catchup import CATCH_UP_ABOVE, catch_up
from streams.checkpoint import clear_torn_writes, lost_raw_reason, started
from streams.debezium import EnvelopeReader
from streams.exceptions import NormalizeError
from streams.metrics import NormalizeMetrics, behind
from streams.plan import FeedPlan, NormalizePlan, plan_normalize

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

Report = Callable[[str], None]

UNAVAILABLE = "__debezium_unavailable_value"
"""Debezium's placeholder (``unavailable.value.placeholder``) for a large (TOAST) value an
update left unchanged when the table's REPLICA IDENTITY is not FULL: the value is not in
the WAL. A change carrying it is withheld (its table/subtype's records would overwrite the
real value at every target) and written to the withheld topic instead."""

KEY_TYPE = (
    "struct<tname:string,subtype:string,person_id:bigint,pkey_string:string,pkey_number:bigint,aux_string:string>"
)
RECORDS_TYPE = (
    f"array<struct<topic:string,key:{KEY_TYPE},change_type:string,after:map<string,string>,"
    "before:map<string,string>,origin:string,call_stack:string,tombstone:boolean>>"
)


POSITION_HEADER = "mcq.position"

# a micro-batch is written all at once: full batches, compressed, rather than the
# producer's defaults for a trickle (16 KB batches sent as soon as possible); kafka.extra
# overrides these
BATCH_PRODUCER = {
    "kafka.linger.ms": "10",
    "kafka.batch.size": str(1 << 20),
    "kafka.compression.type": "lz4",
}


def position_headers() -> Column:
    """Kafka headers of every record written: ``mcq.position`` = ``<last commit LSN>/<LSN>``.

    A tombstone has no value to carry the source position; the listener runtime reads it
    here to apply a tombstone as a delete in order (compaction may have removed the DELETE
    record before it)."""
    from pyspark.sql import functions as F

    position = F.concat_ws("/", F.col("last_commit_lsn").cast("string"), F.col("lsn").cast("string"))
    return F.array(F.struct(F.lit(POSITION_HEADER).alias("key"), position.cast("binary").alias("value")))


def feed_key(feed: FeedPlan, row: Column) -> Column:
    """The logical key (a ``KEY_TYPE`` struct) of one row image of a feed (a
    ``map<string,string>`` column -> text): the key fields from the columns the feed maps."""
    from pyspark.sql import functions as F

    def field_(name: str, typ: str) -> Column:
        column = feed.key_column(name)
        value = row.getItem(column) if column else F.lit(None)
        if typ == "long":  # numeric keys may arrive as "42" or "42.0" (decimal.handling.mode=string)
            value = value.cast("decimal(38,0)").cast("long")
        return value.cast(typ).alias(name)

    return F.struct(
        F.lit(feed.tname).alias("tname"),
        F.lit(feed.subtype).cast("string").alias("subtype"),
        field_("person_id", "long"),
        field_("pkey_string", "string"),
        field_("pkey_number", "long"),
        field_("aux_string", "string"),
    )


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

    def line(self) -> str:
        phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.phases.items())
        return (
            f"batch {self.batch_id}: in {self.rows_in}, out {self.records_out} (+{self.tombstones} tombstones, "
            f"{self.refresh} refresh requests), dropped as housekeeping {self.housekeeping}, "
            + (f"WITHHELD {self.withheld} (see {self.withheld_topic}), " if self.withheld else "")
            + f"{self.seconds:.1f} s"
            + (f" ({phases})" if phases else "")
        )


@dataclass
class NormalizeJob:
    """One normaliser: its plan, schema ids, and the Spark stream that runs it."""

    settings: Settings
    registry: Registry
    checkpoint: Path
    report: Report = print
    max_offsets_per_trigger: int | None = None
    accept_lost_raw: bool = False
    """Go on past raw records deleted before they were read (Spark's failOnDataLoss off):
    only once the operator has refreshed what they carried (``lost_raw_line``)."""
    only: NormalizePlan | None = None
    """Part of the registry's plan to run (``streams.realtime.split_plan``); all of it when None."""
    plan: NormalizePlan = field(init=False)
    schema_ids: dict[str, tuple[int, int]] = field(init=False, default_factory=dict)
    history: list[BatchStats] = field(init=False, default_factory=list)
    _known_refs: set[str] = field(init=False, default_factory=set)
    _built: dict[str, Any] = field(init=False, default_factory=dict)
    """Column expressions built once and applied to every micro-batch: building them is
    tens of thousands of py4j calls (seconds), applying them is not."""

    def _once(self, name: str, build: Callable[[], Any]) -> Any:
        if name not in self._built:
            self._built[name] = build()
        return self._built[name]

    def __post_init__(self) -> None:
        self.plan = self.only or plan_normalize(self.registry, self.settings.topic_prefix)

    def part(self, plan: NormalizePlan, checkpoint: Path) -> NormalizeJob:
        """A job for part of this plan, sharing its schema ids and known provenance."""
        job = NormalizeJob(
            self.settings, self.registry, checkpoint, self.report, self.max_offsets_per_trigger,
            self.accept_lost_raw, only=plan,
        )  # fmt: skip
        job.schema_ids = self.schema_ids
        job._known_refs = self._known_refs
        return job

    # ------------------------------------------------------------------ set-up

    def prepare(self) -> None:
        """Create missing output topics, register their schemas, load known provenance."""
        report = apply_topics(self.settings, plan_topics(self.registry, self.settings.topic_prefix))
        for line in report.drift:
            self.report(f"normalize: topic drift (left as it is): {line}")
        client = registry_client(self.settings)
        for topic in [*self.plan.logical_topics, self.plan.refresh_topic, self.plan.withheld_topic]:
            self.schema_ids[topic] = register_topic(client, topic)
        store = RegistryStore(self.settings)
        self._known_refs = {p.ref for p in store.provenance()}
        self.report(f"normalize: reading {len(self.plan.raw_topics)} raw topics: {', '.join(self.plan.raw_topics)}")
        self.report(
            f"normalize: writing {len(self.plan.logical_topics)} logical topics: {', '.join(self.plan.logical_topics)}"
            f" (refresh requests to {self.plan.refresh_topic})"
        )
        self.report(f"normalize: checkpoint {self.checkpoint}")

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

    def _record(
        self,
        topic: Column,
        key: Column,
        change_type: str,
        after: Column,
        before: Column,
        origin: Column,
        call_stack: Column,
        tombstone: bool,
    ) -> Column:
        from pyspark.sql import functions as F

        return F.struct(
            topic.alias("topic"),
            key.alias("key"),
            F.lit(change_type).alias("change_type"),
            after.alias("after"),
            before.alias("before"),
            origin.alias("origin"),
            call_stack.alias("call_stack"),
            F.lit(tombstone).alias("tombstone"),
        )

    def project_feed(self, feed: FeedPlan) -> tuple[Column, Column]:
        """One feed's logical records of a raw row (several where a key moved, or a delete),
        and whether the row is a housekeeping-only update; empty for other raw topics."""
        from pyspark.sql import functions as F

        before, after, op = F.col("e.before"), F.col("e.after"), F.col("e.op")
        null_map = F.lit(None).cast("map<string,string>")
        origin = F.lit(f"table {feed.source_table}")
        no_stack = F.lit(None).cast("string")
        old_key, new_key = feed_key(feed, before), feed_key(feed, after)
        touches = F.lit(True) if not feed.watch else F.lit(False)
        for column in feed.watch:
            touches = touches | ~before.getItem(column).eqNullSafe(after.getItem(column))
        touches = before.isNull() | touches  # without a before-image every update counts

        def rec(key: Column, change_type: str, a: Column, b: Column, tomb: bool = False) -> Column:
            return self._record(F.lit(feed.topic), key, change_type, a, b, origin, no_stack, tomb)

        moved = before.isNotNull() & ~old_key.eqNullSafe(new_key)
        mine = F.col("raw_topic") == feed.raw_topic
        withheld = self._record(
            F.lit(self.plan.withheld_topic), new_key, "UPDATE", after, before, self._withheld_reason(), no_stack, False
        )
        image = F.when(op == "d", before).otherwise(after)
        lacking = [F.when(~F.map_contains_key(image, column), F.lit(column)) for _, column in feed.keys]
        missing = F.concat_ws(", ", *lacking) if lacking else F.lit("")
        keyless = self._record(
            F.lit(self.plan.withheld_topic), self._no_key(), "UPDATE", after, before,
            self._quarantine_reason(
                F.concat(F.lit(f"the row has no column(s) {feed.ref}'s key is read from: "), missing)
            ),
            no_stack, False,
        )  # fmt: skip
        outputs = (
            F.when(~mine, F.array().cast(RECORDS_TYPE))
            .when(image.isNotNull() & (missing != ""), F.array(keyless))
            .when(op.isin("c", "r"), F.array(rec(new_key, "INSERT", after, null_map)))
            .when((op == "u") & F.col("unavailable") & (moved | touches), F.array(withheld))
            .when(
                op == "d",
                F.array(rec(old_key, "DELETE", null_map, before), rec(old_key, "DELETE", null_map, before, True)),
            )
            .when(
                (op == "u") & moved,
                F.array(
                    rec(old_key, "DELETE", null_map, before),
                    rec(old_key, "DELETE", null_map, before, True),
                    rec(new_key, "INSERT", after, null_map),
                ),
            )
            .when((op == "u") & touches, F.array(rec(new_key, "UPDATE", after, before)))
            .otherwise(F.array().cast(RECORDS_TYPE))
        )
        housekeeping = mine & (op == "u") & ~moved & ~touches
        return outputs, housekeeping

    @staticmethod
    def _no_key() -> Column:
        """The key of a withheld record that has none."""
        from pyspark.sql import functions as F

        return F.struct(
            F.lit("?").alias("tname"),
            *(F.lit(None).cast(t).alias(f) for f, t in (("subtype", "string"), ("person_id", "long"),
              ("pkey_string", "string"), ("pkey_number", "long"), ("aux_string", "string"))),
        )  # fmt: skip

    @staticmethod
    def _quarantine_reason(why: Column) -> Column:
        """``withheld: <raw topic> partition P offset O: <why>``."""
        from pyspark.sql import functions as F

        return F.concat(
            F.lit("withheld: "),
            F.col("raw_topic"),
            F.lit(" partition "),
            F.col("raw_partition").cast("string"),
            F.lit(" offset "),
            F.col("raw_offset").cast("string"),
            F.lit(": "),
            why,
        )

    def _poison(self) -> Column:
        """A raw record the normaliser cannot read: the reason, else null."""
        from pyspark.sql import functions as F

        op = F.col("e.op")
        return (
            F.when(
                op.isNull(),
                F.lit(
                    "not a Debezium JSON change event (is the connector's value.converter "
                    "org.apache.kafka.connect.json.JsonConverter? `mcq connect apply` sets it)"
                ),
            )
            .when(
                op == "t",
                F.lit(
                    "a TRUNCATE of the table: every row deleted at once, and no change names their keys; repair: "
                    "mcq refresh LISTENER --from source (it deletes at the target what the source no longer holds)"
                ),
            )
            .when(~op.isin("c", "r", "u", "d"), F.concat(F.lit("an operation mcq does not know: "), op))
        )

    @staticmethod
    def _withheld_reason() -> Column:
        """Why a change was withheld, where its raw record is, and what repairs its targets."""
        from pyspark.sql import functions as F

        columns = F.array_join(F.map_keys(F.map_filter(F.col("e.after"), lambda _, v: v.contains(UNAVAILABLE))), ", ")
        return NormalizeJob._quarantine_reason(
            F.concat(
                F.lit("the update left large value(s) of column(s) "),
                columns,
                F.lit(" unchanged and they are not in the WAL (the table's REPLICA IDENTITY is not FULL); repair: "
                      "ALTER TABLE ... REPLICA IDENTITY FULL, then mcq refresh LISTENER --from source"),
            )
        )  # fmt: skip

    def project_outbox(self) -> Column:
        """Explicit log entries: their own logical topic, or the refresh topic."""
        from pyspark.sql import functions as F

        row = F.col("e.after")
        key = F.struct(
            F.upper(row.getItem("tname")).alias("tname"),
            row.getItem("subtype").alias("subtype"),
            row.getItem("person_id").cast("long").alias("person_id"),
            row.getItem("pkey_string").alias("pkey_string"),
            row.getItem("pkey_number").cast("decimal(38,0)").cast("long").alias("pkey_number"),
            row.getItem("aux_string").alias("aux_string"),
        )
        topic = F.lit(self.plan.refresh_topic)
        for tname, subtype, logical in self.plan.explicit_topics:
            same_subtype = row.getItem("subtype").isNull() if subtype is None else row.getItem("subtype") == subtype
            topic = F.when((F.upper(row.getItem("tname")) == tname) & same_subtype, F.lit(logical)).otherwise(topic)
        change_type = F.upper(row.getItem("change_type"))
        null_map = F.lit(None).cast("map<string,string>")
        origin = F.concat(F.lit("explicit mcq_log_"), row.getItem("change_type"))
        stack = row.getItem("call_stack")
        plain = self._record(topic, key, "X", null_map, null_map, origin, stack, False).withField(
            "change_type", change_type
        )
        scope = row.getItem("source")
        in_scope: Column = F.lit(False)
        for topic_name, source in self.plan.outbox_sources:  # an entry for another source is not ours
            in_scope = in_scope | ((F.col("raw_topic") == topic_name) & (scope.isNull() | (scope == source)))
        mine = in_scope & F.col("e.op").isin("c", "r")
        return (
            F.when(~mine, F.array().cast(RECORDS_TYPE))
            .when(
                # an explicit-only table's delete ends in a tombstone; a refresh request never does
                (change_type == "DELETE") & (topic != F.lit(self.plan.refresh_topic))
                if self.plan.explicit_topics
                else F.lit(False),
                F.array(plain, plain.withField("tombstone", F.lit(True))),
            )
            .otherwise(F.array(plain))
        )

    def _projections(self) -> list[tuple[Column, Column, Column]]:
        """(which raw rows, housekeeping flag, exploded records) of each raw topic and the outbox."""
        from pyspark.sql import functions as F

        by_topic: dict[str, list[FeedPlan]] = {}
        for feed in self.plan.feeds:
            by_topic.setdefault(feed.raw_topic, []).append(feed)
        poison = self._poison()
        null_map = F.lit(None).cast("map<string,string>")
        unreadable = self._record(
            F.lit(self.plan.withheld_topic), self._no_key(), "UPDATE", null_map, null_map,
            self._quarantine_reason(poison), F.lit(None).cast("string"), False,
        )  # fmt: skip

        def records(projected: Column) -> Column:  # a record the normaliser cannot read is withheld, by name
            return F.posexplode_outer(F.when(poison.isNotNull(), F.array(unreadable)).otherwise(projected))

        out: list[tuple[Column, Column, Column]] = []
        for raw_topic, feeds in sorted(by_topic.items()):
            outputs: list[Column] = []
            housekeeping: Column = F.lit(False)
            for feed in feeds:
                projected, hk = self.project_feed(feed)
                outputs.append(projected)
                housekeeping = housekeeping | hk
            out.append((F.col("raw_topic") == raw_topic, housekeeping, records(F.concat(*outputs))))
        if self.plan.outbox_topics:
            out.append(
                (F.col("raw_topic").isin(*self.plan.outbox_topics), F.lit(False), records(self.project_outbox()))
            )
        return out

    def transform(self, parsed: DataFrame) -> DataFrame:
        """All logical records of a batch, with what the sink and the counters need.

        One projection per raw topic, holding only that topic's feeds: a single projection
        of every feed outgrows the JVM's 64 KB method limit for generated code."""
        from pyspark.sql import functions as F

        parts = [
            parsed.where(where).select("*", housekeeping.alias("housekeeping"), records.alias("pos", "r"))
            for where, housekeeping, records in self._once("projections", self._projections)
        ]
        out = parts[0]
        for part in parts[1:]:
            out = out.unionByName(part)
        # each part keeps every partition of the batch (mostly empty after its filter): merge
        # them without a shuffle rather than schedule parts x partitions tasks
        return out.coalesce(self._partitions(parsed)).withColumn("topic", F.col("r.topic"))

    def _wire_columns(self) -> tuple[Column, Column]:
        """Key and value bytes of a record: Confluent's wire format around the Avro body."""
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import to_avro

        r = F.col("r")
        # Spark sees every field of the exploded record as nullable; the Avro schema's
        # required fields get a non-null expression so the serializer can trust them
        tname = F.coalesce(r.getField("key").getField("tname"), F.lit("?"))
        key = r.getField("key").withField("tname", tname)
        value = F.struct(
            tname.alias("tname"),
            key.getField("subtype").alias("subtype"),
            F.coalesce(r.getField("change_type"), F.lit("UPDATE")).alias("change_type"),
            key.getField("person_id").alias("person_id"),
            key.getField("pkey_string").alias("pkey_string"),
            key.getField("pkey_number").alias("pkey_number"),
            key.getField("aux_string").alias("aux_string"),
            F.col("entry_time").alias("entry_time"),
            F.struct(
                F.col("last_commit_lsn").alias("last_commit_lsn"),
                F.col("lsn").alias("lsn"),
                F.col("e.source.txId").alias("txid"),
                F.coalesce(
                    F.concat_ws(".", F.col("e.source.schema"), F.col("e.source.table")), F.col("raw_topic")
                ).alias("table"),
            ).alias("source"),
            r.getField("after").alias("after"),
            r.getField("before").alias("before"),
            F.struct(
                F.coalesce(r.getField("origin"), F.lit("unknown")).alias("origin"),
                r.getField("call_stack").alias("call_stack"),
            ).alias("provenance"),
        )

        def header(kind: int) -> Column:
            ids = F.lit(None).cast("int")
            for topic, pair in self.schema_ids.items():
                ids = F.when(F.col("topic") == topic, F.lit(pair[kind])).otherwise(ids)
            return F.concat(F.unhex(F.lit("00")), F.unhex(F.lpad(F.hex(ids), 8, "0")))

        key_bytes = F.concat(header(0), to_avro(key, schema_text("change_key")))
        value_bytes = F.when(r.getField("tombstone"), F.lit(None).cast("binary")).otherwise(
            F.concat(header(1), to_avro(value, schema_text("change_record")))
        )
        return key_bytes, value_bytes

    def serialize(self, records: DataFrame) -> DataFrame:
        """Key and value in Confluent's wire format, ordered per key by source position."""
        from pyspark.sql import functions as F

        key_bytes, value_bytes = self._once("serialize", self._wire_columns)
        partitions = self._partitions(records)
        return (
            records.where(F.col("r").isNotNull())
            .select(
                F.col("topic"),
                key_bytes.alias("key"),
                value_bytes.alias("value"),
                "last_commit_lsn",
                "lsn",
                "raw_offset",
                "pos",
            )
            .repartition(partitions, "key")
            .sortWithinPartitions("key", "last_commit_lsn", "lsn", "raw_offset", "pos")
            .select("topic", "key", "value", position_headers().alias("headers"))
        )

    # ------------------------------------------------------------------ the stream

    @staticmethod
    def _partitions(df: DataFrame) -> int:
        """Spark's shuffle partitions: the parallelism every step of a batch is cut to."""
        return max(1, int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 4))

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
        parsed = self.parse(raw).coalesce(self._partitions(raw)).persist()
        records = self.transform(parsed).persist()
        try:
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
                self.serialize(records).write.format("kafka").options(**BATCH_PRODUCER).options(
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
            parsed.unpersist()
        stats.seconds = time.monotonic() - started
        self.history.append(stats)
        self.report(stats.line())

    def _unseen_refs(self) -> bool:
        explicit = (f"{t}/{s}" if s else t for t, s, _ in self.plan.explicit_topics)
        feeds = (f.ref for f in self.plan.feeds)
        return any(ref not in self._known_refs for ref in (*feeds, *explicit))

    def _record_provenance(self, seen: list[tuple[str, str | None, str]]) -> None:
        """First-seen provenance of each table/subtype (the paper's call-stack column):
        (tname, subtype, the origin of its first record in source order) of a batch."""
        origins = {f"{tname}/{subtype}" if subtype else tname: origin for tname, subtype, origin in seen}
        origins = {ref: origin for ref, origin in origins.items() if ref not in self._known_refs}
        if not origins:
            return
        for ref, provenance in sorted(RegistryStore(self.settings).record_first_seen_all(origins).items()):
            self._known_refs.add(ref)
            self.report(f"provenance: {ref} first seen from {provenance.origin.splitlines()[0]}")

    def start(self, spark: SparkSession, once: bool, trigger: str = "1 second") -> Any:
        """Start the streaming query (returns pyspark's StreamingQuery)."""
        reader = (
            spark.readStream.format("kafka")
            .options(**self.settings.kafka.spark_options())
            # a pattern, not a list: a raw topic appears only once Debezium has a change
            # for its table (an empty table, the outbox before its first entry), and Spark
            # reads a topic that appears later from its beginning
            .option("subscribePattern", "^(" + "|".join(re.escape(t) for t in self.plan.raw_topics) + ")$")
            .option("startingOffsets", "earliest")
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


def lag_line(progress: dict[str, Any]) -> str | None:
    """How far the query is behind the raw topics, from a StreamingQueryProgress as JSON."""
    rows = progress.get("numInputRows", 0)
    return f"progress: batch {progress.get('batchId')}: {rows} rows, behind the raw topics by {behind(progress)}"


class StopRequest:
    """SIGINT/SIGTERM (Kubernetes stops a pod with SIGTERM) as a request to stop the stream.

    Installed before anything starts, and again once Spark is up (PySpark's SparkContext
    replaces the SIGINT handler with one that cancels every job and raises KeyboardInterrupt
    wherever the driver happens to be). The previous handlers come back when the stream has
    stopped, so a second signal during the shutdown still ends the process."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, report: Report) -> None:
        self.requested = False
        self.jvm_gone_said = False  # (streams/normalize.py: _unless_jvm_gone)
        self._report = report

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True
        self._report(f"normalize: {signal.Signals(signum).name} received: stopping the stream")

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():  # signals reach only the main thread
            for sig in self.SIGNALS:
                signal.signal(sig, self._handle)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold SIGINT/SIGTERM back while Spark starts: PySpark's handler, there for a moment,
        would interrupt a py4j call half-way and leave the gateway broken. Held signals are
        delivered when this ends, to the handler installed by then."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)

    @contextmanager
    def on_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # an embedding caller stops the query itself
            return
        previous = {sig: signal.getsignal(sig) for sig in self.SIGNALS}
        self.install()
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


MODES = ("realtime", "microbatch")


def _message(exc: Exception) -> str:
    """A failed query's whole message (PySpark's ``str()`` of it may be empty), its causes' included."""
    parts = [str(exc)]
    for name in ("getMessage", "desc"):
        value = getattr(exc, name, None)
        parts.append(str(value() if callable(value) else value or ""))
    return "\n".join(p for p in parts if p)


def fresh_start_line(job: NormalizeJob, mode: str) -> str | None:
    """What a first run of ``mode`` under this checkpoint does when the logical topics
    already hold records (a checkpoint deleted or moved, a new ``--checkpoint``, a switch
    of mode): None when they are empty (a true first run)."""
    from mcq.topics.read import records_held

    held = records_held(job.settings, job.plan.logical_topics)
    if not held:
        return None
    return (
        f"normalize: no {mode} checkpoint at {job.checkpoint}, but the logical topics already hold {held} records "
        "(a checkpoint deleted or moved, another --checkpoint, or a switch of mode): re-deriving them from the "
        "raw topics' beginning. Safe: every record carries its source position, so the topics end with the "
        "same last states and a listener skips what it applied (counted as skipped); a raw record already "
        "deleted by retention is not read again, and its last state stays in the compacted topic"
    )


def lost_raw_line(reason: str) -> str:
    """The error and runbook when raw records were deleted before the normaliser read them."""
    return (
        f"raw changes were deleted before the normaliser read them ({reason}): the logical topics, and every "
        "listener, miss them. The raw topic's retention is shorter than the normaliser was stopped or behind "
        "(raise retention.ms/retention.bytes of the raw topics). To repair: `mcq refresh LISTENER --from source` "
        "for each listener of the tables that raw topic captures, then run the normaliser once with "
        "--accept-lost-raw to go on from the oldest raw record still kept"
    )


def run_normalize(
    settings: Settings,
    registry: Registry,
    *,
    once: bool,
    trigger: str = "1 second",
    checkpoint: Path | None = None,
    master: str | None = None,
    max_offsets_per_trigger: int | None = None,
    report: Report = print,
    mode: str = "microbatch",
    checkpoint_interval: str = "5 minutes",
    accept_lost_raw: bool = False,
    health: tuple[str, int] | None = None,
    catch_up_above: int = CATCH_UP_ABOVE,
) -> NormalizeJob:
    """Run the normaliser: until caught up (``once``, always micro-batches), or until
    stopped (SIGINT, SIGTERM) in ``mode``: ``realtime`` (Spark's Real-Time Mode, a
    checkpoint about every ``checkpoint_interval``: ``streams/realtime.py``) or ``microbatch``
    (a micro-batch every ``trigger``).

    A stop abandons the batch in flight, if any: the checkpoint makes a restart write it
    again. The modes keep their checkpoints apart (``realtime/`` and ``ordered/`` below
    the directory a micro-batch run uses): a switch of mode reads the raw topics again
    from their beginning, which the compacted, idempotently applied topics absorb.

    ``health`` (host, port): serve ``/livez``, ``/readyz`` and ``/metrics`` there
    (``streams/metrics.py``) while the queries run. ``catch_up_above``: a first real-time
    start with more raw records waiting drains them in micro-batches first
    (``streams/catchup.py``)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    job = NormalizeJob(
        settings,
        registry,
        checkpoint or settings.stack.home / "checkpoints" / f"normalize-{settings.topic_prefix}",
        report,
        max_offsets_per_trigger,
        accept_lost_raw,
    )
    stopping = StopRequest(report)
    with stopping.on_signals():
        job.prepare()
        torn = clear_torn_writes(job.checkpoint)
        if torn:
            report(f"normalize: removed {len(torn)} half-written checkpoint file(s) a killed run left, e.g. {torn[0]}")
        run_mode = "realtime" if mode == "realtime" and not once else "microbatch"
        if not started(job.checkpoint, run_mode):
            line = fresh_start_line(job, run_mode)
            if line:
                report(line)
        if not stopping.requested:
            realtime = mode == "realtime" and not once
            _stream(job, stopping, once=once, trigger=trigger, master=master,
                    interval=checkpoint_interval if realtime else None, health=health,
                    catch_up_above=catch_up_above)  # fmt: skip
        if stopping.requested:
            report("normalize: stopped; a restart resumes after the last finished batch")
    return job


def _stream(
    job: NormalizeJob, stopping: StopRequest, *, once: bool, trigger: str, master: str | None, interval: str | None,
    health: tuple[str, int] | None = None, catch_up_above: int = CATCH_UP_ABOVE,
) -> None:  # fmt: skip
    """Run the queries until they end or a stop is requested; ``interval`` set: real time."""
    metrics = NormalizeMetrics()
    queries: list[Any] = []  # filled as they start
    ticked = [time.monotonic()]

    def live() -> bool:  # the driver's loop goes round every half second once the queries run
        return time.monotonic() - ticked[0] < 60

    def ready() -> bool:
        return bool(queries) and all(q.isActive for q in queries)

    server = HealthServer(*health, live, ready, metrics.registry) if health else None
    if server is not None:
        server.start()
        job.report(f"normalize: health {server.address}")
    try:
        _run_queries(job, stopping, once=once, trigger=trigger, master=master, interval=interval,
                     metrics=metrics, queries=queries, ticked=ticked, catch_up_above=catch_up_above)  # fmt: skip
    finally:
        if server is not None:
            server.stop()


def _run_queries(
    job: NormalizeJob, stopping: StopRequest, *, once: bool, trigger: str, master: str | None, interval: str | None,
    metrics: NormalizeMetrics, queries: list[Any], ticked: list[float], catch_up_above: int,
) -> None:  # fmt: skip
    import os

    from pyspark.errors import StreamingQueryException
    from pyspark.sql.streaming.listener import StreamingQueryListener

    from streams import realtime as rt
    from streams.session import spark_session

    report = job.report
    realtime_part, ordered_part = rt.split_plan(job.plan) if interval else (job.plan, None)
    slots = 0
    if interval:
        shuffle = int(os.environ.get("MCQ_SPARK_SHUFFLE_PARTITIONS", "4"))
        slots = rt.slots_needed(job.settings, realtime_part, ordered_part, shuffle)
        if not (master or os.environ.get("MCQ_SPARK_MASTER")):
            master = f"local[{max(slots, os.cpu_count() or 1)}]"  # threads: real-time tasks mostly wait
    with stopping.deferred():
        spark = spark_session(job.settings, "mcq-normalize", master)
        stopping.install()
    if interval and spark.sparkContext.defaultParallelism < slots:
        spark.stop()
        raise NormalizeError(
            f"real-time mode needs {slots} task slots (a long-lived task per raw topic partition), the Spark "
            f"master {spark.sparkContext.master} has {spark.sparkContext.defaultParallelism}: give it more "
            "executor cores, or run with --mode microbatch"
        )
    jobs: dict[str, NormalizeJob] = {}
    seen_output = threading.Event()

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = json.loads(event.progress.json)
            metrics.observe(progress)
            if str(progress.get("name")).startswith(rt.QUERY_PREFIX):
                report(rt.batch_line(progress, interval or ""))
                if (progress.get("sink") or {}).get("numOutputRows"):
                    seen_output.set()
            line = lag_line(progress)
            if line:
                report(line)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = Progress()
    spark.streams.addListener(listener)
    try:
        if stopping.requested:
            return
        if interval is None:
            queries.append(job.start(spark, once=once, trigger=trigger))
        else:
            if ordered_part is not None:
                ordered = jobs["ordered"] = job.part(ordered_part, job.checkpoint / "ordered")
                report(
                    "normalize: fed by two or more raw topics, ordered by source position in micro-batches: "
                    + ", ".join(sorted(rt.shared_topics(job.plan)))
                )
                queries.append(ordered.start(spark, once=False, trigger=trigger))
            # the real-time query reads Kafka through the V2 source, which Real-Time Mode
            # needs (streams/session.py keeps micro-batch queries on V1): a session of its own
            fresh = spark.newSession()
            fresh.conf.set("spark.sql.streaming.disabledV2MicroBatchReaders", "")
            fresh.conf.set("spark.sql.adaptive.enabled", "false")  # not in streaming; said twice otherwise
            for topic in rt.ensure_raw_topics(job.settings, realtime_part.raw_topics):
                report(f"normalize: created raw topic {topic} (no change captured in it yet)")
            catching: list[Any] = []
            offsets = catch_up(job, realtime_part, spark, stopping, catch_up_above, catching.append)
            queries.extend(catching)  # stopped with the others if it is still running
            if stopping.requested:
                return
            queries[:] = [q for q in queries if all(q is not c for c in catching)]  # it has ended
            now = jobs["realtime"] = job.part(realtime_part, job.checkpoint / "realtime")
            started = rt.start_realtime(now, fresh, interval, offsets)
            queries.extend(started)
            report(f"normalize: real time, {len(started)} queries, {slots} task slots, checkpoint every {interval}")
        if "realtime" in jobs:
            fresh.streams.addListener(listener)
        try:
            while not stopping.requested:
                ticked[0] = time.monotonic()
                ended = next((q for q in queries if not q.isActive), None)
                if ended is not None:
                    ended.awaitTermination()  # raises what ended it, if that was an error
                    break
                time.sleep(0.5)
                if seen_output.is_set() and "realtime" in jobs:
                    seen_output.clear()
                    if jobs["realtime"]._unseen_refs():
                        rt.record_first_seen(jobs["realtime"])
        except StreamingQueryException as exc:
            if not stopping.requested:
                reason = lost_raw_reason(_message(exc))
                if reason is not None:
                    raise NormalizeError(lost_raw_line(reason)) from None
                raise
        finally:
            with _unless_jvm_gone(stopping, report):
                if interval:
                    # interrupted real-time tasks log their aborted writes: expected, not news
                    spark.sparkContext.setLogLevel("OFF")
                for query in queries:
                    if query.isActive:
                        try:
                            query.stop()  # abandons a batch in flight: the checkpoint re-runs it
                        except StreamingQueryException:
                            if not stopping.requested:
                                raise
    finally:
        with _unless_jvm_gone(stopping, report):
            # before Python goes away: the JVM would call back into a closed py4j gateway
            spark.streams.removeListener(listener)
            if "realtime" in jobs:
                fresh.streams.removeListener(listener)
            spark.stop()


@contextmanager
def _unless_jvm_gone(stopping: StopRequest, report: Callable[[str], None]) -> Iterator[None]:
    """Stopping, Spark's JVM may be gone already: a signal sent to the whole process group
    (``kill -TERM -PGID``; systemd's default KillMode) reaches it too, and it shuts down on
    its own. Nothing is lost (the checkpoint re-runs the batch in flight): one line, not a
    py4j traceback. While not stopping, a JVM that went away is an error."""
    from py4j.protocol import Py4JError

    try:
        yield
    except (Py4JError, ConnectionError) as exc:
        if not stopping.requested:
            raise
        if not stopping.jvm_gone_said:
            stopping.jvm_gone_said = True
            report(
                f"normalize: Spark's JVM had stopped already (it got the signal too: {type(exc).__name__}); "
                "the checkpoint re-runs the batch in flight"
            )
