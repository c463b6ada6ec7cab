"""mcq/jsontext.py: JSON text on a listener's path (orjson, the standard library as fallback)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from consumers.runtime.applied import state_digest
from mcq import jsontext
from mcq.history import Event


def test_text_reads_back_as_the_same_value_with_non_ascii_text_kept_as_utf8() -> None:
    value = {"cn": "Jörg Ødegård", "n": 12, "x": 1.5, "none": None, "ok": True, "list": [1, "二"]}
    text = jsontext.dumps(value)
    assert json.loads(text) == value
    assert "Jörg".encode() in text


def test_sorted_keys_sort_every_object_so_equal_states_have_equal_text() -> None:
    a = {"b": 1, "a": {"y": 2, "x": 1}}
    b = {"a": {"x": 1, "y": 2}, "b": 1}
    assert jsontext.dumps(a, sort_keys=True) == jsontext.dumps(b, sort_keys=True) == b'{"a":{"x":1,"y":2},"b":1}'


def test_an_integer_beyond_64_bits_falls_back_to_the_standard_library() -> None:
    big = {"n": 2**70, "name": "é"}
    assert json.loads(jsontext.dumps(big)) == big


def test_a_lone_surrogate_falls_back_to_the_standard_librarys_ascii_escapes() -> None:
    assert jsontext.dumps({"s": "a\ud800"}) == b'{"s":"a\\ud800"}'


def test_default_turns_what_json_has_no_type_for_into_text() -> None:
    assert json.loads(jsontext.dumps({"d": Decimal("1.10")}, default=str)) == {"d": "1.10"}


def test_what_neither_encoder_can_write_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        jsontext.dumps({"s": {1, 2}})


def test_a_state_digest_ignores_key_order_and_tells_states_apart() -> None:
    when = datetime(2026, 12, 4, tzinfo=UTC)
    one = state_digest({"a": 1, "b": "x", "t": when, "n": Decimal("2.5")})
    assert one == state_digest({"n": Decimal("2.5"), "t": when, "b": "x", "a": 1})
    assert one != state_digest({"a": 1, "b": "y", "t": when, "n": Decimal("2.5")})
    assert state_digest(None) == 0 and one != 0


def test_a_history_event_round_trips_through_its_json() -> None:
    event = Event(tname="PERSON", key="PERSON:12", step="applied", at=1.5, position="1/2", answer="é", txid=7)
    assert Event.from_json(event.to_json(), "here") == event


class _Msg:
    def headers(self) -> list[tuple[str, bytes]]:
        return [("mcq.raw", b"raw.t[0]@9")]


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes, int]] = []

    def produce(self, topic: str, value: bytes, key: bytes, partition: int) -> None:
        self.sent.append((topic, value, key, partition))


def test_a_listeners_step_is_an_event_with_every_field_read_back_where_the_keys_history_is() -> None:
    from consumers.runtime.delivery import Item
    from consumers.runtime.history import Steps
    from consumers.runtime.parking import Origin
    from mcq.change import RAW_HEADER
    from mcq.history import HistoryWriter, partition_of
    from mcq.testing.listeners import change

    assert RAW_HEADER == "mcq.raw"
    producer = _Producer()
    c = change("PHONE", 7, "ø")
    item = Item(_Msg(), Origin("logical.t", 2, 41), c)  # type: ignore[arg-type]
    Steps("Mirror", HistoryWriter(producer, "h", 12))(item, "parked", "the target said no")
    ((topic, value, key, partition),) = producer.sent
    event = Event.from_json(value, "h")
    assert (topic, key, partition) == ("h", f"PHONE:{c.key.text()}".encode(), partition_of("PHONE", c.key.text(), 12))
    assert event == Event(
        tname="PHONE", key=c.key.text(), step="parked", at=event.at, position=str(c.position),
        change_type="UPDATE", commit_time=c.entry_time.isoformat(), txid=c.txid, raw="raw.t[0]@9",
        logical="logical.t[2]@41", listener="Mirror", answer="the target said no", cause=c.cause,
    )  # fmt: skip


class _BareMsg:
    def headers(self) -> None:
        return None


def test_a_listeners_step_leaves_out_what_it_does_not_know_as_the_event_does() -> None:
    from dataclasses import replace

    from consumers.runtime.delivery import Item
    from consumers.runtime.history import Steps
    from consumers.runtime.parking import Origin
    from mcq.history import HistoryWriter
    from mcq.testing.listeners import change

    producer = _Producer()
    c = replace(change("PHONE", 8, "x"), txid=None, cause=None)
    Steps("Mirror", HistoryWriter(producer, "h", 12))(Item(_BareMsg(), Origin("l", 0, 3), c), "applied")  # type: ignore[arg-type]
    ((_, value, _, _),) = producer.sent
    event = Event.from_json(value, "h")
    assert value == Event(
        tname="PHONE", key=c.key.text(), step="applied", at=event.at, position=str(c.position),
        change_type=c.change_type, commit_time=c.entry_time.isoformat(), logical="l[0]@3", listener="Mirror",
    ).to_json()  # fmt: skip
