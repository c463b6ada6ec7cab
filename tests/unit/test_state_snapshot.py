"""The state snapshot file: written atomically for this user only, read back equal, and
refused (with the reason) when it is not this user's own, torn, or of other topics."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, cast

from confluent_kafka.admin import AdminClient

from consumers import state_snapshot
from consumers.state_snapshot import Snapshot

NO_ADMIN = cast(AdminClient, None)  # the checks below answer before any broker is asked


def _snapshot() -> Snapshot:
    return Snapshot({"p.PHONE": "PHONE"}, {"p.PHONE": "id-1"}, {("p.PHONE", 0): 42}, {"rows": {"PHONE": {"k": 1}}})


def test_a_saved_snapshot_reads_back_equal_and_only_its_owner_may_read_it(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "T.store"
    saved = _snapshot()
    state_snapshot.save(path, saved)
    assert path.stat().st_mode & 0o777 == 0o600
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert state_snapshot.load(path) == saved


def test_a_file_others_may_write_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "T.store"
    state_snapshot.save(path, _snapshot())
    os.chmod(path, 0o664)
    why = state_snapshot.load(path)
    assert isinstance(why, str) and "is not this user's own file" in why and "mode 664" in why


def test_a_torn_or_foreign_file_is_not_used(tmp_path: Path) -> None:
    torn = tmp_path / "torn.store"
    torn.write_bytes(b"\x80\x05\x95garbage")  # a pickle, say
    torn.chmod(0o600)
    assert state_snapshot.load(torn) == f"{torn} cannot be read (ValueError)"
    assert state_snapshot.load(tmp_path / "missing.store") == "no snapshot yet"


def test_a_snapshot_of_other_topics_or_topic_ids_is_not_used() -> None:
    snap = _snapshot()
    now = time.time()
    other: dict[str, Any] = {"p.PHONE": "PHONE", "p.ROOM": "ROOM"}
    assert state_snapshot.unusable(snap, NO_ADMIN, other, snap.ids, now) == "the store's topics changed"
    assert state_snapshot.unusable(snap, NO_ADMIN, snap.topics, {"p.PHONE": "id-2"}, now) == (
        "a topic was created again since (another topic id)"
    )
    assert state_snapshot.unusable(snap, NO_ADMIN, snap.topics, None, now) == (
        "a topic was created again since (another topic id)"
    )


def test_a_restored_snapshot_is_written_again_only_after_a_long_tail_or_half_its_retention() -> None:
    asked: list[int] = []

    def retention() -> int | None:
        asked.append(1)
        return 86_400_000  # a day

    now = 1_000_000.0
    assert state_snapshot.due(None, 0, retention, now)  # none restored: the first one
    assert state_snapshot.due(now - 60, state_snapshot.SAVE_AFTER_RECORDS, retention, now)  # a long tail
    assert not asked  # neither needed the topics' retention
    assert not state_snapshot.due(now - 60, 88, retention, now)  # a scheduled run's short tail
    assert state_snapshot.due(now - 43_200, 88, retention, now)  # half a day old: soon unusable
    assert state_snapshot.due(now - 60, 88, lambda: None, now)  # retention unknown: write it
