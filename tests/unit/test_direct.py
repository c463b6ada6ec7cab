"""The batch jobs' direct engine (streams/jobs/direct.py): which engine a size gets, the COPY rows
it writes, the applied positions it leaves."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import pytest

from mcq.change import Change, ChangeKey, Position
from streams.jobs.direct import DIRECT_MAX_RECORDS, applied_diff, choose, csv_rows


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
