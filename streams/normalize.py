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
5. keep every key's records in source commit order: a key of a logical topic fed by one
   raw topic comes from one raw partition, whose offset order is Debezium's commit order,
   and is written in the order read (no shuffle); the keys of a topic fed by two or more
   source tables are repartitioned by key and sorted by (last commit LSN, LSN, raw
   offset), as every key is when a raw topic has more than one partition.

The checkpoint makes a restart resume after the last committed batch; a batch cut short
is written again whole (at-least-once), which a compacted, idempotently applied topic
absorbs: the last record per key is still the newest. SIGINT/SIGTERM stop the stream the
same safe way (a batch in flight is abandoned and re-run after a restart) and return.

This module is one class, the job, over 400 lines: its column expressions (the parse,
every feed's projection, the withheld reasons, the wire format) all read the same plan,
settings and schema ids, and a batch runs them in order; split, each part would take the
job as its argument. Running it as a service is ``streams/runner.py``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mcq.change import POSITION_HEADER, RAW_HEADER
from mcq.config import Settings
from mcq.contract import register_topic, registry_client, schema_text
from mcq.refs import table_ref
from mcq.registry.model import Registry
from mcq.registry.store import RegistryStore
from mcq.topics.plan import apply_topics, plan_topics
from streams import sqltext as S
from streams.checkpoint import topics_read
from streams.debezium import EnvelopeReader
from streams.frames import union_by_name
from streams.keys import (
    KEY_REPAIR,
    KEY_TYPE,
    NOT_WHOLE,
    NUMBER_KEY_FIELDS,
    feed_key,
    key_number,
    key_problem,
    not_whole,
)
from streams.plan import FeedPlan, NormalizePlan, plan_normalize
from streams.siblings import SiblingLookup, resolve_deletes
from streams.sqltext import Sql

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


GARBLED = ('["[L', ";@")
"""How Debezium's PostgreSQL connector writes a multi-dimensional array (``{{a,b},{c,d}}``):
a JSON array of Java object names (``["[Ljava.lang.String;@2a86a75b", ...]``), not its
values. A value that starts with the first and holds the second is withheld."""

UNAVAILABLE = "__debezium_unavailable_value"
"""Debezium's placeholder (``unavailable.value.placeholder``) for a large (TOAST) value an
update left unchanged when the table's REPLICA IDENTITY is not FULL: the value is not in
the WAL. A change carrying it is withheld (its table/subtype's records would overwrite the
real value at every target) and written to the withheld topic instead."""

RECORDS_TYPE = (
    f"array<struct<topic:string,key:{KEY_TYPE},change_type:string,after:map<string,string>,"
    "before:map<string,string>,origin:string,call_stack:string,tombstone:boolean>>"
)


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


Value = TypeVar("Value", "Column", Sql)


def _garbled(value: Value) -> Value:
    """A value as Debezium writes a multi-dimensional array (``GARBLED``): a pyspark column in
    the parse, SQL text in a withheld record's reason."""
    return value.startswith(GARBLED[0]) & value.contains(GARBLED[1])


def position_headers() -> Column:
    """Kafka headers of every record written: ``mcq.position`` = ``<last commit LSN>/<LSN>``,
    and ``mcq.raw``: where Debezium wrote the change (``topic[partition]@offset``).

    A tombstone has no value to carry the source position; the listener runtime reads it
    here to apply a tombstone as a delete in order (compaction may have removed the DELETE
    record before it)."""
    from pyspark.sql import functions as F

    position = F.concat_ws("/", F.col("last_commit_lsn").cast("string"), F.col("lsn").cast("string"))
    raw = F.concat(
        F.col("raw_topic"),
        F.lit("["),
        F.col("raw_partition").cast("string"),
        F.lit("]@"),
        F.col("raw_offset").cast("string"),
    )
    return F.array(
        F.struct(F.lit(POSITION_HEADER).alias("key"), position.cast("binary").alias("value")),
        F.struct(F.lit(RAW_HEADER).alias("key"), raw.cast("binary").alias("value")),
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


@dataclass(frozen=True)
class Projection:
    """One projection group's columns (``NormalizeJob.projection``): which raw rows
    (``where``), the values its records share computed once a row (``prelude``: the row's
    image, each feed's key of the before- and the after-image), whether a row is a
    housekeeping-only update, and its records (an array, exploded into ``pos``, ``r``)."""

    where: Column
    prelude: list[Column]
    housekeeping: Column
    records: Column


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
    schema_ids: dict[str, tuple[int, int]] = field(init=False, default_factory=dict)
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

    def part(self, plan: NormalizePlan, checkpoint: Path) -> NormalizeJob:
        """A job for part of this plan, sharing its schema ids and known provenance."""
        job = NormalizeJob(
            self.settings, self.registry, checkpoint, self.max_offsets_per_trigger,
            self.accept_lost_raw, only=plan, defined_at=self.defined_at,
        )  # fmt: skip
        job.schema_ids = self.schema_ids
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
                F.coalesce(F.exists(F.map_values(F.col("e.after")), _garbled), F.lit(False)).alias("garbled"),
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
        topic: Sql,
        key: Sql,
        change_type: str | Sql,
        after: Sql,
        before: Sql,
        origin: Sql,
        call_stack: Sql,
        tombstone: bool,
    ) -> Sql:
        return S.struct(
            topic.alias("topic"),
            key.alias("key"),
            S.lit_or(change_type).alias("change_type"),
            after.alias("after"),
            before.alias("before"),
            origin.alias("origin"),
            call_stack.alias("call_stack"),
            S.lit(tombstone).alias("tombstone"),
        )

    def project_feed(
        self, feed: FeedPlan, old_key: Sql, new_key: Sql, image: Sql, old_problem: Sql, new_problem: Sql
    ) -> tuple[Sql, Sql]:
        """One feed's logical records of a raw row (several where a key moved, or a delete),
        and whether the row is a housekeeping-only update; empty for other raw topics.
        ``old_key``, ``new_key``: the columns holding the feed's key of the before- and
        after-image, ``image``: the one holding the row's image, ``old_problem``,
        ``new_problem``: why the before-/after-image has no whole key (``key_problem``),
        all in ``Projection.prelude``.

        A change whose key is not whole is withheld; what the targets can still be told
        flows: a row that leaves a whole key for a broken one is deleted under the old key,
        and a row corrected in the source arrives under its new key (its broken old key
        never reached a target)."""
        before, after, op = S.col("e.before"), S.col("e.after"), S.col("e.op")
        null_map = S.lit(None).cast("map<string,string>")
        origin = S.lit(f"table {feed.source_table}")
        no_stack = S.lit(None).cast("string")
        touches = S.lit(True) if not feed.watch else S.lit(False)
        for column in feed.watch:
            touches = touches | ~before.getItem(column).eqNullSafe(after.getItem(column))
        touches = before.isNull() | touches  # without a before-image every update counts

        def rec(key: Sql, change_type: str, a: Sql, b: Sql, tomb: bool = False) -> Sql:
            return self._record(S.lit(feed.topic), key, change_type, a, b, origin, no_stack, tomb)

        moved = before.isNotNull() & ~old_key.eqNullSafe(new_key)
        mine = S.col("raw_topic") == feed.raw_topic
        withheld = self._record(
            S.lit(self.plan.withheld_topic), new_key, "UPDATE", after, before, self._withheld_reason(), no_stack, False
        )
        garbled = self._record(
            S.lit(self.plan.withheld_topic), new_key, "UPDATE", after, before, self._garbled_reason(), no_stack, False
        )
        lacking = [S.when(~S.map_contains_key(image, column), S.lit(column)) for _, column in feed.keys]
        missing = S.concat_ws(", ", *lacking) if lacking else S.lit("")
        keyless = self._record(
            S.lit(self.plan.withheld_topic), self._no_key(), "UPDATE", after, before,
            self._quarantine_reason(
                S.concat(S.lit(f"the row has no column(s) {feed.ref}'s key is read from: "), missing)
            ),
            no_stack, False,
        )  # fmt: skip

        def unkeyed(key: Sql, problem: Sql) -> Sql:
            why = self._quarantine_reason(S.concat(problem, S.lit(KEY_REPAIR)))
            return self._record(S.lit(self.plan.withheld_topic), key, "UPDATE", after, before, why, no_stack, False)

        old_bad, new_bad = old_problem.isNotNull(), new_problem.isNotNull()
        # a column capture takes that the row lacks: renamed or dropped in the source (or added to the
        # registry before `mcq connect apply`); delivered, the change would remove its value at every target
        gone = [S.when(~S.map_contains_key(after, column), S.lit(column)) for column in feed.columns]
        absent = S.concat_ws(", ", *gone) if gone else S.lit("")
        lost = self._record(
            S.lit(self.plan.withheld_topic), new_key, "UPDATE", after, before,
            self._quarantine_reason(
                S.concat(
                    S.lit("the row has no column(s) "), absent,
                    S.lit(f" that {feed.ref}'s feed from {feed.source_table} captures: renamed or dropped in the "
                          "source, or added to the registry before `mcq connect apply`; repair: make the feed's "
                          "columns the table's, mcq connect apply, then mcq refresh LISTENER --from source"),
                )
            ),
            no_stack, False,
        )  # fmt: skip
        outputs = (
            S.when(~mine, S.array().cast(RECORDS_TYPE))
            .when(image.isNotNull() & (missing != ""), S.array(keyless))
            .when(old_bad & new_bad, S.array(unkeyed(new_key, S.concat_ws("; ", old_problem, new_problem))))
            .when(old_bad & (op == "d"), S.array(unkeyed(old_key, old_problem)))
            .when(
                new_bad & (op == "u") & before.isNotNull(),
                S.array(
                    rec(old_key, "DELETE", null_map, before),
                    rec(old_key, "DELETE", null_map, before, True),
                    unkeyed(new_key, new_problem),
                ),
            )
            .when(new_bad, S.array(unkeyed(new_key, new_problem)))
            .when(
                op.isin("c", "r", "u")
                & after.isNotNull()
                & (absent != "")
                & (S.coalesce(S.col("e.source.ts_ms"), S.lit(0)) >= self.defined_at.get(feed.ref, 0)),
                S.array(lost),
            )
            .when(op.isin("c", "r", "u") & S.col("garbled"), S.array(garbled))
            .when(op.isin("c", "r"), S.array(rec(new_key, "INSERT", after, null_map)))
            .when((op == "u") & S.col("unavailable") & (moved | touches), S.array(withheld))
            .when((op == "u") & old_bad, S.array(rec(new_key, "INSERT", after, null_map)))
            .when(
                op == "d",
                S.array(rec(old_key, "DELETE", null_map, before), rec(old_key, "DELETE", null_map, before, True)),
            )
            .when(
                (op == "u") & moved,
                S.array(
                    rec(old_key, "DELETE", null_map, before),
                    rec(old_key, "DELETE", null_map, before, True),
                    rec(new_key, "INSERT", after, null_map),
                ),
            )
            .when((op == "u") & touches, S.array(rec(new_key, "UPDATE", after, before)))
            .otherwise(S.array().cast(RECORDS_TYPE))
        )
        housekeeping = mine & (op == "u") & ~moved & ~touches & ~old_bad & ~new_bad
        return outputs, housekeeping

    @staticmethod
    def _no_key() -> Sql:
        """The key of a withheld record that has none."""
        return S.struct(
            S.lit("?").alias("tname"),
            *(S.lit(None).cast(t).alias(f) for f, t in (("subtype", "string"), ("person_id", "long"),
              ("pkey_string", "string"), ("pkey_number", "long"), ("aux_string", "string"))),
        )  # fmt: skip

    @staticmethod
    def _quarantine_reason(why: Sql) -> Sql:
        """``withheld: <raw topic> partition P offset O: <why>``."""
        return S.concat(
            S.lit("withheld: "),
            S.col("raw_topic"),
            S.lit(" partition "),
            S.col("raw_partition").cast("string"),
            S.lit(" offset "),
            S.col("raw_offset").cast("string"),
            S.lit(": "),
            why,
        )

    def _poison(self) -> Sql:
        """A raw record the normaliser cannot read: the reason, else null."""
        op = S.col("e.op")
        return (
            S.when(
                op.isNull(),
                S.lit(
                    "not a Debezium JSON change event (is the connector's value.converter "
                    "org.apache.kafka.connect.json.JsonConverter? `mcq connect apply` sets it)"
                ),
            )
            .when(
                op == "t",
                S.lit(
                    "a TRUNCATE of the table: every row deleted at once, and no change names their keys; repair: "
                    "mcq refresh LISTENER --from source (it deletes at the target what the source no longer holds)"
                ),
            )
            .when(~op.isin("c", "r", "u", "d"), S.concat(S.lit("an operation mcq does not know: "), op))
        )

    @staticmethod
    def _withheld_reason() -> Sql:
        """Why a change was withheld, where its raw record is, and what repairs its targets."""
        columns = S.array_join(S.map_keys(S.map_filter(S.col("e.after"), lambda _, v: v.contains(UNAVAILABLE))), ", ")
        return NormalizeJob._quarantine_reason(
            S.concat(
                S.lit("the update left large value(s) of column(s) "),
                columns,
                S.lit(" unchanged and they are not in the WAL (the table's REPLICA IDENTITY is not FULL); repair: "
                      "ALTER TABLE ... REPLICA IDENTITY FULL, then mcq refresh LISTENER --from source"),
            )
        )  # fmt: skip

    @staticmethod
    def _garbled_reason() -> Sql:
        """Why a change holding a multi-dimensional array was withheld, and the repair."""
        columns = S.array_join(S.map_keys(S.map_filter(S.col("e.after"), lambda _, v: _garbled(v))), ", ")
        return NormalizeJob._quarantine_reason(
            S.concat(
                S.lit("column(s) "),
                columns,
                S.lit(" hold a multi-dimensional array, which Debezium's connector sends as Java object names "
                      "([Ljava.lang.String;@...), not its values; repair: make the column's values one-dimensional "
                      "or leave it out of the feed's columns, then mcq refresh LISTENER --from source"),
            )
        )  # fmt: skip

    def project_outbox(self) -> Sql:
        """Explicit log entries: their own logical topic, or the refresh topic."""
        row = S.col("e.after")
        key = S.struct(
            S.upper(row.getItem("tname")).alias("tname"),
            row.getItem("subtype").alias("subtype"),
            key_number(row.getItem("person_id")).alias("person_id"),
            row.getItem("pkey_string").alias("pkey_string"),
            key_number(row.getItem("pkey_number")).alias("pkey_number"),
            row.getItem("aux_string").alias("aux_string"),
        )
        topic = S.lit(self.plan.refresh_topic)
        for tname, subtype, logical in self.plan.explicit_topics:
            same_subtype = row.getItem("subtype").isNull() if subtype is None else row.getItem("subtype") == subtype
            topic = S.when((S.upper(row.getItem("tname")) == tname) & same_subtype, S.lit(logical)).otherwise(topic)
        change_type = S.upper(row.getItem("change_type"))
        null_map = S.lit(None).cast("map<string,string>")
        origin = S.concat(S.lit("explicit mcq_log_"), row.getItem("change_type"))
        stack = row.getItem("call_stack")
        # the state an entry of a table no source feeds carries (mcq_log_*(..., state => ...)):
        # its after-state, each value as the text of its JSON (a refresh request's is not read)
        explicit = S.lit(False)
        for _, _, logical in self.plan.explicit_topics:
            explicit = explicit | (topic == S.lit(logical))
        state = S.from_json(row.getItem("state"), "map<string,string>")
        after = S.when(explicit & (change_type != "DELETE") & row.getItem("state").isNotNull(), state).otherwise(
            null_map
        )
        plain = self._record(topic, key, change_type, after, null_map, origin, stack, False)
        tombstone = self._record(topic, key, change_type, null_map, null_map, origin, stack, True)
        scope = row.getItem("source")
        in_scope: Sql = S.lit(False)
        for topic_name, source in self.plan.outbox_sources:  # an entry for another source is not ours
            in_scope = in_scope | ((S.col("raw_topic") == topic_name) & (scope.isNull() | (scope == source)))
        mine = in_scope & S.col("e.op").isin("c", "r")
        problem = S.concat_ws(
            "; ", *(not_whole(f"{name} of the log entry", row.getItem(name), "mcq_log") for name in NUMBER_KEY_FIELDS)
        )
        reason = S.concat(
            problem,
            S.lit(NOT_WHOLE + "log the entry again (mcq_log_insert, mcq_log_update, mcq_log_delete) with a "
                  "whole pkey_number, or the key as pkey_string"),
        )  # fmt: skip
        unkeyed = self._record(
            S.lit(self.plan.withheld_topic), key, change_type, row, null_map, self._quarantine_reason(reason),
            stack, False,
        )  # fmt: skip
        return (
            S.when(~mine, S.array().cast(RECORDS_TYPE))
            .when(problem != "", S.array(unkeyed))
            .when(
                # an explicit-only table's delete ends in a tombstone; a refresh request never does
                (change_type == "DELETE") & (topic != S.lit(self.plan.refresh_topic))
                if self.plan.explicit_topics
                else S.lit(False),
                S.array(plain, tombstone),
            )
            .otherwise(S.array(plain))
        )

    def projection_groups(self) -> list[tuple[str, ...]]:
        """The raw topics each projection reads: one per raw topic with feeds (sorted), then
        the outbox topics together."""
        groups: list[tuple[str, ...]] = [(t,) for t in sorted({f.raw_topic for f in self.plan.feeds})]
        if self.plan.outbox_topics:
            groups.append(tuple(self.plan.outbox_topics))
        return groups

    def projection(self, topics: tuple[str, ...]) -> Projection:
        """The projection of ``topics`` (one of ``projection_groups``), built at its first use.

        Written as SQL text and parsed once per raw topic (``streams.sqltext``): built with
        pyspark's column calls, the campus registry's took 6 s of py4j round trips."""
        built: Projection = self._once(f"projection {','.join(topics)}", lambda: self._build_projection(topics))
        return built

    def project(self, parsed: DataFrame, topics: tuple[str, ...]) -> DataFrame:
        """The rows of ``parsed`` from ``topics`` with their records (every column of
        ``parsed``, ``housekeeping``, and the exploded records ``pos`` and ``r``)."""
        from pyspark.sql import functions as F

        p = self.projection(topics)
        kept = [F.col("`" + name.replace("`", "``") + "`") for name in parsed.columns]
        # the records array is computed by a projection of its own, then exploded: as the
        # generator's argument, Spark evaluated the whole CASE of a feed's records without
        # generated code, row by row (BENCHMARKS.md, 2026-11-28)
        return (
            parsed.where(p.where)
            .select("*", *p.prelude)
            .select(*kept, p.housekeeping.alias("housekeeping"), p.records.alias("_mcq_records"))
            .select(*kept, "housekeeping", F.posexplode_outer("_mcq_records").alias("pos", "r"))
        )

    def _build_projection(self, topics: tuple[str, ...]) -> Projection:
        poison = self._poison()
        null_map = S.lit(None).cast("map<string,string>")
        unreadable = self._record(
            S.lit(self.plan.withheld_topic), self._no_key(), "UPDATE", null_map, null_map,
            self._quarantine_reason(poison), S.lit(None).cast("string"), False,
        )  # fmt: skip

        def part(where: Sql, prelude: list[Sql], housekeeping: Sql, projected: Sql) -> Projection:
            # a record the normaliser cannot read is withheld, by name
            records = S.when(poison.isNotNull(), S.array(unreadable)).otherwise(projected)
            return Projection(
                S.to_column(where),
                [S.to_column(c).alias(str(c.name)) for c in prelude],
                S.to_column(housekeeping),
                S.to_column(records),
            )

        feeds = [f for f in self.plan.feeds if f.raw_topic in topics]
        if not feeds:  # the outbox
            return part(S.col("raw_topic").isin(*topics), [], S.lit(False), self.project_outbox())
        before, after = S.col("e.before"), S.col("e.after")
        image = S.when(S.col("e.op") == "d", before).otherwise(after).alias("_mcq_image")
        prelude: list[Sql] = [image]
        outputs: list[Sql] = []
        housekeeping: Sql = S.lit(False)
        for i, feed in enumerate(feeds):
            # each key once a row, in a column of its own: written into every record and
            # condition that needs it, it made the projection's text, its analysis and its
            # generated code several times larger
            old_key, new_key = f"_mcq_old_key_{i}", f"_mcq_new_key_{i}"
            old_problem, new_problem = f"_mcq_old_problem_{i}", f"_mcq_new_problem_{i}"
            prelude += [
                feed_key(feed, before).alias(old_key),
                feed_key(feed, after).alias(new_key),
                key_problem(feed, before, "the before-image").alias(old_problem),
                key_problem(feed, after, "the after-image").alias(new_problem),
            ]
            projected, hk = self.project_feed(
                feed, *(S.col(c) for c in (old_key, new_key, "_mcq_image", old_problem, new_problem))
            )
            outputs.append(projected)
            housekeeping = housekeeping | hk
        return part(S.col("raw_topic") == topics[0], prelude, housekeeping, S.concat(*outputs))

    def groups_read(self, read: set[str] | None) -> list[tuple[str, ...]]:
        """The projection groups holding a raw topic of ``read`` (None: every group)."""
        return [g for g in self.projection_groups() if read is None or read & set(g)]

    def transform(self, parsed: DataFrame, groups: list[tuple[str, ...]] | None = None) -> DataFrame | None:
        """All logical records of a batch, with what the sink and the counters need; None
        when ``groups`` is empty.

        One projection per raw topic, holding only that topic's feeds: a single projection
        of every feed outgrows the JVM's 64 KB method limit for generated code. ``groups``: the
        projection groups of the raw topics the batch holds records of (``groups_read``; None:
        all): only those projections are planned, as Spark analyses, optimises and generates
        code for every projection of the plan however few rows it gets (with 17 raw topics
        most of a small batch's time)."""
        from pyspark.sql import functions as F

        parts = [self.project(parsed, topics) for topics in (self.projection_groups() if groups is None else groups)]
        if not parts:
            return None
        out = union_by_name(parts)
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

    def serialize(self, records: DataFrame, one_partition: bool = True) -> DataFrame:
        """Key and value in Confluent's wire format, each key's records in source order.

        A key of a logical topic fed by one raw topic comes from one raw partition, read by
        one task in offset order, which is Debezium's commit order: its records go to their
        Kafka partition in the order read, with no shuffle (the batch's partitions are
        merged by ``coalesce``, which keeps each one's order; the Kafka producer is
        idempotent, so a retry does not reorder). The keys of a topic fed by two or more raw
        topics (``NormalizePlan.shared_topics``), and every key when a raw topic of the
        batch has more than one partition (``one_partition`` false: a raw topic made by
        hand), are repartitioned by key and sorted by source position."""
        from pyspark.sql import functions as F

        key_bytes, value_bytes = self._once("serialize", self._wire_columns)
        out = records.where(F.col("r").isNotNull()).select(
            F.col("topic"), key_bytes.alias("key"), value_bytes.alias("value"), "last_commit_lsn", "lsn", "raw_topic",
            "raw_partition", "raw_offset", "pos",
        )  # fmt: skip
        wire = ("topic", "key", "value", position_headers().alias("headers"))

        def ordered(part: DataFrame) -> DataFrame:
            return (
                part.repartition(self._partitions(records), "key")
                .sortWithinPartitions("key", "last_commit_lsn", "lsn", "raw_offset", "pos")
                .select(*wire)
            )

        if not one_partition:
            return ordered(out)
        if not self.plan.shared_topics:
            return out.select(*wire)
        shared = F.col("topic").isin(sorted(self.plan.shared_topics))
        return out.where(~shared).select(*wire).unionByName(ordered(out.where(shared)))

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
        # only the projections of the raw topics this batch read records of (its offset log
        # entries tell) are planned
        read = self.groups_read(topics_read(self.checkpoint, batch_id))
        stats.projected = (len(read), len(self.projection_groups()))
        parsed = self.parse(raw).coalesce(self._partitions(raw)).persist()
        transformed = self.transform(parsed, read)
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
                self.serialize(records, one_partition).write.format("kafka").options(**BATCH_PRODUCER).options(
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
            .options(**self.settings.kafka.spark_options())
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
