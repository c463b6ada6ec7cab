"""The last state of every key, read in a Spark batch from the compacted logical topics:
what the batch jobs (``mcq refresh``, ``mcq reconcile``) start from.

Topics are read from the earliest offset to their end as of the read; the last record
of a key (its highest offset: a key lives in one partition) is its state. A DELETE
record or a tombstone is no live state; its source position comes from the record or,
for a tombstone, from the ``mcq.position`` header the normaliser writes. Records are
in Confluent's wire format: a magic byte and a schema id before the Avro body.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mcq.change import POSITION_HEADER, Change, ChangeKey, Position
from mcq.config import Settings
from mcq.contract import schema_text
from mcq.refs import KEY_FIELDS
from mcq.registry.model import LogicalTable

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

FIELDS = ("tname", "subtype", *KEY_FIELDS)
NUMBERS = ("person_id", "pkey_number")
STREAMED_PARTITIONS = 64


def read_topics(
    spark: SparkSession, settings: Settings, topics: list[str], ends: dict[tuple[str, int], int] | None = None
) -> DataFrame:
    """Every record of ``topics`` now, or before the offsets ``ends`` gives per partition
    (key, value, headers, topic, partition, offset)."""
    ending = "latest"
    if ends is not None:
        by_topic: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in ends.items():
            by_topic.setdefault(topic, {})[str(partition)] = offset
        ending = json.dumps(by_topic)
    return (
        spark.read.format("kafka")
        .options(**settings.kafka.spark_read_options())
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", ending)
        .option("includeHeaders", "true")
        # compaction removes records between the offsets listed and those fetched: expected here
        .option("failOnDataLoss", "false")
        .load()
    )


def last_records(
    spark: SparkSession,
    settings: Settings,
    topics: list[str],
    tables: list[LogicalTable],
    ends: dict[tuple[str, int], int] | None = None,
) -> DataFrame:
    """Per key of ``tables``: the key fields, its last record's key and value bytes, whether
    it is a live state (``live``), its change type, after-state and source position
    (``pos``: struct of ``c`` = last commit LSN and ``l`` = LSN); up to ``ends`` if given."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    if not topics:
        return empty_last(spark)
    raw = read_topics(spark, settings, topics, ends).where(F.col("key").isNotNull())
    keyed = raw.select(
        from_avro(wire_body("key"), schema_text("change_key")).alias("k"),
        F.struct("offset", "key", "value", "headers").alias("r"),
    )
    last = keyed.groupBy("k").agg(F.max_by("r", F.col("r.offset")).alias("r"))
    value = F.when(F.col("r.value").isNotNull(), from_avro(wire_body("r.value"), schema_text("change_record")))
    header = F.element_at(F.filter("r.headers", lambda h: h.getField("key") == POSITION_HEADER), 1)
    parts = F.split(header.getField("value").cast("string"), "/")
    return (
        last.select("k", "r", value.alias("v"))
        .where(in_tables(tables))
        .select(
            *(F.col(f"k.{f}").alias(f) for f in FIELDS),
            F.col("r.key").alias("key"),
            F.col("r.value").alias("value"),
            (F.col("v").isNotNull() & (F.col("v.change_type") != "DELETE")).alias("live"),
            F.col("v.change_type").alias("change_type"),
            F.col("v.after").alias("after"),
            F.struct(
                F.coalesce(F.col("v.source.last_commit_lsn"), F.element_at(parts, 1).cast("long")).alias("c"),
                F.coalesce(F.col("v.source.lsn"), F.element_at(parts, 2).cast("long")).alias("l"),
            ).alias("pos"),
        )
    )


def applied_values(spark: SparkSession, settings: Settings, applied: str, tables: list[LogicalTable]) -> DataFrame:
    """The last record of each key of ``tables`` in a listener's applied positions (its
    topic ``applied``: key text -> ``commit/lsn``, ``/-`` when the key is not at the
    target): the key's ``text``, its fields as ``k`` and the ``value``."""
    from pyspark.sql import functions as F

    records = read_topics(spark, settings, [applied]).select(
        F.col("key").cast("string").alias("text"), F.col("value").cast("string").alias("value"), "offset"
    )
    last = (
        records.where(F.col("text").startswith("{"))  # keys, not park:/dead:/exposed: marks
        .groupBy("text")
        .agg(F.max_by("value", "offset").alias("value"))
        .where(F.col("value").isNotNull())
    )
    return last.select("text", F.from_json("text", key_schema(FIELDS)).alias("k"), "value").where(in_tables(tables))


def present_at_target(spark: SparkSession, settings: Settings, applied: str, tables: list[LogicalTable]) -> DataFrame:
    """Keys of ``tables`` a listener's applied positions say are at its target: the key
    fields, the key's text and its applied position ``pos``."""
    from pyspark.sql import functions as F

    held = applied_values(spark, settings, applied, tables).where(~F.col("value").endswith("/-"))
    parts = F.split("value", "/")
    return held.select(
        *(F.col(f"k.{f}").alias(f) for f in FIELDS),
        "text",
        F.struct(F.element_at(parts, 1).cast("long").alias("c"), F.element_at(parts, 2).cast("long").alias("l"))
        .alias("pos"),
    )  # fmt: skip


def live_changes(live: DataFrame) -> Iterator[Change]:
    """The live states of ``last_records`` on the driver, each as an UPDATE carrying its
    after-state and position. Partitions of a few ten thousand rows arrive one after the
    other (adaptive execution would merge a shuffle's small partitions into one of every
    row: a million states overflowed the driver's heap)."""
    now = datetime.now(UTC)
    rows = live.select(*FIELDS, "after", "pos").repartition(STREAMED_PARTITIONS)
    for row in rows.toLocalIterator(prefetchPartitions=True):
        key = ChangeKey(*(row[f] for f in FIELDS))
        position = Position(row["pos"]["c"] or 0, row["pos"]["l"] or 0)
        yield Change(key, "UPDATE", position, now, key.ref, after=dict(row["after"] or {}))


def in_tables(tables: list[LogicalTable], struct: str | None = "k") -> Column:
    """Whether the key struct ``k`` (or the row's own key fields: ``struct`` None) is of
    one of ``tables``."""
    from pyspark.sql import functions as F

    path = f"{struct}." if struct else ""
    condition = F.lit(False)
    for t in tables:
        subtype = F.col(f"{path}subtype")
        condition = condition | (
            (F.col(f"{path}tname") == t.tname) & (subtype.isNull() if t.subtype is None else subtype == t.subtype)
        )
    return condition


def wire_body(column: str) -> Column:
    """The Avro body of Confluent's wire format (after the magic byte and schema id)."""
    from pyspark.sql import functions as F

    return F.expr(f"substring({column}, 6)")


def key_schema(fields: tuple[str, ...]) -> StructType:
    """A struct of key fields, typed as the change key schema types them."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField(f, LongType() if f in NUMBERS else StringType()) for f in fields])


def empty_last(spark: SparkSession) -> DataFrame:
    from pyspark.sql.types import BinaryType, BooleanType, LongType, MapType, StringType, StructField, StructType

    pos = StructType([StructField("c", LongType()), StructField("l", LongType())])
    schema = StructType(
        [
            *key_schema(FIELDS).fields,
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("live", BooleanType()),
            StructField("change_type", StringType()),
            StructField("after", MapType(StringType(), StringType())),
            StructField("pos", pos),
        ]
    )
    return spark.createDataFrame([], schema)
