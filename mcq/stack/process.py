"""Processes the stack starts: detached, one process group each, tracked by pid file.

A service runs in its own session so that stopping it signals the whole group
(PostgreSQL's backends, for instance) and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def as_user(user: str | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a command as USER with USER's own groups only.

    ``subprocess``'s ``user=`` alone changes the uid and keeps the caller's groups: run from
    root, the service would keep root's group and its rights. None: as the caller.
    """
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


@dataclass
class ProcessHandle:
    """Where one service's pid and log live, and what its command line must contain."""

    name: str
    pid_file: Path
    log_file: Path
    marker: str
    """A string of the service's command line, so a recycled pid is not taken for ours."""
    _child: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    """The process when this handle started it: its liveness is then known for sure
    (a JVM's command line can be unreadable for an instant while its launcher re-executes)."""

    def pid(self) -> int | None:
        """The pid of the running service, or None when it is not running."""
        if self._child is not None:
            return self._child.pid if self._child.poll() is None else None
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid, self.marker) else None

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        user: str | None = None,
    ) -> int:
        """Start argv detached, appending its output to the log; return its pid."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"\n=== mcq: starting {self.name} at {time.strftime('%F %T')}: {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env),
                **as_user(user),
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        self._child = proc
        return proc.pid

    def stop(self, sig: signal.Signals, timeout_s: float = 30.0) -> bool:
        """Signal the service's process group, wait, then kill what remains.

        Returns True when a process was running.
        """
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        _signal_group(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _group_alive(pid):
            time.sleep(0.2)
        if _group_alive(pid):
            _signal_group(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _group_alive(pid):
                time.sleep(0.1)
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        self._child = None
        return True

    def tail(self, lines: int = 20) -> list[str]:
        """The last lines of the log file."""
        try:
            with self.log_file.open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 64 * 1024))
                data = fh.read().decode(errors="replace")
        except FileNotFoundError:
            return []
        return data.splitlines()[-lines:]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[0]


def _alive(pid: int, marker: str) -> bool:
    if _state(pid) in ("", "Z", "X"):
        return False
    if marker.startswith(EXE_MARKER):
        # a server that rewrites its process title over its arguments and environment
        # (Samba's "samba: root process") is known by its executable
        try:
            return os.readlink(f"/proc/{pid}/exe") == marker[len(EXE_MARKER) :]
        except OSError:
            return False
    return marker in _cmdline(pid)


EXE_MARKER = "exe:"
"""A service marker that names the executable of the process (the pid file says which one)."""


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        # fields: state ppid pgrp ...
        if int(fields[2]) == pgid and (fields[0] not in ("Z", "X") or _threads_left(entry)):
            members.append(int(entry.name))
    return members


def _threads_left(proc: Path) -> bool:
    """Whether a process whose main thread has exited still has threads tearing down: a
    killed JVM's main thread shows as a zombie while its other threads still hold its
    files (its listening ports) open."""
    try:
        return sum(1 for _ in (proc / "task").iterdir()) > 1
    except OSError:
        return False


def _group_alive(pgid: int) -> bool:
    _reap(pgid)
    return bool(_group_members(pgid))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _reap(pid: int) -> None:
    """Collect the exit status when the service is our own child (mcq stack up in-process)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
