"""``mcq refresh``: the current state of selected objects, into ONE listener's bulk lane
(the MCQ paper's refresh of "all or selected objects" to one listener; other listeners
see nothing).

A Spark batch job over the compacted logical topics of the listener's tables:

1. the last record of every key (highest offset), read from the earliest offset to the
   end as of the start;
2. the selection: tables/subtypes, a content rule on the state (the registry's rule
   language, evaluated by the same code as the listeners'), explicit keys
   (streams/jobs/selection.py);
3. a key with a live state -> that record as it is (its source position included), into
   the listener's bulk topic; the listener re-applies it even when it applied that very
   change (a refresh repairs a target that lost it) and skips it when it has applied a
   newer change since (a key last refreshed ``--from source`` holds the read's position,
   newer than the topics' changes of it: their state is applied at that position);
4. a key with no live state -> a DELETE, for each key the listener's applied positions
   say is at its target (a whole-table selection, or a key list that covers it) and each
   key named whole in a key list: a refresh of a key that no longer exists is a delete.
   Its position is the newest the read knew (the newest read from the topics, or the
   key's own delete when newer), so a newer change the listener applies meanwhile --
   one that made the key anew after the read included -- still wins.

``--from source`` reads step 1 from the source database instead (streams/source_state.py):
every row of the selected tables' feeds, as the text a change record carries, each state
and delete at the database's WAL position taken before the read. For a target that must
match the source even where the topics do not (a logical topic recreated, a table whose
capture started late); tables only logged explicitly have no source and are left out.

The listener applies the bulk lane while its real-time lane has nothing waiting, so a
refresh of a million keys never holds back a password change.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka.admin import AdminClient

from consumers.runtime.acks import EXPOSED
from mcq.change import POSITION_HEADER
from mcq.config import Settings
from mcq.contract import register_topic, registry_client, schema_text
from mcq.refs import KEY_FIELDS
from mcq.registry.model import LogicalTable, Registry
from mcq.topics.listener import ListenerTopics
from streams.exceptions import RefreshError, SelectionError
from streams.frames import union_by_name
from streams.jobs.progress import stage_progress
from streams.jobs.selection import Selection
from streams.keys import KEY_REPAIR
from streams.laststate import FIELDS, key_schema, last_records, present_at_target
from streams.source_state import SourceReader, source_feeds

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

CAUSE_HEADER = "mcq.cause"
EXAMPLES = 5


@dataclass
class RefreshSummary:
    """What a refresh sent (or, in a dry run, would send), per table/subtype."""

    listener: str
    topic: str
    states: dict[str, int] = field(default_factory=dict)
    deletes: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    unkeyed: int = 0
    """Source rows left out: a column mapped to a numeric key field holds no whole number."""
    unkeyed_examples: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.states.values()) + sum(self.deletes.values())

    def lines(self) -> list[str]:
        refs = sorted(set(self.states) | set(self.deletes))
        out = [f"{ref}: {self.states.get(ref, 0):,} state(s), {self.deletes.get(ref, 0):,} delete(s)" for ref in refs]
        out += [f"e.g. {example}" for example in self.examples]
        if self.unkeyed:
            out.append(f"LEFT OUT {self.unkeyed:,} source row(s) with no whole key, e.g.:")
            out += [f"  {reason}" for reason in self.unkeyed_examples]
        return out or ["nothing selected"]


def listener_tables(registry: Registry, name: str) -> list[LogicalTable]:
    """The tables of a listener's interests; an unknown listener is a SelectionError."""
    if registry.listener(name) is None:
        known = ", ".join(sorted(li.name for li in registry.listeners)) or "none"
        raise SelectionError(f"no listener named {name} in the registry (known: {known})")
    return registry.tables_of(name)


class Refresh:
    """One refresh of one listener; :meth:`run` does it (or counts it, dry)."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        name: str,
        chosen: Selection,
        from_source: bool = False,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.name = name
        self.chosen = chosen
        self.topics = ListenerTopics(settings.topic_prefix, name)
        self.tables: list[LogicalTable] = [t for t in listener_tables(registry, name) if chosen.takes(t)]
        self.source: SourceReader | None = None
        if from_source:
            logged = [t.ref for t in self.tables if not t.feeds]
            if logged and len(logged) == len(self.tables):
                raise SelectionError(
                    f"{', '.join(logged)}: no source table feeds it (its changes are only logged explicitly); "
                    "refresh it --from topics"
                )
            if logged:
                log.warning(f"refresh {name}: {', '.join(logged)}: logged explicitly, no source table: left out")
            self.tables = [t for t in self.tables if t.feeds]
            self.source = SourceReader(settings, registry, source_feeds(registry, self.tables, settings.topic_prefix))

    # ------------------------------------------------------------------ the job

    def run(self, spark: SparkSession, dry_run: bool = False) -> RefreshSummary:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        started = time.monotonic()
        summary = RefreshSummary(self.name, self.topics.bulk)
        existing = self._existing([*(t.topic(self.settings.topic_prefix) for t in self.tables), self.topics.applied])
        named = [t.topic(self.settings.topic_prefix) for t in self.tables]
        logical = sorted(t for t in named if t in existing)
        label = f"refresh {self.name}"
        if self.source is not None:
            position, tables = self.source.inspect()
            log.info(
                f"{label}: {self.chosen.describe()}: reading {len(tables)} source table(s) of {self.settings.source} "
                f"as of WAL position {position}"
            )
        else:
            log.info(f"{label}: {self.chosen.describe()}: reading {len(logical)} logical topic(s)")
            if not logical and not self.chosen.keys:
                summary.seconds = time.monotonic() - started
                return summary
        ids = (0, 0) if dry_run else self._prepare_bulk_topic()
        with stage_progress(spark, label):
            if self.source is not None:
                last = self.source.states(spark, position, tables).persist(StorageLevel.MEMORY_AND_DISK)
                self._unkeyed(last, summary)
                live, dead, now = last.where(F.col("problem").isNull()).drop("problem"), None, (position, 0)
                states = self._records(self._select(live), "UPDATE", ids)
            else:
                last = last_records(spark, self.settings, logical, self.tables).persist(StorageLevel.MEMORY_AND_DISK)
                live = last.where(F.col("live"))
                dead = last.where(~F.col("live"))
                newest = last.agg(F.max("pos").alias("pos")).first()
                now = (newest["pos"]["c"], newest["pos"]["l"]) if newest and newest["pos"] else (0, 0)
                states = self._state_records(self._select(live))
            gone = self._gone(spark, live, dead, now, existing)
            out = states.unionByName(self._records(gone, "DELETE", ids))
            out = out.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                for row in out.groupBy("ref", "kind").count().collect():
                    (summary.states if row["kind"] == "state" else summary.deletes)[row["ref"]] = int(row["count"])
                examples = out.select("kind", "text").limit(EXAMPLES).collect()
                summary.examples = [f"{r['kind']} {r['text']}" for r in examples]
                if not dry_run and summary.total:
                    log.info(f"{label}: writing {summary.total:,} record(s) to {self.topics.bulk}")
                    (
                        out.select("key", "value", "headers")
                        .write.format("kafka")
                        .options(**self.settings.kafka.spark_options())
                        .option("topic", self.topics.bulk)
                        .save()
                    )
            finally:
                out.unpersist()
                last.unpersist()
        if not dry_run and self.chosen.whole:
            self._clear_exposures(logical)
        summary.seconds = time.monotonic() - started
        return summary

    def _unkeyed(self, states: DataFrame, summary: RefreshSummary) -> None:
        """Count and name the source rows without a whole key (``streams.keys.key_problem``):
        the normaliser withholds their changes, and a refresh leaves them out, said aloud."""
        from pyspark.sql import functions as F

        unkeyed = states.where(F.col("problem").isNotNull())
        examples = [row["problem"] + KEY_REPAIR for row in unkeyed.select("problem").limit(EXAMPLES).collect()]
        if examples:
            summary.unkeyed = unkeyed.count()
            summary.unkeyed_examples = examples
            left = f"LEFT OUT {summary.unkeyed:,} source row(s) with no whole key"
            log.warning(f"refresh {self.name}: {left}: {examples[0]}")

    def _clear_exposures(self, topics: list[str]) -> None:
        """A whole-table refresh repairs the deletes a listener that stayed away longer than
        a topic keeps tombstones may have missed (``mcq status`` reports them from the mark
        ``exposed:<topic>`` in its applied topic): the repair is in the bulk lane, kept until
        applied, so the marks of the refreshed topics go."""
        from confluent_kafka import Producer

        producer = Producer(self.settings.kafka.client_config())
        for topic in topics:
            producer.produce(self.topics.applied, key=(EXPOSED + topic).encode(), value=None)
        if producer.flush(30) > 0:
            raise RefreshError(f"{self.topics.applied}: clearing the marks of missed deletes: not delivered in 30 s")

    def _existing(self, topics: list[str]) -> set[str]:
        admin = AdminClient(self.settings.kafka.client_config())
        return {t for t in admin.list_topics(timeout=30).topics if t in set(topics)}

    def _prepare_bulk_topic(self) -> tuple[int, int]:
        """The listener's topics (as the runtime makes them at start) and its bulk topic's
        schema ids, which the deletes are written with."""
        from mcq.topics.plan import apply_topics

        apply_topics(self.settings, self.topics.specs())
        return register_topic(registry_client(self.settings), self.topics.bulk)

    def _select(self, live: DataFrame) -> DataFrame:
        """The live states the selection names."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import BooleanType

        if self.chosen.keys is not None:
            live = self._named(live)
        if self.chosen.where is not None:
            rule_text = self.chosen.where.text

            def matches(tname, subtype, person_id, pkey_string, pkey_number, aux_string, change_type, after):  # type: ignore[no-untyped-def]
                from mcq.registry.rules import change_values, parse_rule

                fields = {
                    "tname": tname,
                    "subtype": subtype,
                    "person_id": person_id,
                    "pkey_string": pkey_string,
                    "pkey_number": pkey_number,
                    "aux_string": aux_string,
                    "change_type": change_type,
                }
                return parse_rule(rule_text).matches(change_values(fields, after, None))

            rule = F.udf(matches, BooleanType())
            live = live.where(rule(*(F.col(f) for f in FIELDS), F.col("change_type"), F.col("after")))
        return live

    def _named(self, df: DataFrame) -> DataFrame:
        """The rows of ``df`` some key of the key list names (whole or partial): one
        semi-join per shape of key (the fields it gives), never a cross join."""
        from pyspark.sql import functions as F

        assert self.chosen.keys is not None
        spark = df.sparkSession
        shapes: dict[tuple[str, ...], set[tuple[object, ...]]] = {}
        for key in self.chosen.keys:
            given = tuple(f for f in FIELDS if getattr(key, f) is not None)
            shapes.setdefault(given, set()).add(tuple(getattr(key, f) for f in given))
        parts = [
            df.join(F.broadcast(spark.createDataFrame(sorted(values, key=repr), schema=key_schema(given))),
                    list(given), "left_semi")
            for given, values in shapes.items()
        ]  # fmt: skip
        found = union_by_name(parts)
        return found.dropDuplicates(list(FIELDS)) if len(shapes) > 1 else found

    def _gone(
        self,
        spark: SparkSession,
        live: DataFrame,
        dead: DataFrame | None,
        now: tuple[int, int],
        existing: set[str],
    ) -> DataFrame:
        """The keys to delete: no live state, and at the target (by the listener's applied
        positions) within the selection, or named whole in the key list.

        Each delete carries the newest position the read knew (``now``; a key's own delete
        or tombstone when newer): the delete of a key the listener never applied (a stray
        row at its target) passes the target's guard against older changes, and a key the
        listener applied a newer change of than the read saw -- created after the read --
        keeps it (the listener skips an older delete)."""
        from pyspark.sql import functions as F

        candidates: DataFrame | None = None
        if (self.chosen.whole or self.chosen.keys is not None) and self.topics.applied in existing:
            present = self._present(spark)
            candidates = present if self.chosen.whole else self._named(present)
        named = self._named_whole(spark)
        if named is not None:
            candidates = named if candidates is None else candidates.unionByName(named)
        if candidates is None:
            return _empty_gone(spark)
        held, states = candidates.select(*FIELDS).distinct().alias("held"), live.select(*FIELDS).alias("state")
        gone = held.join(states, [F.col(f"held.{f}").eqNullSafe(F.col(f"state.{f}")) for f in FIELDS], "left_anti")
        c, lsn = now
        newest = F.struct(F.lit(c).cast("long").alias("c"), F.lit(lsn).cast("long").alias("l"))
        if dead is None:
            return gone.select(*FIELDS, newest.alias("pos"))
        records = dead.select(*FIELDS, F.col("pos").alias("record")).alias("dead")
        same = [F.col(f"gone.{f}").eqNullSafe(F.col(f"dead.{f}")) for f in FIELDS]
        return (
            gone.alias("gone")
            .join(records, same, "left")
            .select(*(F.col(f"gone.{f}") for f in FIELDS), F.greatest(F.col("dead.record"), newest).alias("pos"))
        )

    def _present(self, spark: SparkSession) -> DataFrame:
        """Keys of the selected tables at the listener's target, with their applied positions."""
        return present_at_target(spark, self.settings, self.topics.applied, self.tables).drop("text")

    def _named_whole(self, spark: SparkSession) -> DataFrame | None:
        """The keys of the key list that name one key of a selected table whole (every key
        field its feeds map, no other): a delete when it has no state."""
        if self.chosen.keys is None:
            return None
        rows = []
        for key in self.chosen.keys:
            for t in self.tables:
                fields = self.registry.key_fields(t)
                if (
                    key.tname == t.tname
                    and key.subtype in (None, t.subtype)
                    and fields
                    and all((getattr(key, f) is not None) == (f in fields) for f in KEY_FIELDS)
                ):
                    rows.append((key.tname, t.subtype, *(getattr(key, f) for f in KEY_FIELDS), (0, 0)))
        if not rows:
            return None
        from pyspark.sql.types import LongType, StructField, StructType

        pos = StructType([StructField("c", LongType()), StructField("l", LongType())])
        return spark.createDataFrame(rows, schema=StructType([*key_schema(FIELDS).fields, StructField("pos", pos)]))

    # ------------------------------------------------------------------ what is written

    def _state_records(self, live: DataFrame) -> DataFrame:
        """A live state as its record was written to the logical topic."""
        from pyspark.sql import functions as F

        return live.select(
            _ref().alias("ref"),
            F.lit("state").alias("kind"),
            _text().alias("text"),
            "key",
            "value",
            _headers(F.col("pos")).alias("headers"),
        )

    def _records(self, rows: DataFrame, change_type: str, ids: tuple[int, int]) -> DataFrame:
        """A change record of each row (key fields, ``pos``; ``after`` for a state) in
        Confluent's wire format with the bulk topic's schema ids: a DELETE of a gone key,
        or an UPDATE carrying a state read from the source."""
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import to_avro

        state = change_type != "DELETE"
        tname = F.coalesce(F.col("tname"), F.lit("?"))  # required in the schema
        key = F.struct(tname.alias("tname"), *(F.col(f) for f in FIELDS[1:]))
        origin = f"refresh of {self.name}" + (f" from {self.settings.source}" if state else "")
        value = F.struct(
            tname.alias("tname"),
            F.col("subtype"),
            F.lit(change_type).alias("change_type"),
            *(F.col(f) for f in KEY_FIELDS),
            F.current_timestamp().alias("entry_time"),
            F.struct(
                F.coalesce(F.col("pos.c"), F.lit(0).cast("long")).alias("last_commit_lsn"),
                F.coalesce(F.col("pos.l"), F.lit(0).cast("long")).alias("lsn"),
                F.lit(None).cast("long").alias("txid"),
                F.lit("mcq.refresh").alias("table"),
            ).alias("source"),
            (F.col("after") if state else F.lit(None).cast("map<string,string>")).alias("after"),
            F.lit(None).cast("map<string,string>").alias("before"),
            F.struct(F.lit(origin).alias("origin"), F.lit(None).cast("string").alias("call_stack")).alias("provenance"),
        )  # fmt: skip
        return rows.select(
            _ref().alias("ref"),
            F.lit("state" if state else "delete").alias("kind"),
            _text().alias("text"),
            F.concat(_wire_header(ids[0]), to_avro(key, schema_text("change_key"))).alias("key"),
            F.concat(_wire_header(ids[1]), to_avro(value, schema_text("change_record"))).alias("value"),
            _headers(F.col("pos")).alias("headers"),
        )


def _wire_header(schema_id: int) -> Column:
    from pyspark.sql import functions as F

    return F.unhex(F.lit(f"00{schema_id:08x}"))


def _headers(pos: Column) -> Column:
    from pyspark.sql import functions as F

    position = F.concat_ws("/", pos.getField("c").cast("string"), pos.getField("l").cast("string"))
    return F.array(
        F.struct(F.lit(POSITION_HEADER).alias("key"), position.cast("binary").alias("value")),
        F.struct(F.lit(CAUSE_HEADER).alias("key"), F.lit("refresh").cast("binary").alias("value")),
    )


def _ref() -> Column:
    from pyspark.sql import functions as F

    return F.when(F.col("subtype").isNull(), F.col("tname")).otherwise(F.concat_ws("/", "tname", "subtype"))


def _text() -> Column:
    """The key as ``ChangeKey.text()`` spells it (sorted JSON), for examples."""
    from pyspark.sql import functions as F

    return F.to_json(F.struct(*(F.col(f) for f in sorted(FIELDS))), {"ignoreNullFields": "false"})


def _empty_gone(spark: SparkSession) -> DataFrame:
    from pyspark.sql.types import LongType, StructField, StructType

    pos = StructType([StructField("c", LongType()), StructField("l", LongType())])
    return spark.createDataFrame([], StructType([*key_schema(FIELDS).fields, StructField("pos", pos)]))
