"""Process handling of the stack: a stopped service leaves no process behind, and a
recycled pid is never taken for ours."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from mcq.stack.process import ProcessHandle


def _handle(tmp_path: Path, marker: str) -> ProcessHandle:
    return ProcessHandle("demo", tmp_path / "run" / "demo.pid", tmp_path / "logs" / "demo.log", marker)


def test_stop_kills_the_whole_process_group_including_children(tmp_path: Path) -> None:
    marker = f"mcq-test-{os.getpid()}-{time.monotonic_ns()}"
    handle = _handle(tmp_path, marker)
    # a parent that ignores SIGTERM and a child that would outlive it
    script = (
        f"import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"subprocess.Popen(['sleep', '300']); time.sleep(300)  # {marker}"
    )
    pid = handle.spawn([sys.executable, "-c", script], os.environ, cwd=tmp_path)
    time.sleep(0.5)
    assert handle.pid() == pid
    assert handle.stop(signal.SIGTERM, timeout_s=1.0) is True
    assert handle.pid() is None
    assert not handle.pid_file.exists()
    leftovers = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _pgrp(p) == pid]
    assert leftovers == []


def _pgrp(proc: Path) -> int | None:
    """The process group of a live process (a zombie has already exited: None)."""
    try:
        fields = (proc / "stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[2])


def test_a_pid_file_naming_someone_elses_process_is_not_running(tmp_path: Path) -> None:
    handle = _handle(tmp_path, "a-marker-no-process-has")
    handle.pid_file.parent.mkdir(parents=True)
    handle.pid_file.write_text(f"{os.getpid()}\n")  # alive, but not ours
    assert handle.pid() is None
    assert handle.stop(signal.SIGTERM) is False


def test_output_goes_to_the_log_and_tail_reads_it_back(tmp_path: Path) -> None:
    marker = f"mcq-log-{time.monotonic_ns()}"
    handle = _handle(tmp_path, marker)
    handle.spawn([sys.executable, "-c", f"print('hello from {marker}')"], os.environ, cwd=tmp_path)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("hello from" in ln for ln in handle.tail()):
        time.sleep(0.1)
    assert any(f"hello from {marker}" in ln for ln in handle.tail())


def test_a_kraft_cluster_id_never_starts_with_a_dash_and_is_a_base64_uuid() -> None:
    """kafka-storage reads an id starting with "-" as an option (1 in 64 ids would)."""
    import base64
    from unittest.mock import patch

    from mcq.stack.services import new_cluster_id

    dashed = uuid.UUID(bytes=base64.urlsafe_b64decode("-_wUzRnGQtK8-qxW-3wydA=="))
    with patch("mcq.stack.services.kafka.uuid.uuid4", side_effect=[dashed, uuid.UUID(int=7)]):
        assert new_cluster_id() == base64.urlsafe_b64encode(uuid.UUID(int=7).bytes).decode().rstrip("=")
    for _ in range(2000):
        cid = new_cluster_id()
        assert not cid.startswith("-") and len(base64.urlsafe_b64decode(cid + "==")) == 16


def _someone_else() -> pwd.struct_passwd | None:
    """A user other than root whose primary group is not root's (to run a service as)."""
    for name in ("postgres", "nobody", "daemon"):
        with contextlib.suppress(KeyError):
            pw = pwd.getpwnam(name)
            if pw.pw_uid != 0 and pw.pw_gid != 0:
                return pw
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can start a service as another user")
def test_a_service_run_as_another_user_has_that_users_groups_not_roots(tmp_path: Path) -> None:
    pw = _someone_else()
    if pw is None:
        pytest.skip("no user other than root on this machine")
    tmp_path.chmod(0o777)
    handle = _handle(tmp_path, "id -G")
    handle.spawn(["sh", "-c", "id -u; id -G"], os.environ, cwd=tmp_path, user=pw.pw_name)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and handle.pid() is not None:
        time.sleep(0.05)
    uid, groups = handle.log_file.read_text().splitlines()[-2:]
    assert int(uid) == pw.pw_uid
    assert groups.split() == [str(pw.pw_gid)]
