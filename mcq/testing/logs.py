"""What the code under test logs, as the lines a terminal would show."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

OURS = ("mcq", "streams", "consumers")


class _Lines(logging.Handler):
    def __init__(self, seen: Callable[[str], None], level: int) -> None:
        super().__init__(level)
        self.seen = seen

    def emit(self, record: logging.LogRecord) -> None:
        self.seen(record.getMessage())


@contextmanager
def on_lines(seen: Callable[[str], None], *names: str, level: int = logging.INFO) -> Iterator[None]:
    """``seen(message)`` for each message our loggers (or ``names``) log at ``level`` and
    above while inside, in the thread that logs it. The handler sits on the loggers
    themselves: it sees their records even after a CLI run in this process turned their
    propagation off (mcq/logs.py)."""
    handler = _Lines(seen, level)
    loggers = [logging.getLogger(n) for n in names or OURS]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        if lg.getEffectiveLevel() > level:
            lg.setLevel(level)
        lg.addHandler(handler)
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, before, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(lvl)


@contextmanager
def log_lines(*names: str, level: int = logging.INFO) -> Iterator[list[str]]:
    """The messages our loggers (or ``names``) log at ``level`` and above while inside, in
    order."""
    lines: list[str] = []
    with on_lines(lines.append, *names, level=level):
        yield lines
