"""What a user installs, built from this checkout and run outside it against the real local
stack: the wheel in a fresh virtualenv (test_wheel.py), the image under podman
(test_image.py). Slow (a wheel of Spark installed, an image built), so a suite of its own:
``make package``, which CI runs after ``make test``."""

from __future__ import annotations

import os
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
    """The distribution's wheel, built from the checkout as ``pip wheel .`` builds it."""
    out = tmp_path_factory.mktemp("dist")
    ok(run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, PROJECT_ROOT], timeout=600))
    (built,) = out.glob("meta_change_queue-*.whl")
    return built


def user_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a user's shell on this machine: nothing of the checkout's virtualenv
    or source path, the local stack's home and jars named as a user names them."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    env.update(MCQ_HOME=str(settings.stack.home), MCQ_STACK__JVM_CACHE=str(settings.stack.jvm_cache), **extra)
    return env
