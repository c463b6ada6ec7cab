"""The local stack's secret files (keys, passwords) are private from their first byte and
replaced whole: never a readable or half-written copy (mcq.stack.files)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mcq.stack import files
from mcq.stack.files import write_private


def test_a_secret_file_is_written_0600_and_replaces_a_readable_one_whole(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "server.key"
    path.parent.mkdir()
    path.write_text("old, world-readable")
    path.chmod(0o644)
    os.umask(0o022)
    write_private(path, "-----BEGIN PRIVATE KEY-----\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "-----BEGIN PRIVATE KEY-----\n"
    assert [p.name for p in path.parent.iterdir()] == ["server.key"]  # no temporary file left


def test_the_content_is_never_in_a_file_others_may_read_even_while_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:  # the moment the content is on disk, before the rename
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        real(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    write_private(tmp_path / "pw", b"secret")
    assert seen == [0o600]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "pw"
    write_private(path, "old")

    def broken(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_private(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["pw"]


def test_connect_resolves_only_the_source_password_from_its_environment_and_reads_no_file() -> None:
    import re

    from mcq.stack.services.connect import CONNECTOR_SECRETS

    assert re.fullmatch(CONNECTOR_SECRETS, "MCQ_SOURCE__PASSWORD")
    for name in ("MCQ_KAFKA__SASL_PASSWORD", "HOME", "MCQ_SOURCE__PASSWORDX", "XMCQ_SOURCE__PASSWORD"):
        assert not re.search(CONNECTOR_SECRETS, name), name
