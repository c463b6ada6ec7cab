"""The batch jobs' direct engine (streams/jobs/direct.py): which engine a size gets, the COPY rows
it writes, the applied positions it leaves."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import pytest

from mcq.change import Change, ChangeKey, Position
from mcq.registry.model import LogicalTable
from streams.jobs.direct import DIRECT_MAX_RECORDS, LiveStates, applied_diff, choose, csv_rows


def test_auto_reads_small_topics_directly_and_big_ones_in_spark() -> None:
    assert choose("auto", 20_000) == "direct"
    assert choose("auto", DIRECT_MAX_RECORDS + 1) == "spark"
    assert choose("spark", 10) == "spark" and choose("direct", 10**7) == "direct"
    with pytest.raises(ValueError, match="one of auto, spark, direct"):
        choose("fast", 1)


def test_copy_rows_keep_nulls_apart_from_empty_texts_and_escape_quotes_and_newlines() -> None:
    odd = 'q"uote,comma\nnewline'
    states = [
        Change(ChangeKey("PHONE", None, 7, odd, None, ""), "UPDATE", Position(5, 6), datetime.now(UTC), "PHONE",
               after={"phone": "höme", "x": None}),
        Change(ChangeKey("ROOM", "office", None, None, 12, None), "UPDATE", Position(1, 2), datetime.now(UTC), "ROOM",
               after={}),
    ]  # fmt: skip
    text = b"".join(csv_rows(states)).decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0][:7] == [states[0].key.text(), "PHONE", "", "7", odd, "", ""]
    assert json.loads(rows[0][7]) == {"phone": "höme", "x": None} and rows[0][8:] == ["5", "6"]
    assert ',"",' in text.splitlines()[-2]  # the empty aux_string is quoted: COPY reads it as '', not NULL
    assert rows[1][:7] == [states[1].key.text(), "ROOM", "office", "", "", "12", ""]


def test_applied_positions_are_written_only_where_they_say_otherwise() -> None:
    loaded = {"a": Position(1, 2), "b": Position(3, 4), "c": Position(5, 6)}
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
