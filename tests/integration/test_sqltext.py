"""SQL-text expressions (streams/sqltext.py) evaluated by Spark: odd names and values from a
registry come out exactly as written, as pyspark's own column calls give them."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

import pytest

from mcq.config import Settings
from streams import sqltext as S
from streams.keys import key_number, not_whole
from streams.session import spark_session

ODD = ["it's", "back\\slash", "x`y", "höme", "a.b", "semi;colon -- not a comment"]


@pytest.fixture(scope="module")
def spark(settings: Settings) -> Iterator[Any]:
    yield spark_session(settings, "test-sqltext")


def test_odd_map_keys_and_literals_evaluate_to_what_was_written(spark: Any) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame([({k: f"v {k}" for k in ODD},)], "m map<string,string>")
    m = S.col("m")
    got = df.select(
        *(S.to_column(m.getItem(k)).alias(f"get{i}") for i, k in enumerate(ODD)),
        *(S.to_column(S.lit(k)).alias(f"lit{i}") for i, k in enumerate(ODD)),
    ).first()
    want = df.select(
        *(F.col("m").getItem(k).alias(f"get{i}") for i, k in enumerate(ODD)),
        *(F.lit(k).alias(f"lit{i}") for i, k in enumerate(ODD)),
    ).first()
    assert got == want
    assert [got[f"lit{i}"] for i in range(len(ODD))] == ODD


def test_a_struct_a_case_and_null_safe_equality_match_pysparks_own(spark: Any) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(
        [("u", {"k": "1"}, {"k": "1"}), ("u", {"k": "1"}, {"k": "2"}), ("d", None, {"k": "3"})],
        "op string, b map<string,string>, a map<string,string>",
    )
    b, a, op = S.col("b"), S.col("a"), S.col("op")
    mine = S.struct(
        S.lit("T").alias("tname"),
        a.getItem("k").cast("decimal(38,0)").cast("long").alias("n"),
        S.lit(None).cast("string").alias("none"),
    )
    case = S.when(op == "d", S.array()).when(~b.getItem("k").eqNullSafe(a.getItem("k")), S.array(mine))
    theirs = F.struct(
        F.lit("T").alias("tname"),
        F.col("a").getItem("k").cast("decimal(38,0)").cast("long").alias("n"),
        F.lit(None).cast("string").alias("none"),
    )
    their_case = F.when(F.col("op") == "d", F.array()).when(
        ~F.col("b").getItem("k").eqNullSafe(F.col("a").getItem("k")), F.array(theirs)
    )
    assert df.select(S.to_column(case).alias("r")).collect() == df.select(their_case.alias("r")).collect()


KEY_TEXTS = ["42", "42.0", " 7 ", "-0", "1e3", "E12", "42.5", "", "NaN", "99999999999999999999",
             "9223372036854775807", "-9223372036854775808", "9223372036854775808", None]  # fmt: skip


def _whole(text: str) -> int | None:
    """The oracle: the text's whole number within 64 bits, read by Python's Decimal."""
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        return None
    if not number.is_finite() or number != number.to_integral_value():
        return None
    return int(number) if -(2**63) <= int(number) < 2**63 else None


def test_a_numeric_key_is_its_whole_number_and_anything_else_is_named_not_guessed(spark: Any) -> None:
    """``person_id``/``pkey_number`` from a column's text: a whole number within 64 bits is
    the key (``42.0`` as Debezium writes a numeric is 42); anything else is a NULL key field
    and a reason naming the value, never a rounded or failed cast."""
    df = spark.createDataFrame([({"k": text},) for text in KEY_TEXTS], "m map<string,string>")
    value = S.col("m").getItem("k")
    rows = df.select(
        S.to_column(value).alias("text"),
        S.to_column(key_number(value)).alias("number"),
        S.to_column(not_whole("column k", value, "the after-image")).alias("problem"),
    ).collect()
    assert [r["text"] for r in rows] == KEY_TEXTS
    for r in rows:
        expected = None if r["text"] is None else _whole(r["text"])
        assert r["number"] == expected, r
        if r["text"] is None or expected is not None:
            assert r["problem"] is None, r
        else:
            assert r["problem"] == f"column k holds '{r['text']}' in the after-image", r
