"""Checkpoints: what a kill left half-written goes, everything else stays; what a batch read, from its offset log."""

from __future__ import annotations

from pathlib import Path

from streams.checkpoint import batch_offsets, clear_torn_writes, topics_read

UUID = "3a7b927f-be2e-415a-b251-de4a66eed4d3"


def test_the_temporary_files_of_an_interrupted_commit_are_removed_and_real_entries_kept(tmp_path: Path) -> None:
    q = tmp_path / "realtime" / "mcq.raw.x.vmail_commands"
    for d in ("commits", "offsets", "sources/0"):
        (q / d).mkdir(parents=True)
    torn = [q / "commits" / f".0.{UUID}.tmp", q / "commits" / f"..0.{UUID}.tmp.crc"]
    kept = [q / "metadata", q / "offsets" / "0", q / "offsets" / ".0.crc", q / "sources" / "0" / "0",
            q / "commits" / "notes.tmp"]  # fmt: skip
    for f in [*torn, *kept]:
        f.write_text("x")
    assert clear_torn_writes(tmp_path) == sorted(torn)
    assert not any(f.exists() for f in torn)
    assert all(f.exists() for f in kept)


def test_a_checkpoint_not_made_yet_needs_nothing(tmp_path: Path) -> None:
    assert clear_torn_writes(tmp_path / "none") == []


def _entry(query: Path, batch: int, offsets: str) -> None:
    (query / "offsets").mkdir(parents=True, exist_ok=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1795785889102,"conf":{}}'
    (query / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{offsets}")


def test_a_batch_reads_the_topics_whose_offsets_moved_since_the_batch_before(tmp_path: Path) -> None:
    _entry(tmp_path, 4, '{"raw.a":{"0":10},"raw.b":{"0":5,"1":7},"raw.c":{"0":3}}')
    _entry(tmp_path, 5, '{"raw.a":{"0":10},"raw.b":{"0":5,"1":9},"raw.c":{"0":3},"raw.d":{"0":0}}')
    _entry(tmp_path, 6, '{"raw.a":{"0":12},"raw.b":{"0":5,"1":9,"2":0},"raw.c":{"0":3},"raw.d":{"0":1}}')
    assert topics_read(tmp_path, 5) == {"raw.b", "raw.d"}  # a topic new since then: from its beginning
    assert topics_read(tmp_path, 6) == {"raw.a", "raw.b", "raw.d"}  # a partition new since then
    assert batch_offsets(tmp_path, 6) == {"raw.a": {"0": 12}, "raw.b": {"0": 5, "1": 9, "2": 0},
                                          "raw.c": {"0": 3}, "raw.d": {"0": 1}}  # fmt: skip


def test_when_what_a_batch_read_cannot_be_told_every_topic_may_have_records(tmp_path: Path) -> None:
    _entry(tmp_path, 0, '{"raw.a":{"0":10}}')
    assert topics_read(tmp_path, 0) is None  # the first batch: from the source's startingOffsets
    assert topics_read(tmp_path, 3) is None  # no entry
    _entry(tmp_path, 1, "{not json")
    assert topics_read(tmp_path, 1) is None
    _entry(tmp_path, 7, '{"raw.a":{"0":10}}')
    assert topics_read(tmp_path, 7) is None  # the batch before's entry is gone
    assert topics_read(tmp_path / "none", 1) is None
