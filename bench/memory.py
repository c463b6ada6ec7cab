"""Peak resident memory of a process and every process it started (the normaliser's Spark
JVM is a child of its Python process), sampled from /proc while it runs.

``ru_maxrss`` from ``wait4`` is the largest single process of the tree, not their sum;
the sum is what a container's memory limit counts."""

from __future__ import annotations

import threading
from pathlib import Path


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants now (0 once it is gone)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, StopIteration, ValueError):
            continue  # gone meanwhile, or a kernel thread without VmRSS
    return total


class PeakRss:
    """``with PeakRss(pid) as peak: ...``; then ``peak.bytes``: the largest sum seen."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.pid, self.every_s, self.bytes = pid, every_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.bytes = max(self.bytes, tree_rss(self.pid))
            self._stop.wait(self.every_s)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mib(self) -> float:
        return self.bytes / 2**20
