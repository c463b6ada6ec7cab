"""A ``table`` target compared in Spark (``mcq reconcile``'s fast path): no state crosses
to Python but the drifted ones.

Used when the target's database is reachable through JDBC; otherwise
``streams/jobs/reconcile.py`` judges every state through the view on the driver. Both find the
same drift:

- expected: the last live state of every key the listener's view admits, restricted to
  the columns it sees, by key text (as ``rows_in_view`` gives it; ``streams.jobs.tableview``:
  a table with a content rule is judged by the view itself in Spark's workers);
- actual: the target's rows read through JDBC in parallel block ranges, the ``state``
  JSON parsed as a map of strings; a state that is not an object of strings and nulls
  equals no expected one;
- one full outer join on the key text: **missing**, **extra** and **different** keys
  (two states are equal when they hold the same columns with the same values).

Only the drifted keys, with both contents, are brought to the driver; the rest is counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from consumers.table.adapter import TableAdapter
from streams.jobs.tableview import in_view, with_key_text
from streams.laststate import FIELDS
from streams.source_state import read_in_ranges

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from consumers.runtime.view import ListenerView
    from mcq.registry.model import LogicalTable
    from streams.jobs.reconcile import Drift

MISSING, EXTRA, DIFFERENT = "missing", "extra", "different"


def expected_rows(live: DataFrame, view: ListenerView, tables: list[LogicalTable]) -> DataFrame:
    """``obj`` (the key text) and ``e``: the state the target should hold, of every live
    state the listener's view admits."""
    from pyspark.sql import functions as F

    states = in_view(live.select(*FIELDS, "after"), view, tables)
    return with_key_text(states).select(F.col("change_key").alias("obj"), F.col("after").alias("e"))


def target_rows(spark: SparkSession, adapter: TableAdapter, options: dict[str, str]) -> DataFrame:
    """``obj``, ``text`` (the state as JSON) and ``a`` (that state as a map; null when it
    is no object of strings and nulls) of every row of the target."""
    from pyspark.sql import functions as F

    read = read_in_ranges(spark, options, adapter.read_back_query(), adapter.blocks())
    parsed = F.when(F.col("plain"), F.from_json("state", "map<string, string>"))
    return read.select(F.col("change_key").alias("obj"), F.col("state").alias("text"), parsed.alias("a"))


def compared(expected: DataFrame, actual: DataFrame) -> DataFrame:
    """Per key of either side: ``wanted`` and ``held`` (whether each side has it), ``kind``
    (missing, extra, different, or null when equal) and, for drifted keys only, ``obj``,
    the expected state as JSON (``e``) and the target's (``text``)."""
    from pyspark.sql import functions as F

    both = expected.withColumn("wanted", F.lit(True)).join(actual.withColumn("held", F.lit(True)), "obj", "full_outer")
    same = F.coalesce(
        F.array_sort(F.map_entries("e")).eqNullSafe(F.array_sort(F.map_entries("a"))) & F.col("a").isNotNull(),
        F.lit(False),
    )
    kind = (
        F.when(F.col("held").isNull(), F.lit(MISSING))
        .when(F.col("wanted").isNull(), F.lit(EXTRA))
        .when(~same, F.lit(DIFFERENT))
    )
    drifted = F.col("kind").isNotNull()
    return both.select("wanted", "held", kind.alias("kind"), "obj", "e", "text").select(
        "wanted",
        "held",
        "kind",
        F.when(drifted, F.col("obj")).alias("obj"),
        F.when(drifted, F.to_json("e", {"ignoreNullFields": "false"})).alias("e"),
        F.when(drifted, F.col("text")).alias("text"),
    )


def collect_drift(rows: DataFrame, drift: Drift, settled: Callable[[str], bool]) -> None:
    """Counts and drifted keys of ``compared`` into ``drift`` (an extra key the target keeps
    as ``settled`` is not drift)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)  # counted, then the drifted few fetched
    try:
        counts = rows.agg(F.count("wanted").alias("wanted"), F.count("held").alias("held"), F.count("kind").alias("n"))
        total = counts.first()
        assert total is not None
        drift.expected, drift.actual = int(total["wanted"]), int(total["held"])
        if not total["n"]:
            return
        for row in rows.where(F.col("kind").isNotNull()).toLocalIterator(prefetchPartitions=True):
            obj, kind = row["obj"], row["kind"]
            wanted = _loads(row["e"])
            held = _loads(row["text"])
            if kind == MISSING:
                drift.missing[obj] = wanted
            elif kind == DIFFERENT:
                drift.different[obj] = (wanted, held)
            elif not settled(obj):
                drift.extra[obj] = held
    finally:
        rows.unpersist()


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
