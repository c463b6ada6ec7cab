"""What ``mcq refresh`` is asked to cover, checked before Spark starts: key files (CSV,
JSON Lines), tables, rules; every bad line is one error naming file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcq.change import ChangeKey
from mcq.registry import parse_registry
from mcq.registry.model import LogicalTable
from streams.exceptions import SelectionError
from streams.jobs.selection import selection

REGISTRY = """
sources:
  - {name: campus, schemas: [campus]}
tables:
  - tname: PERSON
    subtype: Telephone
    feeds:
      - source: campus
        table: campus.phones
        keys: {person_id: person_id, aux_string: kind}
        columns: [person_id, kind]
  - tname: PERSON
    subtype: Status
    feeds:
      - {source: campus, table: campus.status, keys: {person_id: person_id}, columns: [person_id, status]}
  - tname: LOGINS
    feeds:
      - {source: campus, table: campus.logins, keys: {pkey_string: login}, columns: [login]}
listeners:
  - {name: LDAP, owner: x@example, adapter: {type: file, settings: {path: /tmp/x}}}
interests:
  - {listener: LDAP, tname: PERSON}
  - {listener: LDAP, tname: LOGINS}
"""


@pytest.fixture
def tables() -> list[LogicalTable]:
    return list(parse_registry(REGISTRY, "r.yaml").tables)


def test_csv_keys_may_be_partial_and_take_the_table_from_tname(tables: list[LogicalTable], tmp_path: Path) -> None:
    f = tmp_path / "people.csv"
    f.write_text("person_id,aux_string\n\n42,\n43,home\n")
    chosen = selection(tables, "PERSON", None, None, f)
    assert chosen.keys == (ChangeKey("PERSON", None, 42), ChangeKey("PERSON", None, 43, None, None, "home"))
    assert not chosen.whole


def test_json_lines_keys_name_their_table(tables: list[LogicalTable], tmp_path: Path) -> None:
    f = tmp_path / "keys.jsonl"
    f.write_text(
        '{"tname": "LOGINS", "pkey_string": "ab12"}\n{"tname": "PERSON", "subtype": "Status", "person_id": "7"}\n'
    )
    assert selection(tables, keys_file=f).keys == (
        ChangeKey("LOGINS", None, None, "ab12"),
        ChangeKey("PERSON", "Status", 7),
    )


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("k.csv", "tname,person_id\nPERSON,1\nPERSON,x\n", "k.csv:3: person_id 'x' is not an integer"),
        ("k.csv", "person_id,colour\n1,red\n", "k.csv:1: unknown column 'colour'"),
        ("k.csv", "person_id,aux_string\n1\n", "k.csv:2: 1 cell(s), the header has 2"),
        ("k.csv", "person_id\n1\n", "k.csv:2: no tname"),
        ("k.jsonl", '{"tname": "PERSON", "person_id": 1}\n{"tname": "PERSON"\n', "k.jsonl:2: not JSON"),
        ("k.jsonl", "[1, 2]\n", "k.jsonl:1: a key is a JSON object, not list"),
        ("k.jsonl", '{"tname": "PERSON", "person_id": true}\n', "k.jsonl:1: person_id True is not an integer"),
        ("k.jsonl", '{"tname": "PERSON"}\n', "k.jsonl:1: names no key field"),
        ("k.jsonl", '{"tname": "ROOMS", "pkey_number": 1}\n', "k.jsonl:1: ROOMS is not among the listener's tables"),
        ("k.csv", "tname\n", "k.csv: no keys"),
    ],
)
def test_a_bad_key_file_line_is_one_error_naming_file_and_line(
    tables: list[LogicalTable], tmp_path: Path, name: str, text: str, message: str
) -> None:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(SelectionError) as caught:
        selection(tables, keys_file=f)
    assert message in str(caught.value)
    assert str(f.parent) in str(caught.value)


def test_a_key_outside_the_selected_table_is_refused(tables: list[LogicalTable], tmp_path: Path) -> None:
    f = tmp_path / "k.jsonl"
    f.write_text('{"tname": "LOGINS", "pkey_string": "ab12"}\n')
    with pytest.raises(SelectionError, match=r"k.jsonl:1: LOGINS is outside the selected PERSON"):
        selection(tables, "PERSON", keys_file=f)


def test_tables_and_rules_are_checked(tables: list[LogicalTable]) -> None:
    with pytest.raises(SelectionError, match="--subtype needs --tname"):
        selection(tables, None, "Status")
    with pytest.raises(SelectionError, match=r"PERSON/Email is not among the listener's tables \(LOGINS, PERSON/S"):
        selection(tables, "PERSON", "Email")
    with pytest.raises(SelectionError, match="--where: rule does not parse at column"):
        selection(tables, where="status = ")
    chosen = selection(tables, "PERSON", "Status", "status = 'Student'")
    assert chosen.where is not None and chosen.whole is False
    assert chosen.describe() == "PERSON/Status, where status = 'Student'"
    assert selection(tables).whole and selection(tables).describe() == "every table"


def test_no_subtype_selects_the_table_itself_and_none_of_its_subtypes(tmp_path: Path) -> None:
    text = REGISTRY.replace(
        "  - tname: LOGINS\n",
        "  - tname: PERSON\n    feeds:\n      - {source: campus, table: campus.people, keys: {person_id: id}, "
        "columns: [id]}\n  - tname: LOGINS\n",
    )
    tables = list(parse_registry(text, "r.yaml").tables)
    chosen = selection(tables, "PERSON", bare=True)
    assert [t.ref for t in tables if chosen.takes(t)] == ["PERSON"]
    assert [t.ref for t in tables if selection(tables, "PERSON").takes(t)] == [
        "PERSON/Telephone",
        "PERSON/Status",
        "PERSON",
    ]
    assert chosen.describe() == "PERSON (no subtype)"
    f = tmp_path / "k.jsonl"
    f.write_text('{"person_id": 7}\n{"subtype": "Status", "person_id": 8}\n')
    with pytest.raises(SelectionError, match=r"k.jsonl:2: PERSON/Status is not among the listener's tables \(PERSON\)"):
        selection(tables, "PERSON", keys_file=f, bare=True)
    f.write_text('{"person_id": 7}\n')
    assert selection(tables, "PERSON", keys_file=f, bare=True).keys == (ChangeKey("PERSON", None, 7),)
    with pytest.raises(SelectionError, match="--no-subtype needs --tname and no --subtype"):
        selection(tables, "PERSON", "Status", bare=True)
    with pytest.raises(SelectionError, match="--no-subtype needs --tname and no --subtype"):
        selection(tables, None, bare=True)
    only_subtypes = [t for t in tables if t.ref != "PERSON"]
    with pytest.raises(SelectionError, match=r"PERSON without a subtype is not among the listener's tables"):
        selection(only_subtypes, "PERSON", bare=True)
