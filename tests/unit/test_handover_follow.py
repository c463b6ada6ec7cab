"""How far held queries are behind the running normaliser (streams/handover_follow.py),
from what its follower noted, without Kafka: messages as plain objects."""

from __future__ import annotations

import time
from dataclasses import dataclass

from mcq.change import RAW_HEADER
from mcq.config import Settings
from streams.handover_follow import LandedFollower, near
from streams.handover_gate import note_landed

COPIED_MS = 1_000_000


@dataclass
class Message:
    raw: str
    written_key: bytes
    out: int
    at_ms: int

    def key(self) -> bytes:
        return self.written_key

    def headers(self) -> list[tuple[str, bytes]]:
        return [(RAW_HEADER, self.raw.encode())]

    def topic(self) -> str:
        return "logical.t"

    def partition(self) -> int:
        return self.out

    def timestamp(self) -> tuple[int, int]:
        return 1, self.at_ms


def _follower(*messages: Message) -> LandedFollower:
    follower = LandedFollower(Settings(), ["logical.t"], 0, lambda lines: None, COPIED_MS)
    for msg in messages:
        noted = note_landed(follower.seen, msg)
        assert noted is not None
        follower._note_raw(noted, msg.timestamp()[1])
    return follower


def test_a_held_query_is_behind_by_the_raw_records_landed_past_what_it_asked_about() -> None:
    follower = _follower(
        Message("raw.a[0]@10", b"k1", 0, COPIED_MS - 5), Message("raw.a[0]@25", b"k2", 1, COPIED_MS + 5),
        Message("raw.a[0]@20", b"k3", 0, COPIED_MS + 1),
    )  # fmt: skip
    assert follower.highest == {("raw.a", 0): 25}
    assert follower.behind(lambda raw, partition: 22) == 3
    assert follower.behind(lambda raw, partition: 30) == 0


def test_records_landed_after_the_copy_count_before_a_held_query_asked_about_any() -> None:
    """Landed after the checkpoint was copied: the held query will reach them (from raw
    offset 20 at the latest), though it has asked about none yet."""
    follower = _follower(Message("raw.a[0]@20", b"k", 0, COPIED_MS + 1), Message("raw.a[0]@24", b"k", 0, COPIED_MS + 9))
    assert follower.behind(lambda raw, partition: -1) == 5


def test_a_raw_partition_landed_only_before_the_copy_and_never_asked_about_is_not_waited_for() -> None:
    """Its records are before the held query's checkpoint: it will never ask about them."""
    follower = _follower(Message("raw.b[2]@3569", b"k", 0, COPIED_MS - 20_000))
    assert follower.behind(lambda raw, partition: -1) == 0


def test_near_asks_at_once_when_the_follower_failed() -> None:
    follower = _follower(Message("raw.a[0]@500", b"k", 0, COPIED_MS + 1))
    follower.failed = "KafkaException: gone"

    class Gate:
        @staticmethod
        def seen(raw: str, partition: int) -> int:
            return -1

    began = time.monotonic()
    assert (
        near(follower, Gate(), lambda: False, records=0, wait_s=30) == 1
    )  # raw offset 500, which it will reach, and nothing more to learn
    assert time.monotonic() - began < 5


def test_the_gate_is_told_only_the_output_partitions_that_moved_and_the_fences_name_all_of_them() -> None:
    follower = _follower(
        Message("raw.a[0]@10", b"k1", 0, COPIED_MS), Message("raw.a[0]@12", b"k2", 1, COPIED_MS),
        Message("raw.b[1]@7", b"k3", 0, COPIED_MS),
    )  # fmt: skip
    follower.partitions = {"logical.t": 2}
    told = follower._lines({(("raw.a", 0, "logical.t"), 1)})
    assert told == f"raw.a\t0\tlogical.t\t12\t{b'k2'.hex()}\t1\t2\n"
    fences = follower._lines(None).splitlines()
    assert fences == [
        f"raw.a\t0\tlogical.t\t10\t{b'k1'.hex()}\t0\t2",
        f"raw.a\t0\tlogical.t\t12\t{b'k2'.hex()}\t1\t2",
        f"raw.b\t1\tlogical.t\t7\t{b'k3'.hex()}\t0\t2",
    ]
