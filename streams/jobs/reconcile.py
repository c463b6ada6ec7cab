"""``mcq reconcile``: compare a listener's target with the last state it should hold, and
with ``--repair`` send exactly the drifted objects' keys through its bulk lane.

1. Spark reads the last live state of every key of the tables the target's objects come
   from (streams/laststate.py: the listener's tables, or those an LDAP entry is
   assembled from), streamed to the driver; a ``table`` target is instead compared in
   Spark itself, read through JDBC (streams/jobs/reconcile_table.py);
2. the adapter says what the target should hold, through the listener's view (its rules
   and column allow-lists), and what it holds (:class:`consumers.adapter.ReadBack`);
3. per object: **missing** (should be there, is not), **extra** (is there, should not
   be), **different** (its managed content differs); counts and examples, and with
   ``--report`` every drifted object with both contents as JSON;
4. ``--repair`` refreshes the keys of exactly those objects into the listener's bulk lane
   (streams/jobs/refresh.py): the state where there is one, a DELETE where there is none.
   The listener applies them; a second reconcile then finds nothing.

``--from source`` reads step 1 from the source database instead (streams/source_state.py,
as ``mcq refresh --from source`` does), and ``--repair`` then refreshes the drifted keys
from the source: what finds and repairs a change the capture lost (a Debezium connector
killed amid a large transaction), which is in neither the topics nor the target, so a
reconcile against the topics says "in sync". :func:`capture_gaps` compares the logical
topics themselves with the source, to tell a loss upstream of every listener.

A change applied while the comparison runs can show as drift (the target is newer than
the state read, or older): it is repaired like any other, harmlessly (a refresh never
overwrites a newer state), and is gone from the next reconcile.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka.admin import AdminClient

from consumers.adapter import ReadBack, make_adapter
from consumers.runtime.view import ListenerView
from consumers.table.adapter import TableAdapter
from mcq.change import Change, ChangeKey
from mcq.config import Settings
from mcq.registry.model import LogicalTable, Registry
from streams.exceptions import SelectionError
from streams.jobs.progress import stage_progress
from streams.jobs.refresh import Refresh, RefreshSummary, listener_tables
from streams.jobs.selection import Selection
from streams.laststate import FIELDS, last_records, live_changes
from streams.source_state import SourceReader, source_feeds

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EXAMPLES = 5


@dataclass
class Drift:
    """What differs between a target and the last state its listener should hold."""

    listener: str
    expected: int = 0
    actual: int = 0
    missing: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    different: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return len(self.missing) + len(self.extra) + len(self.different)

    def objects(self) -> list[str]:
        return sorted([*self.missing, *self.extra, *self.different])

    def lines(self) -> list[str]:
        out = [
            f"{self.expected:,} object(s) expected, {self.actual:,} at the target: {len(self.missing):,} missing, "
            f"{len(self.extra):,} extra, {len(self.different):,} different ({self.seconds:.1f} s)"
        ]
        out += [f"missing: {obj}" for obj in sorted(self.missing)[:EXAMPLES]]
        out += [f"extra: {obj}" for obj in sorted(self.extra)[:EXAMPLES]]
        out += [f"different: {obj}: {_difference(*self.different[obj])}" for obj in sorted(self.different)[:EXAMPLES]]
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "listener": self.listener,
            "expected": self.expected,
            "actual": self.actual,
            "missing": [{"object": k, "expected": v} for k, v in sorted(self.missing.items())],
            "extra": [{"object": k, "actual": v} for k, v in sorted(self.extra.items())],
            "different": [{"object": k, "expected": e, "actual": a} for k, (e, a) in sorted(self.different.items())],
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_json(), indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")


def compare(
    listener: str, expected: dict[str, Any], actual: dict[str, Any], settled: Callable[[str], bool] = lambda _: False
) -> Drift:
    """Drift between what should be and what is; an object nothing should hold that the
    target keeps as ``settled`` (a soft delete) is not drift."""
    drift = Drift(listener, len(expected), len(actual))
    for obj, content in expected.items():
        if obj not in actual:
            drift.missing[obj] = content
        elif actual[obj] != content:
            drift.different[obj] = (content, actual[obj])
    drift.extra = {obj: content for obj, content in actual.items() if obj not in expected and not settled(obj)}
    return drift


def _difference(expected: Any, actual: Any) -> str:
    """The first fields that differ, as ``name: expected X, found Y``."""
    if not (isinstance(expected, dict) and isinstance(actual, dict)):
        return f"expected {expected!r}, found {actual!r}"
    names = sorted(n for n in set(expected) | set(actual) if expected.get(n) != actual.get(n))
    parts = [f"{n}: expected {expected.get(n)!r}, found {actual.get(n)!r}" for n in names[:3]]
    return "; ".join(parts) + (f"; and {len(names) - 3} more" if len(names) > 3 else "")


class Reconcile:
    def __init__(self, settings: Settings, registry: Registry, name: str, from_source: bool = False) -> None:
        own = listener_tables(registry, name)  # an unknown listener is a SelectionError
        listener = registry.listener(name)
        assert listener is not None
        adapter = make_adapter(listener, settings)
        if not isinstance(adapter, ReadBack):
            raise SelectionError(
                f"its {listener.adapter.type} target cannot be read back to compare "
                "(reconcile reads table, ldap, file and sql_import targets)"
            )
        why = adapter.unreadable()
        if why is not None:
            raise SelectionError(f"its {listener.adapter.type} target cannot be read back: {why}")
        adapter.bind(registry)
        self.settings, self.registry, self.name = settings, registry, name
        self.adapter = adapter
        refs = adapter.state_refs()
        self.tables = own if refs is None else [t for t in registry.tables if t.ref in refs]
        self.view = ListenerView(registry, name)
        # a table target whose database JDBC reaches: compared in Spark
        self.jdbc = adapter.jdbc_options() if isinstance(adapter, TableAdapter) else None
        self.source: SourceReader | None = None
        if from_source:
            unfed = [t.ref for t in self.tables if not t.feeds]
            if unfed:
                raise SelectionError(
                    f"{', '.join(unfed)}: no source table feeds it (an entity, or logged explicitly): it cannot be "
                    "compared with the source; compare the tables it is made of with `mcq reconcile --capture`, "
                    "then this listener with its topics"
                )
            self.source = SourceReader(settings, registry, source_feeds(registry, self.tables, settings.topic_prefix))

    def run(self, spark: SparkSession) -> Drift:
        started = time.monotonic()
        label = f"reconcile {self.name}"
        wanted = sorted({t.topic(self.settings.topic_prefix) for t in self.tables})
        existing = set(AdminClient(self.settings.kafka.client_config()).list_topics(timeout=30).topics)
        topics = [t for t in wanted if t in existing]
        if self.jdbc is not None:
            drift = self._compare_in_spark(spark, topics)
        else:
            what = (
                "the source tables" if self.source is not None else f"the last state of {len(topics)} logical topic(s)"
            )
            log.info(f"{label}: reading {what}")
            try:
                with stage_progress(spark, label):
                    expected = self.adapter.expected(self.view, self._states(spark, topics))
                log.info(f"{label}: {len(expected):,} object(s) expected; reading the target back")
                actual = self.adapter.read_back()
            finally:
                self.adapter.close()
            drift = compare(self.name, expected, actual, self.adapter.settled)
        drift.seconds = time.monotonic() - started
        return drift

    def _compare_in_spark(self, spark: SparkSession, topics: list[str]) -> Drift:

        from streams.jobs import reconcile_table as rt

        assert isinstance(self.adapter, TableAdapter) and self.jdbc is not None
        label = f"reconcile {self.name}"
        log.info(f"{label}: comparing {self._what(topics)} with {self.adapter.settings.table} in Spark")
        drift = Drift(self.name)
        try:
            live = self._live(spark, topics)
            expected = rt.expected_rows(live, self.view, self.tables)
            actual = rt.target_rows(spark, self.adapter, self.jdbc)
            with stage_progress(spark, label):
                rt.collect_drift(rt.compared(expected, actual), drift, self.adapter.settled)
        finally:
            self.adapter.close()
        return drift

    def _what(self, topics: list[str]) -> str:
        return "the source tables" if self.source is not None else f"the last state of {len(topics)} logical topic(s)"

    def _live(self, spark: SparkSession, topics: list[str]) -> DataFrame:
        """Every live state to compare with: the source's rows (``--from source``), else the
        topics' last states."""
        from pyspark.sql import functions as F

        if self.source is not None:
            position, tables = self.source.inspect()
            return self.source.states(spark, position, tables).where(F.col("problem").isNull()).drop("problem")
        return last_records(spark, self.settings, topics, self.tables).where(F.col("live"))

    def _states(self, spark: SparkSession, topics: list[str]) -> Iterator[Change]:
        return live_changes(self._live(spark, topics))

    def repair(self, spark: SparkSession, drift: Drift) -> tuple[RefreshSummary | None, list[str]]:
        """Refresh the keys of exactly the drifted objects into the listener's bulk lane.
        Also returns the objects no key can be read from (a row or entry someone else put
        at the target, under a name mcq never writes): no refresh reaches them, so they
        are named for removal by hand, never guessed at."""
        keys: set[ChangeKey] = set()
        unkeyed: list[str] = []
        for obj in drift.objects():
            try:
                keys.update(self.adapter.keys_of(obj))
            except (ValueError, KeyError, TypeError, AttributeError):
                unkeyed.append(obj)
        if not keys:  # (an empty key list would select every key)
            return None, unkeyed
        chosen = Selection(keys=tuple(sorted(keys, key=ChangeKey.text)))
        refresh = Refresh(self.settings, self.registry, self.name, chosen, self.source is not None)
        return refresh.run(spark), unkeyed


def capture_gaps(spark: SparkSession, settings: Settings, registry: Registry, tables: list[LogicalTable]) -> Drift:
    """The logical topics of ``tables`` (each fed by source tables) against the source now:
    a key the source has and the topics lack or hold differently (**missing**,
    **different**), or one the topics hold live that the source no longer has (**extra**:
    a delete the capture lost). Found in the topics, a loss is upstream of every listener."""
    from pyspark.sql import functions as F

    from streams.jobs import reconcile_table as rt
    from streams.jobs.tableview import with_key_text

    started = time.monotonic()
    unfed = [t.ref for t in tables if not t.feeds]
    if unfed:
        raise SelectionError(f"{', '.join(unfed)}: no source table feeds it: nothing to compare its topic with")
    source = SourceReader(settings, registry, source_feeds(registry, tables, settings.topic_prefix))
    topics = sorted({t.topic(settings.topic_prefix) for t in tables})
    existing = set(AdminClient(settings.kafka.client_config()).list_topics(timeout=30).topics)
    log.info(f"capture: comparing {len(topics)} logical topic(s) with their source tables in {settings.source}")
    position, read = source.inspect()
    drift = Drift("capture")
    with stage_progress(spark, "capture"):
        rows = source.states(spark, position, read).where(F.col("problem").isNull())
        expected = with_key_text(rows.select(*FIELDS, "after")).select(
            F.col("change_key").alias("obj"), F.col("after").alias("e")
        )
        live = last_records(spark, settings, [t for t in topics if t in existing], tables).where(F.col("live"))
        actual = with_key_text(live.select(*FIELDS, "after")).select(
            F.col("change_key").alias("obj"), F.to_json("after").alias("text"), F.col("after").alias("a")
        )
        rt.collect_drift(rt.compared(expected, actual), drift, lambda _: False)
    drift.seconds = time.monotonic() - started
    return drift
