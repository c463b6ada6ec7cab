"""A listener's view of its tables, in Spark: what the batch jobs that write or compare a
``table`` target (``mcq rebuild``, ``mcq reconcile``) compute without a state crossing to
the driver.

The view is the listener's interests (consumers/runtime/view.py). Where no interest of a
table has a content rule, the view only restricts the columns: a ``map_filter`` of the
after-state, in the JVM. A table some interest of which has a rule goes through the
listener's view itself, in a Python function Spark runs in its workers (in parallel, off
the driver): exactly what the listener decides, rule language included.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from consumers.runtime.view import ListenerView
from mcq.change import Change, ChangeKey, Position
from mcq.registry.model import LogicalTable
from streams.laststate import FIELDS, in_tables

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def view_columns(view: ListenerView, tables: list[LogicalTable]) -> dict[str, frozenset[str] | None]:
    """The columns the listener sees of each of ``tables`` no content rule of it chooses
    rows of (by ref; None: every column)."""
    out: dict[str, frozenset[str] | None] = {}
    for t in tables:
        unruled = view.unruled(t.tname, t.subtype)
        if unruled is not None:
            out[t.ref] = unruled.columns
    return out


def in_view(states: DataFrame, view: ListenerView, tables: list[LogicalTable]) -> DataFrame:
    """The live ``states`` (key fields, ``after``, other columns kept) the listener's view
    admits, ``after`` restricted to the columns it sees."""
    from pyspark.sql import functions as F

    columns = view_columns(view, tables)
    plain = [t for t in tables if t.ref in columns]
    ruled = [t for t in tables if t.ref not in columns]
    out = states.where(in_tables(plain, None)).withColumn("after", projected(plain, columns))
    if ruled:  # a Python function runs only on these rows (inside a CASE it would run on all)
        seen = _seen(view)(*(F.col(f) for f in FIELDS), F.col("after"))
        judged = states.where(in_tables(ruled, None)).withColumn("after", seen)
        out = out.unionByName(judged.where(F.col("after").isNotNull()))
    return out


def _seen(view: ListenerView) -> Callable[..., Column]:
    """A Spark function of the key fields and the after-state: that state as the listener
    sees it (its columns), or null when no interest of it admits the row."""
    from pyspark.sql.functions import udf
    from pyspark.sql.types import MapType, StringType

    registry, listener = view.registry, view.listener
    views: list[ListenerView] = []  # one per worker process, made on its first row

    def seen(tname, subtype, person_id, pkey_string, pkey_number, aux_string, after):  # type: ignore[no-untyped-def]
        if not views:
            views.append(ListenerView(registry, listener))
        key = ChangeKey(tname, subtype, person_id, pkey_string, pkey_number, aux_string)
        change = Change(key, "UPDATE", Position(0, 0), datetime.now(UTC), key.ref, after=dict(after or {}))
        state, _ = views[0].see(change, False)
        return None if state is None else state.after

    return udf(seen, MapType(StringType(), StringType()))


def projected(tables: list[LogicalTable], columns: dict[str, frozenset[str] | None]) -> Column:
    """The after-state (column ``after``) restricted to the columns the listener sees of its table."""
    from pyspark.sql import functions as F

    out = F.col("after")
    for t in tables:
        allowed = columns.get(t.ref)
        if allowed is None:
            continue
        subtype = F.col("subtype").isNull() if t.subtype is None else F.col("subtype") == t.subtype
        shown = F.map_filter("after", _among(sorted(allowed)))
        out = F.when((F.col("tname") == t.tname) & subtype, shown).otherwise(out)
    return out


def _among(names: list[str]) -> Callable[[Column, Column], Column]:
    return lambda k, _: k.isin(names)


def with_key_text(states: DataFrame) -> DataFrame:
    """The rows with ``change_key``: ``ChangeKey.text()``, sorted JSON with ASCII escapes.
    Spark's JSON writer escapes printable ASCII as Python does, so those keys are written
    by Spark; the rare key with any other character goes through ``ChangeKey.text`` (a
    Python function: only those rows are sent to it)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    def text(tname, subtype, person_id, pkey_string, pkey_number, aux_string):  # type: ignore[no-untyped-def]
        return ChangeKey(tname, subtype, person_id, pkey_string, pkey_number, aux_string).text()

    printable = F.concat_ws("", "tname", "subtype", "pkey_string", "aux_string").rlike("^[\\x20-\\x7E]*$")
    plain = F.to_json(F.struct(*(F.col(f) for f in sorted(FIELDS))), {"ignoreNullFields": "false"})
    odd = F.udf(text, StringType())(*(F.col(f) for f in FIELDS))
    return (
        states.where(printable)
        .withColumn("change_key", plain)
        .unionByName(states.where(~printable).withColumn("change_key", odd))
    )
