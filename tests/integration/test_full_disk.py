"""A ``file`` target whose disk fills up (issue 16, scenario 12): a real ENOSPC from a
small tmpfs the test mounts and fills. The listener waits, says why once (its log,
``mcq status``, ``mcq_listener_target_up``), acknowledges nothing it could not write,
and once space is freed the files hold every change's last state -- read back here
with a reader written for the test, not the adapter's."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from consumers.runtime.status import status_report
from mcq.change import Change
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import World, listen_process, make_world, produce, wait_for
from tests.support.listeners import random_stream

pytestmark = pytest.mark.faults


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: its own "disk full"."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the CI machine runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(path: Path) -> None:
    with path.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def _files_state(directory: Path) -> dict[tuple[int, str], dict[str, Any]]:
    """What an importer holds: the batch files in name order, each line setting or deleting its key."""
    state: dict[tuple[int, str], dict[str, Any]] = {}
    for path in sorted(directory.glob("T-*.jsonl")):
        for line in path.read_text().splitlines():
            c = json.loads(line)
            key = (int(c["person_id"]), c["aux_string"])
            if c["change_type"] == "DELETE":
                state.pop(key, None)
            else:
                state[key] = c["after"]
    return state


def _expected(changes: list[Change]) -> dict[tuple[int, str], dict[str, Any]]:
    state: dict[tuple[int, str], dict[str, Any]] = {}
    for c in changes:
        key = (c.key.person_id or 0, c.key.aux_string or "")
        if c.change_type == "DELETE":
            state.pop(key, None)
        else:
            state[key] = dict(c.after or {})
    return state


def _committed(w: World) -> dict[int, int]:
    consumer = Consumer({**w.settings.kafka.client_config(), "group.id": w.topics.group})
    try:
        got = consumer.committed([TopicPartition(w.phone_topic, p) for p in range(3)], timeout=10)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(w.phone_topic, p), timeout=10)[1] for p in range(3)}
    finally:
        consumer.close()
    return {t.partition: ends[t.partition] - t.offset for t in got}  # left unacknowledged, per partition


def _target_up(log: Path) -> float:
    match = re.search(r"health (http://[0-9.]+:\d+)", log.read_text())
    assert match, log.read_text()[-2000:]
    with urllib.request.urlopen(f"{match.group(1)}/metrics", timeout=10) as response:
        body = response.read().decode()
    found = re.search(r"^mcq_listener_target_up{[^}]*} ([0-9.]+)$", body, re.M)
    assert found, body
    return float(found.group(1))


@pytest.mark.timeout(300)
def test_a_full_disk_under_a_file_target_is_waited_for_said_once_and_every_change_written_once_space_is_freed(
    stack: Stack, settings: Settings, token: str, tmp_path: Path, small_disk: Path
) -> None:
    out = small_disk / "out"
    w = make_world(settings, token, tmp_path, adapter=f"{{type: file, settings: {{directory: '{out}'}}}}")
    first = random_stream(300, 100, seed=41)
    produce(w.settings, w.phone_topic, first)
    log = tmp_path / "listen.log"
    proc = listen_process(w, log=log)
    try:
        wait_for("the first files", lambda: _files_state(out) == _expected(first), 60)
        wait_for("the first commit", lambda: set(_committed(w).values()) == {0}, 60)
        _fill(small_disk / "filler")
        second = random_stream(600, 100, seed=42)
        produce(w.settings, w.phone_topic, second)
        wait_for("the listener to say the disk is full", lambda: "No space left on device" in log.read_text(), 60)

        def waiting() -> bool:
            [status] = status_report(w.settings, w.registry, [w.name])
            return status.verdict == "WAITING" and "No space left on device" in status.reason

        wait_for("mcq status to say why it waits", waiting, 60, 1)
        time.sleep(5)  # (a wait that flapped would say it again by now)
        text = log.read_text()
        assert text.count("target unavailable, waiting") == 1, text[-3000:]
        assert "target available again" not in text, text[-3000:]
        assert _target_up(log) == 0
        assert sum(_committed(w).values()) > 0, "a change acknowledged that no file holds"
        assert _files_state(out) == _expected(first)
        assert not list(out.glob(".*.tmp")), "a half-written file left behind"

        (small_disk / "filler").unlink()
        wait_for("every change in the files", lambda: _files_state(out) == _expected(first + second), 120)
        wait_for("everything acknowledged", lambda: set(_committed(w).values()) == {0}, 60)
        wait_for("the listener to say so", lambda: "target available again" in log.read_text(), 30)
        assert _target_up(log) == 1
        assert proc.poll() is None
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert "dead-lettered 0" in log.read_text() and "parked 0" in log.read_text()
