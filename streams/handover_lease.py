"""What two normaliser instances of one checkpoint share on disk for a hand-over
(``streams/handover.py``): the running one's lease (``handover/owner.json``, beaten every
second), a new one's ask (``request.json``) and the old one's answer (``done.json``), and the
copy of the real-time checkpoint the new one's queries start from. No Spark here."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

LEASE_S = 10.0
"""A lease not beaten for this long is a crashed instance's."""
BEAT_S = 1.0


def new_instance() -> dict[str, Any]:
    return {"id": uuid.uuid4().hex[:12], "pid": os.getpid(), "host": socket.gethostname()}


def _dir(checkpoint: Path) -> Path:
    return checkpoint / "handover"


def _write(path: Path, content: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_text(path, json.dumps(content))


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)  # whole or not at all: another instance reads it


def _read(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def holder(checkpoint: Path, me: dict[str, Any]) -> dict[str, Any] | None:
    """The other instance that holds the lease on ``checkpoint`` and is alive, if any."""
    owner = _read(_dir(checkpoint) / "owner.json")
    if owner is None or owner.get("id") == me["id"]:
        return None
    if time.time() - float(owner.get("beat", 0)) > LEASE_S:
        return None
    if owner.get("host") == me["host"] and not alive(owner.get("pid")):
        return None  # gone: a crash on this host
    return owner


def alive(pid: object) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, killed and not yet reaped, does not)."""
    try:
        os.kill(int(str(pid)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, ValueError):
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class Lease:
    """This instance's lease on a checkpoint, beaten every ``BEAT_S`` by a thread."""

    def __init__(self, checkpoint: Path, me: dict[str, Any]) -> None:
        self.path = _dir(checkpoint) / "owner.json"
        self.me = me
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self) -> None:
        if self._thread is not None:
            return
        self._beat()
        self._thread = threading.Thread(target=self._run, name="mcq-normalize-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        _write(self.path, {**self.me, "beat": time.time()})

    def _run(self) -> None:
        while not self._stop.wait(BEAT_S):
            with contextlib.suppress(OSError):
                self._beat()

    def release(self) -> None:
        """Stop beating and give the lease up (a clean stop or a hand-over)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        owner = _read(self.path)
        if owner is not None and owner.get("id") == self.me["id"]:
            with contextlib.suppress(OSError):
                self.path.unlink()


def ask(checkpoint: Path, me: dict[str, Any]) -> None:
    """Ask the running instance to hand over to ``me``."""
    with contextlib.suppress(OSError):
        (_dir(checkpoint) / "done.json").unlink()
    _write(_dir(checkpoint) / "request.json", {**me, "at": time.time()})


def asked(checkpoint: Path, me: dict[str, Any]) -> dict[str, Any] | None:
    """The instance that asked ``me`` (the running one) to hand over, if one did."""
    request = _read(_dir(checkpoint) / "request.json")
    return request if request is not None and request.get("id") != me["id"] else None


def answer(
    checkpoint: Path, me: dict[str, Any], to: dict[str, Any], since_ms: int, flushed: bool, fences: str | None = None
) -> None:
    """The running instance has stopped writing for ``to``; what its queries wrote after
    their last checkpoints was written after ``since_ms``; ``fences``: what it wrote, as
    its gate counted (``fence_lines``' format), when Kafka acknowledged all of it."""
    done = {"from": me, "to": to["id"], "since_ms": since_ms, "flushed": flushed, "fences": fences}
    _write(_dir(checkpoint) / "done.json", done)
    with contextlib.suppress(OSError):
        (_dir(checkpoint) / "request.json").unlink()


def wait_answer(
    checkpoint: Path, me: dict[str, Any], old: dict[str, Any], stopped: Callable[[], bool], poll_s: float = 0.05
) -> dict[str, Any] | None:
    """The old instance's answer to ``me``; None when it died first (its lease went stale)
    or ``stopped`` says this instance is stopping."""
    while not stopped():
        gone = holder(checkpoint, me) is None  # looked at first: an answer comes before the lease goes
        done = _read(_dir(checkpoint) / "done.json")
        if done is not None and done.get("to") == me["id"]:
            return done
        if gone:
            return None
        time.sleep(poll_s)
    return None


CLAIM_S = 60.0
"""A take-over claimed by an instance that holds no lease this long after is void."""


def claim(checkpoint: Path, me: dict[str, Any], old: dict[str, Any]) -> bool:
    """Claim the take-over from ``old`` (gone): True for one standby only, when two wait."""
    path = _dir(checkpoint) / f"claim.{old.get('id')}"
    with contextlib.suppress(OSError):
        if time.time() - path.stat().st_mtime > CLAIM_S and holder(checkpoint, me) is None:
            path.unlink()  # its claimer died before it held the lease
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(me))
    return True


def copy_checkpoint(checkpoint: Path) -> tuple[Path, int]:
    """A copy of the real-time queries' checkpoints for a take-over's queries, and when
    the oldest batch not committed in it began (ms): what was written since may be the
    old instance's, in a batch the copy does not know as committed."""
    from streams.checkpoint import clear_torn_writes, realtime_dir

    source = realtime_dir(checkpoint)
    copy = checkpoint / f"realtime.{uuid.uuid4().hex[:8]}"
    if source.is_dir():
        shutil.copytree(source, copy)
    else:
        copy.mkdir(parents=True)
    clear_torn_writes(copy)
    since = time.time()
    for query in [p for p in copy.iterdir() if p.is_dir()]:
        commits = [p for p in (query / "commits").glob("[0-9]*") if p.name.isdigit()]
        newest = max(commits, key=lambda p: int(p.name)) if commits else query / "metadata"
        with contextlib.suppress(OSError):
            since = min(since, newest.stat().st_mtime)
    return copy, int(since * 1000)


def make_current(checkpoint: Path, copy: Path) -> None:
    """The take-over's copy is the real-time checkpoint from now on; the old one goes."""
    from streams.checkpoint import REALTIME_POINTER, realtime_dir

    before = realtime_dir(checkpoint)
    _write_text(checkpoint / REALTIME_POINTER, copy.name)
    if before != copy:
        shutil.rmtree(before, ignore_errors=True)
