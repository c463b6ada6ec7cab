"""The normaliser's SQL-text expressions (streams/sqltext.py): names and literals from a
registry are quoted so that they can only ever be a name or a value."""

from __future__ import annotations

import pytest

from streams import sqltext as S


def test_a_string_literal_escapes_its_quotes_and_backslashes() -> None:
    assert S.lit("it's a \\ path").text == "'it\\'s a \\\\ path'"


def test_literals_of_each_kind_read_as_spark_reads_them() -> None:
    assert [S.lit(v).text for v in (None, True, False, 7, 2**40)] == ["NULL", "true", "false", "7", "1099511627776L"]


def test_a_column_path_is_back_quoted_part_by_part() -> None:
    assert S.col("e.after").text == "`e`.`after`"
    assert S.col("odd`name").text == "`odd``name`"


def test_a_struct_names_every_field_and_refuses_an_unnamed_one() -> None:
    assert S.struct(S.lit(1).alias("a'b")).text == "named_struct('a\\'b', 1)"
    with pytest.raises(ValueError, match="needs a name"):
        S.struct(S.lit(1))


def test_when_chains_into_one_case_and_otherwise_closes_it() -> None:
    op = S.col("op")
    case = S.when(op == "d", "gone").when(op.isin("c", "r"), S.lit("new")).otherwise(None)
    assert case.text == "CASE WHEN (`op` = 'd') THEN 'gone' WHEN (`op` IN ('c', 'r')) THEN 'new' ELSE NULL END"
    assert S.when(op.isNull(), 1).text == "CASE WHEN (`op` IS NULL) THEN 1 END"


def test_an_expression_is_never_a_dict_key() -> None:
    with pytest.raises(TypeError):
        {S.lit(1): 1}  # == builds an expression, so hashing would lie


def test_comparisons_take_a_plain_value_as_a_literal() -> None:
    assert (S.col("e.source.ts_ms") >= 5).text == "(`e`.`source`.`ts_ms` >= 5)"
    assert (S.col("a") != "x").text == "(`a` != 'x')"
