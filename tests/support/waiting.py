"""Waiting in a test for what a process does on its own time."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(deadline: float, check: Callable[[], None], every_s: float = 2.0) -> None:
    """``check`` passes before ``deadline`` (monotonic), or its last failure is raised."""
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(every_s)
