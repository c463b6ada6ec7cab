"""What `mcq connect status` and `mcq status` say about a source's replication slot (pure logic)."""

from __future__ import annotations

from mcq.capture.slots import MB, SlotState, slot_alerts


def test_a_healthy_slot_says_nothing() -> None:
    assert slot_alerts([SlotState("campus", "mcq_campus", True, True, "reserved", 3 * MB, 0)], warn_mb=1024) == []


def test_a_missing_slot_names_the_refresh_that_repairs_what_was_never_captured() -> None:
    (line,) = slot_alerts([SlotState("campus", "mcq_campus", exists=False)], warn_mb=1024)
    assert line.startswith("source campus: replication slot mcq_campus does not exist")
    assert "mcq refresh LISTENER --from source" in line


def test_a_lost_slot_gives_the_runbook_not_a_retry() -> None:
    (line,) = slot_alerts([SlotState("campus", "mcq_campus", True, False, "lost", 0, 0)], warn_mb=1024)
    assert "lost WAL it still needed" in line
    assert "`mcq connect remove` then `mcq connect apply`" in line and "--from source" in line


def test_a_slot_holding_more_wal_than_the_threshold_says_how_much_and_whether_it_is_read() -> None:
    states = [
        SlotState("a", "mcq_a", True, True, "reserved", 2048 * MB, 10 * MB),
        SlotState("b", "mcq_b", True, False, "extended", 1500 * MB, 1500 * MB),
    ]
    first, second = slot_alerts(states, warn_mb=1024)
    assert "holds 2,048 MB of WAL" in first and "warning above 1,024 MB" in first and "; active)" in first
    assert "holds 1,500 MB" in second and "INACTIVE" in second and "wal_status extended" in second


def test_a_slot_that_starts_past_where_its_connector_captured_names_the_gap_and_the_runbook() -> None:
    state = SlotState("campus", "mcq_campus", True, True, "reserved", 0, 0, restart_lsn=0x1_6B374D48,
                      captured_lsn=0x1_6A000000)  # fmt: skip
    (line,) = slot_alerts([state], warn_mb=1024)
    assert "starts at WAL 1/6B374D48, past 1/6A000000 where its connector last captured" in line
    assert "never captured" in line and "`mcq connect remove` then `mcq connect apply`" in line
    assert "--from source" in line


def test_a_slot_behind_its_connectors_position_or_of_a_connector_without_offsets_is_no_gap() -> None:
    assert slot_alerts([SlotState("c", "s", True, True, "reserved", 0, 0, 100, 200)], warn_mb=1024) == []
    assert slot_alerts([SlotState("c", "s", True, True, "reserved", 0, 0, 100, None)], warn_mb=1024) == []
