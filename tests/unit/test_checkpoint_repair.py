"""A checkpoint a kill left half-written: its temporary files go, everything else stays."""

from __future__ import annotations

from pathlib import Path

from streams.checkpoint import clear_torn_writes

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
