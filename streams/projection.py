"""Every raw row's logical records, as column expressions over a normaliser plan
(``streams/normalize.py`` runs them per micro-batch).

Each feed maps a row to its logical (TNAME, subtype) and key fields: an insert or
snapshot read is INSERT, a delete is DELETE followed by a tombstone, an update whose
logical key changed is DELETE of the old key then INSERT of the new, and an update
touching none of the watched columns is dropped as housekeeping. Explicit log entries
(the outbox) go to their logical topic or the refresh topic. What cannot be delivered
whole is withheld, by name and reason: a record that is not a Debezium change event, a
TRUNCATE, an unknown operation, a row without a column its key is read from or that its
feed captured since its definition was stored, Debezium's placeholder for a large value
left out of the WAL, a multi-dimensional array.

One projection per raw topic, holding only that topic's feeds (a single projection of
every feed outgrows the JVM's 64 KB method limit for generated code), written as SQL
text and parsed once per raw topic (``streams.sqltext``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from streams import sqltext as S
from streams.frames import shuffle_partitions, union_by_name
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
from streams.plan import FeedPlan, NormalizePlan
from streams.sqltext import Sql

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


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

Value = TypeVar("Value", "Column", Sql)


def garbled(value: Value) -> Value:
    """A value as Debezium writes a multi-dimensional array (``GARBLED``): a pyspark column in
    the parse, SQL text in a withheld record's reason."""
    return value.startswith(GARBLED[0]) & value.contains(GARBLED[1])


@dataclass(frozen=True)
class Projection:
    """One projection group's columns (``Projector.projection``): which raw rows
    (``where``), the values its records share computed once a row (``prelude``: the row's
    image, each feed's key of the before- and the after-image), whether a row is a
    housekeeping-only update, and its records (an array, exploded into ``pos``, ``r``)."""

    where: Column
    prelude: list[Column]
    housekeeping: Column
    records: Column


@dataclass
class Projector:
    """The projections of one plan: built at their first use, applied to every batch."""

    plan: NormalizePlan
    defined_at: dict[str, int] = field(default_factory=dict)
    """When each table/subtype's definition was stored (ms): an insert or update committed
    before it that lacks a column its feed captures is from before that column was captured,
    and flows as it did then; one committed after it is withheld. Unknown (0): withheld."""
    _built: dict[str, Any] = field(init=False, default_factory=dict)
    """Each projection group's columns: an SQL parse per raw topic, done once."""

    def _once(self, name: str, build: Callable[[], Any]) -> Any:
        if name not in self._built:
            self._built[name] = build()
        return self._built[name]

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
        return Projector._quarantine_reason(
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
        columns = S.array_join(S.map_keys(S.map_filter(S.col("e.after"), lambda _, v: garbled(v))), ", ")
        return Projector._quarantine_reason(
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
        return out.coalesce(shuffle_partitions(parsed)).withColumn("topic", F.col("r.topic"))
