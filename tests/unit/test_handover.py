"""The hand-over's bookkeeping in the checkpoint directory (streams/handover_lease.py)
and its fences (streams/handover_gate.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from streams.checkpoint import realtime_dir
from streams.handover import HandOver
from streams.handover_gate import fence_lines, landed_lines
from streams.handover_lease import (
    LEASE_S,
    Lease,
    answer,
    ask,
    asked,
    claim,
    copy_checkpoint,
    holder,
    make_current,
    new_instance,
    wait_answer,
)


def _owner(checkpoint: Path, **fields: object) -> None:
    (checkpoint / "handover").mkdir(parents=True, exist_ok=True)
    (checkpoint / "handover" / "owner.json").write_text(json.dumps(fields))


def test_a_lease_beaten_by_a_live_process_has_a_holder(tmp_path: Path) -> None:
    old, me = new_instance(), new_instance()
    lease = Lease(tmp_path, old)
    lease.hold()
    try:
        assert holder(tmp_path, me) is not None and holder(tmp_path, me)["id"] == old["id"]  # type: ignore[index]
        assert holder(tmp_path, old) is None  # not its own
    finally:
        lease.release()
    assert holder(tmp_path, me) is None  # released: given up


def test_a_stale_lease_or_a_dead_process_on_this_host_is_a_crash(tmp_path: Path) -> None:
    me = new_instance()
    _owner(tmp_path, id="old", pid=os.getpid(), host=me["host"], beat=time.time() - LEASE_S - 1)
    assert holder(tmp_path, me) is None
    _owner(tmp_path, id="old", pid=2**22 + 17, host=me["host"], beat=time.time())  # no such process
    assert holder(tmp_path, me) is None
    _owner(tmp_path, id="old", pid=2**22 + 17, host="another-host", beat=time.time())  # not ours to look at
    assert holder(tmp_path, me) is not None


def test_the_answer_to_an_ask_is_found_even_as_the_old_lease_goes(tmp_path: Path) -> None:
    old, me = new_instance(), new_instance()
    lease = Lease(tmp_path, old)
    lease.hold()
    ask(tmp_path, me)
    assert asked(tmp_path, old) is not None and asked(tmp_path, old)["id"] == me["id"]  # type: ignore[index]
    assert asked(tmp_path, me) is None  # not its own ask
    answer(tmp_path, old, me, since_ms=1234, flushed=True)
    lease.release()
    done = wait_answer(tmp_path, me, old, stopped=lambda: False)
    assert done is not None and done["since_ms"] == 1234 and done["flushed"] is True
    assert asked(tmp_path, old) is None  # answered: the ask is gone


def test_no_answer_from_an_instance_that_died_is_a_crash(tmp_path: Path) -> None:
    me = new_instance()
    _owner(tmp_path, id="old", pid=2**22 + 17, host=me["host"], beat=time.time())
    ask(tmp_path, me)
    assert wait_answer(tmp_path, me, {"id": "old"}, stopped=lambda: False) is None


def test_fences_are_one_line_per_raw_partition_and_topic_with_the_keys_at_the_highest_offset() -> None:
    lines = fence_lines(
        {("raw.a", 0, "t.x"): (41, frozenset({b"\x01\xff", b"k"})), ("raw.a", 1, "t.x"): (7, frozenset())}
    )
    assert lines == "raw.a\t0\tt.x\t41\t01ff,6b\nraw.a\t1\tt.x\t7\t\n"


def test_after_a_crash_each_output_partition_is_fenced_at_its_own_highest_raw_offset() -> None:
    """Per output partition what landed is a prefix of what was sent: raw offset 12, sent
    to partition 0 after 10 landed there, may be lost while 15 landed in partition 1; a
    partition with nothing of a raw partition has no fence (everything is written again)."""
    lines = landed_lines(
        {
            ("raw.a", 0, "t.x"): {0: (10, frozenset({b"p"})), 1: (15, frozenset({b"q", b"r"}))},
            ("raw.b", 0, "t.y"): {0: (3, frozenset({b"u"}))},
        },
        {"t.x": 3, "t.y": 1},
    )
    assert lines == "raw.a\t0\tt.x\t10\t70\t0\t3\nraw.a\t0\tt.x\t15\t71,72\t1\t3\nraw.b\t0\tt.y\t3\t75\t0\t1\n"


def test_a_take_over_runs_on_a_copy_that_becomes_the_real_time_checkpoint(tmp_path: Path) -> None:
    query = tmp_path / "realtime" / "mcq.raw.x"
    (query / "commits").mkdir(parents=True)
    (query / "offsets").mkdir()
    (query / "metadata").write_text("{}")
    (query / "commits" / "3").write_text("v1")
    (query / "offsets" / "4").write_text("v1")
    torn = ".5.3f1c2b4a-1d2e-4f5a-8b9c-0a1b2c3d4e5f.tmp"  # a write a stop interrupted
    (query / "offsets" / torn).write_text("torn")
    os.utime(query / "commits" / "3", (1_000, 1_000))
    assert realtime_dir(tmp_path) == tmp_path / "realtime"
    copy, since_ms = copy_checkpoint(tmp_path)
    assert since_ms == 1_000_000  # the last committed batch's end: what follows may be the old one's
    assert (copy / "mcq.raw.x" / "offsets" / "4").read_text() == "v1"
    assert not (copy / "mcq.raw.x" / "offsets" / torn).exists()  # a torn write is not copied on
    assert realtime_dir(tmp_path) == tmp_path / "realtime"  # not before the old instance stopped
    make_current(tmp_path, copy)
    assert realtime_dir(tmp_path) == copy and not (tmp_path / "realtime").exists()


def test_a_killed_process_not_yet_reaped_holds_no_lease(tmp_path: Path) -> None:
    import subprocess
    import sys

    me = new_instance()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":  # exited, not reaped
        assert time.monotonic() < deadline
        time.sleep(0.05)
    try:
        _owner(tmp_path, id="old", pid=child.pid, host=me["host"], beat=time.time())
        assert holder(tmp_path, me) is None
    finally:
        child.wait()


def test_of_two_standbys_only_one_claims_the_take_over_from_a_crashed_instance(tmp_path: Path) -> None:
    first, second = new_instance(), new_instance()
    old = {"id": "crashed"}
    (tmp_path / "handover").mkdir()
    assert claim(tmp_path, first, old)
    assert not claim(tmp_path, second, old)
    claimed = tmp_path / "handover" / "claim.crashed"
    os.utime(claimed, (time.time() - 3600, time.time() - 3600))  # its claimer died before holding the lease
    assert claim(tmp_path, second, old)


def test_a_standby_reports_itself_alive_while_it_waits_and_re_holds_on_time(tmp_path: Path) -> None:
    _owner(tmp_path, id="running", pid=os.getppid(), host=new_instance()["host"], beat=time.time())
    standby = HandOver(tmp_path, standby=True, rehold_s=0.1)
    assert standby.taking_over is not None and standby.taking_over["id"] == "running"
    looks: list[float] = []
    reholds: list[float] = []

    def rehold() -> None:
        reholds.append(time.monotonic())
        standby.held_at = time.monotonic()

    until = time.monotonic() + 5
    standby.stand_by(
        lambda: len(looks) >= 12 or time.monotonic() > until, rehold, waiting=lambda: looks.append(time.monotonic())
    )
    assert len(looks) == 12  # a health endpoint's liveness, every look (ASK_POLL_S)
    assert reholds  # 0.55 s of waiting, a re-hold every 0.1 s
