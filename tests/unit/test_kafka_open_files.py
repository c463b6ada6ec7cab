"""A local broker keeps a file open per partition and shuts down at the open-files limit;
`mcq stack up` warns while there is room (test runs each leave their topics behind)."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from mcq.config import Settings
from mcq.stack.services.kafka import Kafka, partition_dirs


def _broker(tmp_path: Path, partitions: int) -> Kafka:
    settings = Settings().model_copy(update={"stack": Settings().stack.model_copy(update={"home": tmp_path})})
    broker = Kafka(settings)
    broker.data_dir.mkdir(parents=True)
    for n in range(partitions):
        (broker.data_dir / f"tl{n // 3}.listener.T.applied-{n % 3}").mkdir()
    (broker.data_dir / "__cluster_metadata-0").mkdir()
    (broker.data_dir / "meta.properties").write_text("")
    (broker.data_dir / "not-a-partition-x").mkdir()
    return broker


def test_partitions_are_counted_by_their_directories(tmp_path: Path) -> None:
    assert partition_dirs(_broker(tmp_path, 7).data_dir) == 8  # the metadata log is one too
    assert partition_dirs(tmp_path / "nothing") == 0


def test_stack_up_warns_when_the_partitions_near_the_open_files_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = _broker(tmp_path, 599)
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1000, 1000))
    (warning,) = broker.warnings()
    assert warning.startswith("it holds 600 partitions against an open-files limit of 1,000 (ulimit -n)")
    assert "`mcq topics remove` under their prefix" in warning and "`make clean-stack`" in warning
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1001, 1001))
    assert broker.warnings() == []
