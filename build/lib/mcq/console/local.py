"""The console of the local stack (``make run``): a local admin whose password the stack
keeps in a file only its owner can read, and the console run in the background beside
the stack's services (``mcq stack down`` stops it too)."""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

import httpx
from pydantic import SecretStr

from mcq.config import ConsoleUser, Settings
from mcq.console.auth import hash_password
from mcq.stack.process import ProcessHandle

LOCAL_ADMIN = "admin"


def password_file(settings: Settings) -> Path:
    return settings.stack.home / "conf" / "console-admin.password"


def with_local_admin(settings: Settings) -> Settings:
    """SETTINGS whose console has the local stack's admin (made once, its password in
    ``password_file``, mode 0600), when no user is configured."""
    if settings.console.users:
        return settings
    path = password_file(settings)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(18) + "\n")
    user = ConsoleUser(password_hash=SecretStr(hash_password(path.read_text().strip())), role="admin")
    console = settings.console.model_copy(update={"users": {LOCAL_ADMIN: user}})
    return settings.model_copy(update={"console": console})


def handle(settings: Settings) -> ProcessHandle:
    home = settings.stack.home
    return ProcessHandle(
        name="console",
        pid_file=home / "run" / "console.pid",
        log_file=home / "logs" / "console.log",
        marker="mcq.cli console",
    )


def start_background(settings: Settings, bind: str, timeout_s: float = 60.0) -> int:
    """Start ``mcq console`` detached (its log in ``<home>/logs/console.log``); wait until it
    answers; its pid. A console already running is left alone."""
    h = handle(settings)
    running = h.pid()
    if running is not None:
        return running
    argv = [sys.executable, "-m", "mcq.cli", "console", "--bind", bind, "--local-admin"]
    pid = h.spawn(argv, env=dict(os.environ), cwd=Path.cwd())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if h.pid() is None:
            raise RuntimeError(f"the console exited at once; its log: {h.log_file}")
        try:
            if httpx.get(f"http://{bind}/healthz", timeout=2).status_code == 200:
                return pid
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the console did not answer at http://{bind} within {timeout_s:.0f} s; its log: {h.log_file}")
