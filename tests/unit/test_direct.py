"""The batch jobs' direct engine (streams/jobs/direct.py): which engine a size gets, the COPY rows
it writes, the applied positions it leaves."""

from __future__ import annotations

import csv
import io
import json
import random
from typing import Any

import pytest

from consumers.runtime.view import ListenerView
from mcq.change import Change, ChangeKey, Position
from mcq.registry import parse_registry
from mcq.registry.model import LogicalTable
from streams.jobs.direct import DIRECT_MAX_RECORDS, LiveStates, applied_diff, choose, table_rows


def test_auto_reads_small_topics_directly_and_big_ones_in_spark() -> None:
    assert choose("auto", 20_000) == "direct"
    assert choose("auto", DIRECT_MAX_RECORDS + 1) == "spark"
    assert choose("spark", 10) == "spark" and choose("direct", 10**7) == "direct"
    with pytest.raises(ValueError, match="one of auto, spark, direct"):
        choose("fast", 1)


VIEW = """
sources:
  - {name: campus, schemas: [w]}
tables:
  - tname: PERSON
    subtype: PEOPLE
    feeds: [{source: campus, table: w.people, keys: {person_id: id}, columns: [id, first_name, last_name]}]
  - tname: PERSON
    subtype: Telephone
    feeds: [{source: campus, table: w.phones, keys: {person_id: id, aux_string: kind}, columns: [id, kind, phone]}]
  - tname: ROOM
    feeds: [{source: campus, table: w.rooms, keys: {pkey_string: code, pkey_number: floor}, columns: [code, floor]}]
  - tname: BADGE
    feeds: [{source: campus, table: w.badges, keys: {pkey_number: id}, columns: [id]}]
listeners:
  - {name: T, owner: a@b, adapter: {type: file, settings: {directory: out}}}
interests:
  - {listener: T, tname: PERSON, subtype: PEOPLE, columns: [id, last_name]}
  - {listener: T, tname: PERSON, subtype: Telephone, rule: "aux_string IN ('campus', '')"}
  - {listener: T, tname: ROOM}
"""

ODD = ['q"uote,comma\nnewline', "höme", "", "plain", "\\back", None]


def _random_state(rng: random.Random, i: int) -> dict[str, Any]:
    """A live state's value record of one of VIEW's tables, key fields as that table keys."""
    table = rng.choice(["PEOPLE", "Telephone", "ROOM", "BADGE"])
    record: dict[str, Any] = dict.fromkeys(["subtype", "person_id", "pkey_string", "pkey_number", "aux_string"])
    if table == "PEOPLE":
        after = {"id": str(i), "first_name": rng.choice(ODD), "last_name": rng.choice(ODD)}
        record.update(tname="PERSON", subtype="PEOPLE", person_id=i)
    elif table == "Telephone":
        kind = rng.choice(["campus", "home", "", 'sh"ared'])
        after = {"id": str(i), "kind": kind, "phone": rng.choice(ODD)}
        record.update(tname="PERSON", subtype="Telephone", person_id=i, aux_string=kind)
    elif table == "ROOM":
        after = {"code": f"R{i},{rng.choice(ODD)}", "floor": str(i % 7)}
        record.update(tname="ROOM", pkey_string=after["code"], pkey_number=i % 7)
    else:
        after, record["tname"], record["pkey_number"] = {"id": str(i)}, "BADGE", i
    lsn = rng.randrange(1, 10**12)
    return {**record, "change_type": rng.choice(["INSERT", "UPDATE"]), "after": after,
            "source": {"last_commit_lsn": lsn, "lsn": lsn + rng.randrange(0, 99)}}  # fmt: skip


def _expected_row(state: dict[str, Any]) -> dict[str, Any] | None:
    """What the target holds for ``state`` by VIEW's interests, spelled out here."""
    sub, after = state["subtype"], state["after"]
    if state["tname"] == "BADGE" or (sub == "Telephone" and state["aux_string"] not in ("campus", "")):
        return None
    if sub == "PEOPLE":
        after = {c: after[c] for c in ("id", "last_name")}
    key = {f: state[f] for f in ("tname", "subtype", "person_id", "pkey_string", "pkey_number", "aux_string")}
    return {"key": json.dumps(key, separators=(",", ":"), sort_keys=True), **key, "after": after,
            "position": f"{state['source']['last_commit_lsn']}/{state['source']['lsn']}"}  # fmt: skip


def test_copy_rows_are_the_states_the_view_admits_with_the_columns_it_sees() -> None:
    rng = random.Random(58)
    states = [_random_state(rng, i) for i in range(600)]
    loaded: dict[str, str] = {}
    view = ListenerView(parse_registry(VIEW, "view.yaml"), "T")
    text = b"".join(table_rows(states, view, loaded)).decode()

    expected = [row for s in states if (row := _expected_row(s)) is not None]
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) == len(expected) and 0 < len(expected) < len(states)
    for row, want in zip(rows, expected, strict=True):
        numbers = ["" if want[f] is None else str(want[f]) for f in ("person_id", "pkey_number")]
        texts = [want[f] or "" for f in ("key", "tname", "subtype", "pkey_string", "aux_string")]
        assert row[:7] == [*texts[:3], numbers[0], texts[3], numbers[1], texts[4]]
        assert json.loads(row[7]) == want["after"] and "/".join(row[8:]) == want["position"]
    assert loaded == {want["key"]: want["position"] for want in expected}
    # a NULL is an empty field, an empty text is quoted: COPY reads "" as '', an empty field as NULL
    rooms, empty_kinds = (sum(1 for w in expected if w["tname"] == t and w["aux_string"] == a) for t, a in
                          (("ROOM", None), ("PERSON", "")))  # fmt: skip
    assert text.count(',"ROOM",,') == rooms and text.count(',"Telephone",') > text.count(',,"",') == empty_kinds > 0


def test_applied_positions_are_written_only_where_they_say_otherwise() -> None:
    loaded = {"a": "1/2", "b": "3/4", "c": "5/6"}
    held = {"a": "1/2", "b": "3/3/+99", "d": "7/8/+1", "e": "9/9/-"}
    assert applied_diff(loaded, held) == {"b": "3/4", "c": "5/6", "d": "7/8/+1/-"}


class _Msg:
    """A record as confluent-kafka hands it over (what LiveStates reads of one)."""

    def __init__(self, offset: int, key: bytes, value: dict[str, object] | None) -> None:
        self._offset, self._key, self._value = offset, key, value

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return None if self._value is None else json.dumps(self._value).encode()


class _Codec:
    """Key bytes: 5 header bytes (magic, schema id) and the key's person id."""

    def decode_key(self, topic: str, partition: int, offset: int, key: bytes) -> ChangeKey:
        return ChangeKey("PHONE", None, int(key[5:]), None, None, "office")

    def decode_value(self, topic: str, partition: int, offset: int, value: bytes) -> dict[str, object]:
        decoded: dict[str, object] = json.loads(value)
        return decoded


def _record(person: int, change_type: str, lsn: int, phone: str, tname: str = "PHONE") -> dict[str, object]:
    return {"tname": tname, "subtype": None, "person_id": person, "pkey_string": None, "pkey_number": None,
            "aux_string": "office", "change_type": change_type, "source": {"last_commit_lsn": lsn, "lsn": lsn},
            "after": {"phone": phone}}  # fmt: skip


def _live(monkeypatch: pytest.MonkeyPatch, records: list[_Msg]) -> tuple[LiveStates, dict[int | None, Change]]:
    monkeypatch.setattr("streams.jobs.direct.read_batches", lambda settings, ends: iter([records]))
    states = LiveStates(None, _Codec(), {}, [LogicalTable(tname="PHONE", comment="a test table")])  # type: ignore[arg-type]
    return states, {c.key.person_id: c for c in states}


def test_a_keys_last_record_is_its_state_a_delete_or_tombstone_leaves_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    k = b"\x00\x00\x00\x00\x01"
    states, live = _live(monkeypatch, [
        _Msg(0, k + b"1", _record(1, "INSERT", 10, "old")), _Msg(1, k + b"2", _record(2, "INSERT", 11, "x")),
        _Msg(2, k + b"1", _record(1, "UPDATE", 12, "new")), _Msg(3, k + b"2", _record(2, "DELETE", 13, "x")),
        _Msg(4, k + b"3", _record(3, "INSERT", 14, "y")), _Msg(5, k + b"3", None),
        _Msg(6, k + b"4", _record(4, "INSERT", 15, "room", tname="ROOM")),
    ])  # fmt: skip
    assert set(live) == {1}
    assert live[1].after == {"phone": "new"} and live[1].position == Position(12, 12)
    assert live[1].change_type == "UPDATE" and live[1].key == ChangeKey("PHONE", None, 1, None, None, "office")
    assert (states.records, states.keys) == (7, 4)


def test_a_key_written_in_two_key_schemas_is_one_key_whose_last_record_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = b"\x00\x00\x00\x00\x01", b"\x00\x00\x00\x00\x02"
    states, live = _live(monkeypatch, [
        _Msg(0, one + b"1", _record(1, "INSERT", 10, "first")), _Msg(1, two + b"1", _record(1, "UPDATE", 11, "second")),
        _Msg(2, one + b"2", _record(2, "INSERT", 12, "x")), _Msg(3, two + b"2", _record(2, "DELETE", 13, "x")),
    ])  # fmt: skip
    assert set(live) == {1} and live[1].after == {"phone": "second"}
    assert states.keys == 2
