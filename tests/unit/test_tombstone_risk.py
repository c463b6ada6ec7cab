"""Pure logic of telling a listener that stayed behind longer than a compacted topic keeps
its tombstones: the offset metadata of a commit, the judgement, the mark the listener
leaves when it reads such changes, the line ``mcq status`` prints, and the refresh that
line recommends (which clears the mark)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from consumers.projection import IndexedState
from consumers.runtime.acks import (
    EXPOSED,
    AckMark,
    Exposure,
    ExposureMark,
    behind_too_long,
    exposure_line,
    fold_mark,
    merge_exposures,
    oldest_pending_since,
    waited_past_retention,
)
from consumers.runtime.refresh import RefreshResolver
from consumers.runtime.view import ListenerView
from mcq.change import Change, ChangeKey, Position
from mcq.registry import parse_registry

REGISTRY = """
sources:
  - {name: campus, schemas: [campus]}
tables:
  - tname: PERSON
    subtype: Status
    feeds:
      - {source: campus, table: campus.person_status, keys: {person_id: person_id}, columns: [person_id, status]}
  - tname: PHONE
    feeds:
      - {source: campus, table: campus.phone, keys: {person_id: person_id}, columns: [person_id, phone]}
  - {tname: ROOM}
listeners:
  - {name: LDAP, owner: idm@example, adapter: {type: table}}
interests:
  - {listener: LDAP, tname: PERSON, subtype: "*"}
  - {listener: LDAP, tname: PHONE}
  - {listener: LDAP, tname: ROOM}
"""
HOUR = 3600.0
DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def registry():  # type: ignore[no-untyped-def]
    return parse_registry(REGISTRY, "risk.yaml")


def test_the_commit_metadata_is_small_and_reads_back() -> None:
    mark = AckMark(1_700_000_000.123, 1_699_999_999.0)
    assert mark.text() == '{"t":1700000000123,"r":1699999999000}'
    assert AckMark.parse(mark.text()) == mark
    assert AckMark.parse(AckMark(5.0).text()) == AckMark(5.0)  # no record timestamp: no "r"
    for other in (None, "", "x", "[]", '{"r": 5}', '{"t": "soon"}', '{"t": 5, "r": "then"}'):
        assert AckMark.parse(other) is None, other  # not ours: not judged


def test_the_oldest_pending_change_is_the_record_at_the_commit_else_bounded_by_the_mark() -> None:
    mark = AckMark(at=1000.0, since=900.0)
    assert oldest_pending_since(10, None, 10, 950.0) is None  # committed without a mark: not judged
    assert oldest_pending_since(10, mark, 10, 5000.0) == 5000.0  # a quiet partition: only the new record counts
    assert oldest_pending_since(10, mark, 12, 5000.0) == 900.0  # records 10, 11 compacted away: no later than r
    assert oldest_pending_since(10, mark, None, None) == 900.0  # nothing read in time
    assert oldest_pending_since(10, AckMark(at=1000.0), 12, 5000.0) == 1000.0  # no r: the commit time


def test_a_partition_is_at_risk_only_with_changes_waiting_longer_than_the_tombstones_are_kept() -> None:
    now = 100 * HOUR
    assert behind_too_long(5, now - 26.1 * HOUR, now, DAY_MS) == pytest.approx(26.1 * HOUR)
    assert behind_too_long(5, now - 23 * HOUR, now, DAY_MS) is None  # within the retention
    assert behind_too_long(0, now - 26 * HOUR, now, DAY_MS) is None  # caught up, however old its commit
    assert behind_too_long(5, None, now, DAY_MS) is None  # no mark: not judged
    assert behind_too_long(5, now - 26 * HOUR, now, None) is None  # not compacted: no tombstones to lose


def test_the_line_names_the_listener_the_topic_and_the_refresh_that_repairs_it(registry) -> None:  # type: ignore[no-untyped-def]
    status, phone, room = (
        registry.table("PERSON", "Status"),
        registry.table("PHONE", None),
        registry.table("ROOM", None),
    )
    assert exposure_line("LDAP", []) is None
    line = exposure_line("LDAP", [Exposure("mcq.person.status", 26.1 * HOUR, DAY_MS, status)])
    assert line == (
        "listener LDAP: changes waited longer than their topic keeps deletes, on mcq.person.status for 26.1 h "
        "(delete.retention.ms 86400000 = 24.0 h): deleted keys may remain at its target; repair: "
        "mcq refresh LDAP --tname PERSON --subtype Status; then let it catch up (mcq listen LDAP --until-caught-up)"
    )
    both = exposure_line("LDAP", [Exposure("mcq.phone", 30.0, 2000, phone), Exposure("mcq.room", 40.0, 2000, room)])
    assert both is not None and "\n" not in both
    assert "on mcq.phone for 30.0 s (delete.retention.ms 2000 = 2.0 s), on mcq.room for 40.0 s" in both
    # a table without a source feed (explicit log entries only) is repaired the same way
    assert "repair: mcq refresh LDAP --tname PHONE, mcq refresh LDAP --tname ROOM; then" in both
    gone = exposure_line("LDAP", [Exposure("mcq.renamed", 30.0, 2000, None)])
    assert gone is not None and "repair: mcq refresh LDAP; then" in gone


def test_a_whole_table_refresh_deletes_the_keys_at_the_target_that_have_no_state_left(registry) -> None:  # type: ignore[no-untyped-def]
    """What the line recommends repairs: a refresh naming only the TNAME resolves to every
    live key's state and a DELETE of each key the target holds that the topics no longer do."""
    state = IndexedState()
    live = ChangeKey("PHONE", None, 1)
    state.put("PHONE", live, {"person_id": "1", "phone": "x"}, Position(5, 6))
    resolver = RefreshResolver(registry, ListenerView(registry, "LDAP"), lambda refs: state)
    request = Change(ChangeKey("PHONE"), "UPDATE", Position(90, 91), datetime.now(UTC), "x", origin="explicit")
    resolver.prepare([request])
    missed = ChangeKey("PHONE", None, 2)  # its tombstone was cleaned before the listener read it
    elsewhere = ChangeKey("PERSON", "Status", 3)
    out = resolver.resolve(request, present=[live, missed, elsewhere])
    assert [(c.key, c.change_type, c.cause) for c in out] == [
        (live, "UPDATE", "refresh"),
        (missed, "DELETE", "refresh"),
    ]


def test_a_listener_reading_changes_that_waited_too_long_judges_them_like_status() -> None:
    now = 100 * HOUR
    mark = AckMark(at=now - 30 * HOUR, since=now - 30 * HOUR).text()
    assert waited_past_retention(10, mark, 10, now - 25 * HOUR, now, DAY_MS) == (now - 25 * HOUR, 25 * HOUR)
    assert waited_past_retention(10, mark, 12, now - HOUR, now, DAY_MS) == (now - 30 * HOUR, 30 * HOUR)  # a gap
    assert waited_past_retention(10, mark, 10, now - HOUR, now, DAY_MS) is None  # a quiet partition, fresh news
    assert waited_past_retention(10, None, 12, now - 25 * HOUR, now, DAY_MS) is None  # no mark: not judged
    assert waited_past_retention(10, "by hand", 12, now - 25 * HOUR, now, DAY_MS) is None
    assert waited_past_retention(10, mark, 10, now - 25 * HOUR, now, None) is None  # not compacted


def test_the_exposure_mark_is_small_json_and_reads_back(registry) -> None:  # type: ignore[no-untyped-def]
    mark = ExposureMark("mcq.person.status", 1_700_000_000.5, 26.1 * HOUR, DAY_MS, "PERSON", "Status")
    assert mark.key == EXPOSED + "mcq.person.status"
    assert ExposureMark.parse(mark.topic, mark.text()) == mark
    assert ExposureMark.parse(mark.topic, mark.text().encode()) == mark
    unreadable = ('{"since": 1, "waited_s": 2}', '{"since": 1, "waited_s": 2, "retention_ms": "x"}')
    for other in (None, b"", "x", "[]", *unreadable):
        assert ExposureMark.parse("t", other) is None, other
    table = registry.table("PERSON", "Status")
    assert mark.exposure(table) == Exposure("mcq.person.status", 26.1 * HOUR, DAY_MS, table)


def test_an_applied_topic_folds_to_the_marks_not_yet_cleared() -> None:
    one = ExposureMark("mcq.phone", 10.0, 30.0, 2000, "PHONE")
    two = ExposureMark("mcq.room", 20.0, 40.0, 2000, "ROOM")
    marks: dict[str, ExposureMark] = {}
    records = [
        ('{"tname":"PHONE","person_id":1}', b"5/6"),  # an applied position: not a mark
        ("park:{}", b"5/6"),
        (one.key, one.text().encode()),
        (two.key, two.text().encode()),
        (one.key, None),  # a whole-table refresh of PHONE was applied
    ]
    assert [fold_mark(marks, k, v) for k, v in records] == [False, False, True, True, True]
    assert marks == {"mcq.room": two}


def test_status_gives_one_line_per_listener_from_what_is_pending_and_what_was_marked(registry) -> None:  # type: ignore[no-untyped-def]
    phone, room = registry.table("PHONE", None), registry.table("ROOM", None)
    live = [Exposure("mcq.phone", 30.0, 2000, phone)]
    marked = [Exposure("mcq.phone", 50.0, 1000, None), Exposure("mcq.room", 40.0, 2000, room)]
    merged = merge_exposures(live, marked)
    assert merged == [Exposure("mcq.phone", 50.0, 2000, phone), Exposure("mcq.room", 40.0, 2000, room)]
    assert merge_exposures([], marked[1:]) == marked[1:]  # caught up: the mark alone still tells
    assert merge_exposures(live, []) == live
    line = exposure_line("LDAP", merged)
    assert line == exposure_line("LDAP", [Exposure("mcq.phone", 50.0, 2000, phone), *marked[1:]])
    assert line is not None and "\n" not in line


def test_only_a_refresh_naming_no_key_field_refreshes_a_table_whole(registry) -> None:  # type: ignore[no-untyped-def]
    resolver = RefreshResolver(registry, ListenerView(registry, "LDAP"), lambda refs: IndexedState())
    status, phone = registry.table("PERSON", "Status"), registry.table("PHONE", None)
    assert resolver.whole_tables(ChangeKey("PHONE")) == [phone]
    assert resolver.whole_tables(ChangeKey("PERSON", "Status")) == [status]
    assert resolver.whole_tables(ChangeKey("PERSON")) == [status]  # every subtype this listener covers
    assert resolver.whole_tables(ChangeKey("PHONE", None, 7)) == []  # one person's phones: not the whole table
    assert resolver.whole_tables(ChangeKey("COURSE")) == []
