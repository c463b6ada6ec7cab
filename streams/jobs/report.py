"""``mcq report``: the figures an operator puts in front of a manager, computed in a Spark
batch over what the topics hold (the MCQ paper's Tables 2 and 5, Oracle AQ's statistics):

* **changes per day per table/subtype**: records of the logical topics by their source
  commit day (``entry_time``);
* **changes applied per day per listener**: records of each listener's applied-position
  topic by the day they were written;
* **commit → applied latency per listener** (p50, p90, p99, max): an applied record joined
  to the logical record of the same source position;
* **average wait in the bulk lane per listener**: a bulk-lane record joined to the applied
  record of the same position;
* **dead letters per day per listener and reason** (the error kind the runtime recorded).

The logical and applied-position topics are compacted: once the cleaner has run, they hold
the last record of each key, so the figures describe what the topics still hold (the
report says so). Nothing is consumed or committed.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from consumers.runtime.parking import H_ERROR, H_ERROR_KIND, H_FAILED_AT
from mcq.config import Settings
from mcq.contract import schema_text
from mcq.registry.model import Registry
from mcq.topics.listener import ListenerTopics
from streams.exceptions import ReportError
from streams.frames import union_by_name
from streams.laststate import read_topics, wire_body

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_SPAN = re.compile(r"^(\d+)([dhm])$")


def since_time(text: str, now: datetime | None = None) -> datetime:
    """``7d``, ``24h``, ``90m`` before now, or an ISO 8601 date/time (UTC unless it names a zone)."""
    now = now or datetime.now(UTC)
    m = _SPAN.match(text.strip())
    if m:
        n, unit = int(m.group(1)), m.group(2)
        return now - {"d": timedelta(days=n), "h": timedelta(hours=n), "m": timedelta(minutes=n)}[unit]
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReportError(f"--since {text!r}: say 7d, 24h, 90m or an ISO 8601 time") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


@dataclass
class Figures:
    prefix: str
    since: datetime
    made: datetime
    changes: list[tuple[str, str, int]] = field(default_factory=list)
    """(day, table/subtype, changes)"""
    applied: list[tuple[str, str, int]] = field(default_factory=list)
    """(day, listener, changes applied)"""
    latency: list[tuple[str, int, float, float, float, float]] = field(default_factory=list)
    """(listener, changes, p50 s, p90 s, p99 s, max s)"""
    bulk_wait: list[tuple[str, int, float]] = field(default_factory=list)
    """(listener, bulk changes applied, average wait s)"""
    dead_letters: list[tuple[str, str, str, int]] = field(default_factory=list)
    """(day, listener, reason, dead letters)"""
    seconds: float = 0.0


def _day(col: str) -> Column:
    from pyspark.sql import functions as F

    return F.date_format(F.col(col), "yyyy-MM-dd")


def _per_listener(
    spark: SparkSession, settings: Settings, names: list[str], topic_of: Callable[[str], str]
) -> DataFrame:
    """The records of one topic per listener, each with its listener's name."""
    from pyspark.sql import functions as F

    frames = [read_topics(spark, settings, [topic_of(n)]).withColumn("listener", F.lit(n)) for n in names]
    return union_by_name(frames)


def _existing(settings: Settings, topics: list[str]) -> set[str]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(settings.kafka.client_config()).list_topics(timeout=15).topics
    return {t for t in topics if t in meta and meta[t].error is None}


def compute(spark: SparkSession, settings: Settings, registry: Registry, since: datetime) -> Figures:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    started = time.monotonic()
    prefix = settings.topic_prefix
    figures = Figures(prefix, since, datetime.now(UTC))
    cutoff = F.lit(since.timestamp()).cast("timestamp")
    logical = sorted(_existing(settings, [t.topic(prefix) for t in registry.tables]))
    names = [x.name for x in registry.listeners]
    lanes = {n: ListenerTopics(prefix, n) for n in names}
    present = _existing(settings, [t for n in names for t in (lanes[n].applied, lanes[n].bulk, lanes[n].dlq)])

    log.info(f"report: reading {len(logical)} logical topic(s) and the topics of {len(names)} listener(s)")
    positions = None
    if logical:
        records = read_topics(spark, settings, logical).where(F.col("value").isNotNull())
        v = records.select(from_avro(wire_body("value"), schema_text("change_record")).alias("v"))
        changes = v.select(
            F.col("v.entry_time").alias("at"),
            F.concat_ws("/", "v.tname", "v.subtype").alias("ref"),
            F.col("v.source.last_commit_lsn").alias("c"),
            F.col("v.source.lsn").alias("l"),
        ).where(F.col("at") >= cutoff)
        changes.cache()
        rows = changes.groupBy(_day("at").alias("day"), "ref").count().orderBy("day", "ref").collect()
        figures.changes = [(r["day"], r["ref"], int(r["count"])) for r in rows]
        positions = changes.groupBy("c", "l").agg(F.min("at").alias("committed"))

    applied_names = [n for n in names if lanes[n].applied in present]
    if applied_names:
        raw = _per_listener(spark, settings, applied_names, lambda n: lanes[n].applied)
        parts = F.split(F.col("value").cast("string"), "/")
        applied = (
            raw.where(F.col("value").isNotNull() & F.col("key").cast("string").startswith("{"))
            .select(
                "listener",
                F.col("timestamp").alias("applied_at"),
                F.element_at(parts, 1).cast("long").alias("c"),
                F.element_at(parts, 2).cast("long").alias("l"),
            )
            .where(F.col("applied_at") >= cutoff)
        )
        applied.cache()
        rows = applied.groupBy(_day("applied_at").alias("day"), "listener").count().orderBy("day", "listener").collect()
        figures.applied = [(r["day"], r["listener"], int(r["count"])) for r in rows]
        if positions is not None:
            lag = applied.join(positions, ["c", "l"]).select(
                "listener", (F.col("applied_at").cast("double") - F.col("committed").cast("double")).alias("s")
            )
            rows = (
                lag.groupBy("listener")
                .agg(
                    F.count("*").alias("n"),
                    F.percentile_approx("s", [0.5, 0.9, 0.99], 1000).alias("p"),
                    F.max("s").alias("max"),
                )
                .orderBy("listener")
                .collect()
            )
            figures.latency = [
                (r["listener"], int(r["n"]), float(r["p"][0]), float(r["p"][1]), float(r["p"][2]), float(r["max"]))
                for r in rows
            ]
        bulk_names = [n for n in applied_names if lanes[n].bulk in present]
        if bulk_names:
            bulk = _per_listener(spark, settings, bulk_names, lambda n: lanes[n].bulk).where(F.col("value").isNotNull())
            queued = bulk.select(
                "listener",
                F.col("timestamp").alias("queued_at"),
                from_avro(wire_body("value"), schema_text("change_record")).alias("v"),
            ).select(
                "listener", "queued_at", F.col("v.source.last_commit_lsn").alias("c"), F.col("v.source.lsn").alias("l")
            )
            waits = (
                queued.join(applied, ["listener", "c", "l"])
                .where(F.col("applied_at") >= F.col("queued_at"))
                .groupBy("listener", "c", "l", "queued_at")
                .agg(F.min("applied_at").alias("applied_at"))
                .select("listener", (F.col("applied_at").cast("double") - F.col("queued_at").cast("double")).alias("s"))
            )
            rows = waits.groupBy("listener").agg(F.count("*").alias("n"), F.avg("s").alias("avg")).collect()
            figures.bulk_wait = sorted((r["listener"], int(r["n"]), float(r["avg"])) for r in rows)

    dlq_names = [n for n in names if lanes[n].dlq in present]
    if dlq_names:
        raw = _per_listener(spark, settings, dlq_names, lambda n: lanes[n].dlq)

        def header(name: str) -> Column:
            found = F.filter("headers", lambda h: h.getField("key") == name)
            return F.element_at(found, 1).getField("value").cast("string")

        letters = raw.select(
            "listener",
            (header(H_FAILED_AT).cast("double") / 1000).cast("timestamp").alias("at"),
            F.coalesce(header(H_ERROR_KIND), F.substring(header(H_ERROR), 1, 60), F.lit("?")).alias("reason"),
        ).where(F.col("at") >= cutoff)
        rows = (
            letters.groupBy(_day("at").alias("day"), "listener", "reason")
            .count()
            .orderBy("day", "listener", "reason")
            .collect()
        )
        figures.dead_letters = [(r["day"], r["listener"], r["reason"], int(r["count"])) for r in rows]
    figures.seconds = time.monotonic() - started
    return figures
