"""Progress of a Spark batch job: one line every few seconds while stages run (tasks done
of tasks, per active stage), from Spark's status tracker -- the console progress bar is
off (streams/session.py), and a job over a million keys must not look hung."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@contextmanager
def stage_progress(
    spark: SparkSession, label: str, report: Callable[[str], None], every_s: float = 5.0
) -> Iterator[None]:
    """Report ``<label>: stage N: done/total tasks`` while the block runs."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def watch() -> None:
        last = ""
        while not stop.wait(every_s):
            parts = []
            for stage in sorted(tracker.getActiveStageIds()):
                info = tracker.getStageInfo(stage)
                if info is not None:
                    parts.append(f"stage {stage}: {info.numCompletedTasks}/{info.numTasks} tasks")
            line = "; ".join(parts)
            if line and line != last:
                report(f"{label}: {line}")
                last = line

    thread = threading.Thread(target=watch, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every_s + 1)
