"""``mcq reconcile``: compare a listener's target with the last state it should hold, and
with ``--repair`` send exactly the drifted objects' keys through its bulk lane.

1. Spark reads the last live state of every key of the tables the target's objects come
   from (streams/laststate.py: the listener's tables, or those an LDAP entry is
   assembled from), streamed to the driver; a ``table`` target is instead compared in
   Spark itself, read through JDBC (streams/reconcile_table.py);
2. the adapter says what the target should hold, through the listener's view (its rules
   and column allow-lists), and what it holds (:class:`consumers.adapter.ReadBack`);
3. per object: **missing** (should be there, is not), **extra** (is there, should not
   be), **different** (its managed content differs); counts and examples, and with
   ``--report`` every drifted object with both contents as JSON;
4. ``--repair`` refreshes the keys of exactly those objects into the listener's bulk lane
   (streams/refresh.py): the state where there is one, a DELETE where there is none.
   The listener applies them; a second reconcile then finds nothing.

A change applied while the comparison runs can show as drift (the target is newer than
the state read, or older): it is repaired like any other, harmlessly (a refresh never
overwrites a newer state), and is gone from the next reconcile.
"""

from __future__ import annotations

import json
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
from mcq.registry.model import Registry
from streams.exceptions import SelectionError
from streams.laststate import last_records, live_changes
from streams.progress import stage_progress
from streams.refresh import Refresh, RefreshSummary, listener_tables
from streams.selection import Selection

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Report = Callable[[str], None]
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
    def __init__(self, settings: Settings, registry: Registry, name: str, report: Report) -> None:
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
        self.settings, self.registry, self.name, self.report = settings, registry, name, report
        self.adapter = adapter
        refs = adapter.state_refs()
        self.tables = own if refs is None else [t for t in registry.tables if t.ref in refs]
        self.view = ListenerView(registry, name)
        # a table target whose database JDBC reaches: compared in Spark
        self.jdbc = adapter.jdbc_options() if isinstance(adapter, TableAdapter) else None

    def run(self, spark: SparkSession) -> Drift:
        started = time.monotonic()
        label = f"reconcile {self.name}"
        wanted = sorted({t.topic(self.settings.topic_prefix) for t in self.tables})
        existing = set(AdminClient(self.settings.kafka.client_config()).list_topics(timeout=30).topics)
        topics = [t for t in wanted if t in existing]
        if self.jdbc is not None:
            drift = self._compare_in_spark(spark, topics)
        else:
            self.report(f"{label}: reading the last state of {len(topics)} logical topic(s)")
            try:
                with stage_progress(spark, label, self.report):
                    expected = self.adapter.expected(self.view, self._states(spark, topics))
                self.report(f"{label}: {len(expected):,} object(s) expected; reading the target back")
                actual = self.adapter.read_back()
            finally:
                self.adapter.close()
            drift = compare(self.name, expected, actual, self.adapter.settled)
        drift.seconds = time.monotonic() - started
        return drift

    def _compare_in_spark(self, spark: SparkSession, topics: list[str]) -> Drift:
        from pyspark.sql import functions as F

        from streams import reconcile_table as rt

        assert isinstance(self.adapter, TableAdapter) and self.jdbc is not None
        label = f"reconcile {self.name}"
        self.report(
            f"{label}: comparing the last state of {len(topics)} logical topic(s) with "
            f"{self.adapter.settings.table} in Spark"
        )
        drift = Drift(self.name)
        try:
            live = last_records(spark, self.settings, topics, self.tables).where(F.col("live"))
            expected = rt.expected_rows(live, self.view, self.tables)
            actual = rt.target_rows(spark, self.adapter, self.jdbc)
            with stage_progress(spark, label, self.report):
                rt.collect_drift(rt.compared(expected, actual), drift, self.adapter.settled)
        finally:
            self.adapter.close()
        return drift

    def _states(self, spark: SparkSession, topics: list[str]) -> Iterator[Change]:
        from pyspark.sql import functions as F

        return live_changes(last_records(spark, self.settings, topics, self.tables).where(F.col("live")))

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
        return Refresh(self.settings, self.registry, self.name, chosen, self.report).run(spark), unkeyed
