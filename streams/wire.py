"""The logical records as Kafka writes them: key and value in Confluent's wire format
(magic byte, registry schema id, Avro body: what confluent-kafka's deserialisers read),
every record, tombstones included, with the headers ``mcq.position`` =
``<last commit LSN>/<LSN>`` and ``mcq.raw``, and each key's records in source order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mcq.change import POSITION_HEADER, RAW_HEADER
from mcq.contract import schema_text
from streams.frames import shuffle_partitions
from streams.plan import NormalizePlan

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


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
class WireFormat:
    """How one plan's records are written, by the schema ids of its topics."""

    plan: NormalizePlan
    schema_ids: dict[str, tuple[int, int]]
    """(key, value) schema id of each topic written, filled by ``NormalizeJob.prepare``."""
    _columns: tuple[Column, Column] | None = field(init=False, default=None)

    def columns(self) -> tuple[Column, Column]:
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

        if self._columns is None:  # py4j calls: built once, applied to every batch
            self._columns = self.columns()
        key_bytes, value_bytes = self._columns
        out = records.where(F.col("r").isNotNull()).select(
            F.col("topic"), key_bytes.alias("key"), value_bytes.alias("value"), "last_commit_lsn", "lsn", "raw_topic",
            "raw_partition", "raw_offset", "pos",
        )  # fmt: skip
        wire = ("topic", "key", "value", position_headers().alias("headers"))

        def ordered(part: DataFrame) -> DataFrame:
            return (
                part.repartition(shuffle_partitions(records), "key")
                .sortWithinPartitions("key", "last_commit_lsn", "lsn", "raw_offset", "pos")
                .select(*wire)
            )

        if not one_partition:
            return ordered(out)
        if not self.plan.shared_topics:
            return out.select(*wire)
        shared = F.col("topic").isin(sorted(self.plan.shared_topics))
        return out.where(~shared).select(*wire).unionByName(ordered(out.where(shared)))
