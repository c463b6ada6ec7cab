"""Progress of a Spark batch job, from Spark's status tracker (Spark's own console bar is
off: streams/session.py), so a job over a million keys never looks hung: on a terminal
(``show_bars``, set by the CLI) a bar per active stage, tasks done of tasks; elsewhere
(a log, a pod) one line every few seconds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console

_bars: Console | None = None


def show_bars(console: Console | None) -> None:
    """Draw progress bars on CONSOLE (a terminal) instead of writing lines; None: lines."""
    global _bars
    _bars = console


@contextmanager
def stage_progress(
    spark: SparkSession, label: str, report: Callable[[str], None], every_s: float = 5.0
) -> Iterator[None]:
    """Report ``<label>: stage N: done/total tasks`` while the block runs (bars on a terminal)."""
    if _bars is not None:
        with _stage_bars(spark, label, _bars):
            yield
        return
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


@contextmanager
def _stage_bars(spark: SparkSession, label: str, console: Console, every_s: float = 0.5) -> Iterator[None]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        tasks: dict[int, TaskID] = {}

        def watch() -> None:
            while not stop.wait(every_s):
                active = set(tracker.getActiveStageIds())
                for stage in sorted(active):
                    info = tracker.getStageInfo(stage)
                    if info is None:
                        continue
                    if stage not in tasks:
                        tasks[stage] = progress.add_task(f"{label}: stage {stage}", total=info.numTasks)
                    progress.update(tasks[stage], completed=info.numCompletedTasks, total=info.numTasks)
                for stage in [s for s in tasks if s not in active]:
                    progress.remove_task(tasks.pop(stage))

        thread = threading.Thread(target=watch, name="spark-progress-bars", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=every_s + 1)
