"""What a benchmark with a world of its own starts from: a token, settings whose topic
prefix is its own, the environment for the ``mcq`` processes it starts, a scratch folder."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from mcq.config import Settings, load_settings


@dataclass(frozen=True)
class BenchRun:
    token: str
    settings: Settings
    env: dict[str, str]
    work: Path


def bench_run() -> BenchRun:
    """A run of its own; SIGTERM unwinds it (its world is removed on the way out)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    token = uuid.uuid4().hex[:8]
    settings = load_settings().model_copy(update={"topic_prefix": f"bench{token}"})
    env = {**os.environ, "MCQ_TOPIC_PREFIX": settings.topic_prefix}
    return BenchRun(token, settings, env, Path(tempfile.mkdtemp(prefix="mcq-bench-")))
