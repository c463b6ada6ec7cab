"""The history's events and how a trace reads: pure logic (the topic: test_trace)."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcq.change import ChangeKey
from mcq.history import BadHistoryEvent, Event, partition_of
from mcq.history.show import lines, parse_key

KEY = ChangeKey("PHONE", "Office", person_id=1, pkey_string="desk")


def _event(step: str, position: str, at: float, listener: str | None = None, answer: str | None = None) -> Event:
    return Event("PHONE", KEY.text(), step, at, position, "UPDATE", "2026-12-02T05:00:00+00:00", 42,  # type: ignore[arg-type]
                 "mcq.raw.x.phone[0]@5", "mcq.phone.office[1]@9", listener, answer)  # fmt: skip


def test_an_event_reads_back_as_it_was_written() -> None:
    e = _event("parked", "10/11", 1.5, "L", "refused")
    assert Event.from_json(e.to_json(), "here") == e


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (json.dumps({"tname": "T", "key": "k", "step": "eaten", "position": "1/2", "at": 1}).encode(), "unknown step"),
        (json.dumps({"tname": "T", "key": "k", "step": "applied", "position": "1/2"}).encode(), "'at'"),
        (
            json.dumps({"tname": "T", "key": "k", "step": "applied", "position": "1/2", "at": 1, "txid": "x"}).encode(),
            "'txid'",
        ),
    ],
)
def test_a_record_that_is_not_an_event_is_refused_naming_where(value: bytes, says: str) -> None:
    with pytest.raises(BadHistoryEvent, match=f"topic\\[0\\]@3: .*{says}"):
        Event.from_json(value, "topic[0]@3")


@given(st.binary(max_size=300))
def test_no_bytes_make_the_reader_fail_otherwise(value: bytes) -> None:
    with contextlib.suppress(BadHistoryEvent):
        Event.from_json(value, "t[0]@0")


def test_every_event_of_a_key_lands_in_one_partition_within_the_topic() -> None:
    assert partition_of("PHONE", KEY.text()) == partition_of("PHONE", KEY.text())
    assert {partition_of("PHONE", f"k{i}", 6) for i in range(200)} == set(range(6))


def test_key_fields_are_read_with_or_without_spaces_after_commas() -> None:
    assert parse_key("PHONE/Office", "person_id=1,pkey_string=desk") == KEY
    assert parse_key("PHONE/Office", "person_id=1, pkey_string=desk") == KEY
    with pytest.raises(ValueError):
        parse_key("PHONE", "person_id=x")


def test_a_trace_shows_each_change_its_steps_and_the_listeners_that_did_nothing_yet() -> None:
    events = [
        _event("captured", "10/11", 1.0),
        _event("applied", "10/11", 2.0, "A", "UPDATE accepted"),
        _event("captured", "12/13", 3.0),
        _event("parked", "12/13", 4.0, "A", "refused by policy"),
    ]
    shown = lines(KEY, events, ["A", "B"])
    assert shown[0] == f"{KEY}: 4 event(s)"
    assert [x.split()[0] for x in shown if x.startswith("  change")] == ["change", "change"]
    assert sum("listener B: nothing yet" in x for x in shown) == 2
    text = "\n".join(shown)
    assert text.index("change 10/11") < text.index("listener A applied") < text.index("change 12/13")
    assert "listener A parked: refused by policy" in text and "[raw mcq.raw.x.phone[0]@5 logical" in text
