"""The console's jobs: an action from a listener's page (refresh, flush, replay, reconcile)
runs as the same ``mcq`` command an operator would type, in its own process, its output
written to a log the job's page shows while it runs (its progress) and after (its summary).

A job is the command's own behaviour, refusals included (``replay`` refuses while the
listener's group has live members, naming them); the console adds who started it and when.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Job:
    id: str
    who: str
    action: str
    listener: str
    argv: list[str]
    log: Path
    started: float = field(default_factory=time.time)
    ended: float | None = None
    returncode: int | None = None

    @property
    def state(self) -> str:
        if self.returncode is None:
            return "running"
        return "done" if self.returncode == 0 else f"failed (exit {self.returncode})"

    @property
    def command(self) -> str:
        return "mcq " + " ".join(self.argv)

    def output(self, tail: int = 400) -> str:
        if not self.log.is_file():
            return ""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-tail:])


class Jobs:
    """The jobs this console started (kept while it runs; their logs stay on disk)."""

    def __init__(self, directory: Path, env: dict[str, str] | None = None) -> None:
        self.directory = directory
        self.env = env
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def start(self, who: str, action: str, listener: str, argv: list[str]) -> Job:
        job_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        self.directory.mkdir(parents=True, exist_ok=True)
        job = Job(job_id, who, action, listener, argv, self.directory / f"{job_id}.log")
        out = job.log.open("ab")
        out.write(f"$ {job.command}\n".encode())
        out.flush()
        env = {**os.environ, **(self.env or {}), "COLUMNS": "160", "NO_COLOR": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "mcq.cli", *argv], stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()

        def wait() -> None:
            job.returncode = proc.wait()
            job.ended = time.time()

        threading.Thread(target=wait, name=f"job-{job_id}", daemon=True).start()
        with self._lock:
            self._jobs[job_id] = job
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def all(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def of(self, listener: str) -> list[Job]:
        with self._lock:
            return sorted((j for j in self._jobs.values() if j.listener == listener), key=lambda j: -j.started)
