"""A listener's view of its tables, in Spark: what the batch jobs that write or compare a
``table`` target (``mcq rebuild``, ``mcq reconcile``) compute without a row crossing to
Python.

The view is the listener's interests (consumers/runtime/view.py). Where no interest of a
table has a content rule, it only restricts the columns: that is a ``map_filter`` of the
after-state, here. A content rule chooses rows; those jobs then judge every state through
the view in Python instead (``view_columns`` says None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from consumers.runtime.view import ListenerView, Verdict
from mcq.change import ChangeKey
from mcq.registry.model import LogicalTable
from streams.laststate import FIELDS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def view_columns(view: ListenerView, tables: list[LogicalTable]) -> dict[str, frozenset[str] | None] | None:
    """The columns the listener sees of each of ``tables`` (by ref; None: every column);
    None when a content rule chooses rows of one of them."""
    out: dict[str, frozenset[str] | None] = {}
    for t in tables:
        interests = view.interests_for(t.tname, t.subtype)
        if any(i.parsed_rule() is not None for i in interests):
            return None
        out[t.ref] = Verdict(tuple(interests)).columns
    return out


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
