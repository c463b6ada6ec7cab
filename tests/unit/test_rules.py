"""Content rules: AQ's rule-based subscriber language, evaluated without eval."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcq.registry.exceptions import RuleSyntaxError
from mcq.registry.expressions import parse_expression
from mcq.registry.rules import change_values, parse_rule

AQ_RULE = "orderregion = 'EASTERN' OR (ordertype = 'RUSH' AND country = 'USA')"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"orderregion": "EASTERN", "ordertype": "NORMAL", "country": "UK"}, True),
        ({"orderregion": "WESTERN", "ordertype": "RUSH", "country": "USA"}, True),
        ({"orderregion": "WESTERN", "ordertype": "RUSH", "country": "UK"}, False),
        ({}, False),
    ],
)
def test_the_aq_booksonline_rule_selects_as_in_oracle(values: dict[str, str], expected: bool) -> None:
    assert parse_rule(AQ_RULE).matches(values) is expected


def test_keywords_are_case_insensitive_and_and_binds_tighter_than_or() -> None:
    rule = parse_rule("a = 1 or b = 2 AND c = 3")
    assert rule.matches({"a": 1})
    assert not rule.matches({"b": 2})
    assert rule.matches({"b": 2, "c": 3})


def test_in_like_not_and_null_tests() -> None:
    rule = parse_rule(
        "status IN ('Student', 'Employee') AND email LIKE '%@campus.example' AND NOT tele_type = 'fax' "
        "AND before.status IS NOT NULL"
    )
    values = change_values(
        {"change_type": "update"},
        {"status": "Student", "email": "ada@campus.example", "tele_type": "campus"},
        {"status": "Applicant"},
    )
    assert rule.matches(values)
    assert not rule.matches({**values, "tele_type": "fax"})
    assert not rule.matches({**values, "before.status": None})
    assert not rule.matches({**values, "email": "ada@elsewhere.org"})


def test_comparisons_with_null_are_false_as_in_sql() -> None:
    assert not parse_rule("status = 'x'").matches({"status": None})
    assert not parse_rule("status != 'x'").matches({})
    assert parse_rule("status IS NULL").matches({})


def test_numbers_compare_as_numbers_even_from_strings() -> None:
    assert parse_rule("class_year >= 2005").matches({"class_year": "2006"})
    assert parse_rule("pkey_number = 42").matches({"pkey_number": 42})


def test_quotes_inside_strings_are_doubled() -> None:
    assert parse_rule("last_name = 'O''Brien'").matches({"last_name": "O'Brien"})


def test_change_fields_win_over_a_column_of_the_same_name() -> None:
    values = change_values({"person_id": 7}, {"person_id": 8}, None)
    assert parse_rule("person_id = 7").matches(values)
    assert parse_rule("after.person_id = 8").matches(values)


def test_fields_lists_every_name_read() -> None:
    assert parse_rule(AQ_RULE).fields() == {"orderregion", "ordertype", "country"}


@pytest.mark.parametrize(
    "text",
    [
        "status = = 'x'",
        "status = 'x' AND",
        "__import__('os').system('true')",
        "status = 'unterminated",
        "(a = 1",
    ],
)
def test_what_does_not_parse_is_refused_with_its_column(text: str) -> None:
    with pytest.raises(RuleSyntaxError) as err:
        parse_rule(text)
    assert "column" in str(err.value)


def _like_by_regex(value: str, pattern: str) -> bool:
    """The reference: SQL LIKE as a regex (backtracking, so only for short values)."""
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


@settings(max_examples=2000, deadline=None)
@given(value=st.text(alphabet="ab%_\n", max_size=12), pattern=st.text(alphabet="ab%_", max_size=8))
def test_like_matches_exactly_what_sql_like_matches(value: str, pattern: str) -> None:
    rule = parse_rule("x LIKE " + "'" + pattern.replace("'", "''") + "'")
    assert rule.matches({"x": value}) is _like_by_regex(value, pattern)


def test_like_does_not_backtrack_on_a_value_made_to_defeat_a_regex() -> None:
    # A regex of this pattern needs about len(value)**10 steps on this value (minutes at
    # 2 KB); the linear matcher answers at once. No timing is asserted: an exponential
    # matcher shows as this test's timeout.
    rule = parse_rule("x LIKE '%a%a%a%a%a%a%a%a%a%a%b'")
    assert not rule.matches({"x": "a" * 20_000})
    assert rule.matches({"x": "a" * 20_000 + "b"})


@pytest.mark.parametrize(
    "text",
    [
        "NOT " * 200 + "x = 1",
        "(" * 500 + "x = 1" + ")" * 500,
        " AND ".join(f"({'(' * 60}a = {i}{')' * 60})" for i in range(2)),
    ],
)
def test_a_rule_nested_too_deep_is_refused_not_a_recursion_error(text: str) -> None:
    with pytest.raises(RuleSyntaxError, match="nested too deep"):
        parse_rule(text)


def test_a_rule_longer_than_the_limit_is_refused() -> None:
    with pytest.raises(RuleSyntaxError, match="longer than"):
        parse_rule(" OR ".join(f"a = {i}" for i in range(2000)))


def test_a_deeply_nested_expression_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(RuleSyntaxError, match="nested too deep"):
        parse_expression("lower(" * 300 + "x" + ")" * 300)


def test_real_rules_nest_well_within_the_limit() -> None:
    parse_expression("CASE WHEN status = 'R' THEN 'retired' END")  # an optional part left out
    parse_expression("CASE WHEN a = 1 THEN lower(x) ELSE default(y, 'z') END")
    parse_rule("NOT " * 20 + "x = 1")
    parse_rule("(" * 20 + "x = 1" + ")" * 20)
    parse_expression("lower(" * 15 + "x" + ")" * 15)


_NAMES = st.sampled_from(["a", "b", "status", "before.status", "after.x", "tname", "person_id"])
_LITERALS = st.one_of(
    st.integers(-5, 5).map(str),
    st.sampled_from(["'x'", "'it''s'", "NULL", "TRUE", "FALSE", "'%a_'", "1.5"]),
)
_OPERANDS = st.one_of(_NAMES, _LITERALS)
_PREDICATES = st.one_of(
    st.builds(lambda a, op, b: f"{a} {op} {b}", _OPERANDS, st.sampled_from(["=", "<>", "<", ">="]), _OPERANDS),
    st.builds(lambda a, n: f"{a} IS {n}NULL", _OPERANDS, st.sampled_from(["", "NOT "])),
    st.builds(lambda a, opts: f"{a} IN ({', '.join(opts)})", _OPERANDS, st.lists(_OPERANDS, min_size=1, max_size=3)),
    st.builds(lambda a, p: f"{a} LIKE {p}", _OPERANDS, _OPERANDS),
)
_RULES = st.recursive(
    _PREDICATES,
    lambda inner: st.one_of(
        st.builds(lambda a, b: f"{a} AND {b}", inner, inner),
        st.builds(lambda a, b: f"{a} OR {b}", inner, inner),
        st.builds(lambda a: f"NOT {a}", inner),
        st.builds(lambda a: f"({a})", inner),
    ),
    max_leaves=12,
)
_VALUES = st.dictionaries(
    st.sampled_from(["a", "b", "status", "before.status", "after.x", "tname", "person_id"]),
    st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20), st.booleans()),
)


@settings(max_examples=500, deadline=None)
@given(text=_RULES, values=_VALUES)
def test_any_well_formed_rule_evaluates_to_a_boolean_over_any_values(text: str, values: dict[str, object]) -> None:
    assert parse_rule(text).matches(values) in (True, False)


@settings(max_examples=1000, deadline=None)
@given(text=st.text(max_size=200))
def test_any_text_either_parses_or_is_refused_with_a_rule_syntax_error(text: str) -> None:
    try:
        rule = parse_rule(text)
    except RuleSyntaxError as exc:
        assert "column" in str(exc)
    else:
        assert rule.matches({}) in (True, False)
