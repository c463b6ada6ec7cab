"""Content rules: AQ's rule-based subscriber language, evaluated without eval."""

from __future__ import annotations

import pytest

from mcq.registry.exceptions import RuleSyntaxError
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
