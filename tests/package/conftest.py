"""What a user installs, built from this checkout and run outside it against the real local
stack: the wheel in a fresh virtualenv (test_wheel.py), the image under podman
(test_image.py). Slow (a wheel of Spark installed, an image built), so a suite of its own:
``make package``, which CI runs after ``make test``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcq.config import Settings
from tests import PROJECT_ROOT


def run(args: list[str | Path], *, timeout: float, **kw: object) -> subprocess.CompletedProcess[str]:
    """A command whose output is kept for the assertion's message."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload,no-any-return]


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (
        f"{' '.join(done.args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The distribution's wheel, built as ``pip wheel .`` builds it from a copy of the
    checkout's files (tracked or new, not ignored; links kept): nothing of an earlier
    build's ``build/`` gets in, and the checkout is left as it was."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    files = ok(run(["git", "ls-files", "-z", "-co", "--exclude-standard"], timeout=60, cwd=PROJECT_ROOT))
    for name in filter(None, files.split("\0")):
        src, dst = PROJECT_ROOT / name, source / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)
    ok(run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, source], timeout=600))
    (built,) = out.glob("meta_change_queue-*.whl")
    return built


def user_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a user's shell on this machine: nothing of the checkout's virtualenv
    or source path, the local stack's home and jars named as a user names them."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    env.update(MCQ_HOME=str(settings.stack.home), MCQ_STACK__JVM_CACHE=str(settings.stack.jvm_cache), **extra)
    return env
