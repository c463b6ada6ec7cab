"""Progress of a Spark batch job, from Spark's status tracker (Spark's own console bar is
off: streams/session.py), so a job over a million keys never looks hung: on a terminal
(``show_bars``, set by the CLI) a bar per active stage, tasks done of tasks; elsewhere
(a log, a pod) one line every few seconds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console

_bars: Console | None = None


def show_bars(console: Console | None) -> None:
    """Draw progress bars on CONSOLE (a terminal) instead of writing lines; None: lines."""
    global _bars
    _bars = console


@contextmanager
def stage_progress(spark: SparkSession, label: str, every_s: float = 5.0) -> Iterator[None]:
    """Report ``<label>: stage N: done/total tasks`` while the block runs (bars on a terminal)."""
    tracker = spark.sparkContext.statusTracker()

    def stages() -> list[tuple[int, int, int]]:
        """(stage, tasks done, tasks) of each active stage."""
        out = []
        for stage in sorted(tracker.getActiveStageIds()):
            info = tracker.getStageInfo(stage)
            if info is not None:
                out.append((stage, info.numCompletedTasks, info.numTasks))
        return out

    if _bars is not None:
        with _bars_of(stages, label, _bars):
            yield
        return
    last = [""]

    def line() -> None:
        text = "; ".join(f"stage {stage}: {done}/{total} tasks" for stage, done, total in stages())
        if text and text != last[0]:
            log.info(f"{label}: {text}")
            last[0] = text

    with _every(every_s, line):
        yield


@contextmanager
def _bars_of(stages: Callable[[], list[tuple[int, int, int]]], label: str, console: Console) -> Iterator[None]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        tasks: dict[int, TaskID] = {}

        def draw() -> None:
            active = stages()
            for stage, done, total in active:
                if stage not in tasks:
                    tasks[stage] = progress.add_task(f"{label}: stage {stage}", total=total)
                progress.update(tasks[stage], completed=done, total=total)
            for stage in [s for s in tasks if s not in {a[0] for a in active}]:
                progress.remove_task(tasks.pop(stage))

        with _every(0.5, draw):
            yield


@contextmanager
def _every(every_s: float, fn: Callable[[], None]) -> Iterator[None]:
    """Call FN every EVERY_S seconds in a thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            fn()

    thread = threading.Thread(target=loop, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every_s + 1)
