"""mcq's log: standard :mod:`logging`, set up once per process by the shell that runs it.

Every module logs through ``logging.getLogger(__name__)``; nothing below the shells prints.
:func:`configure` sends the ``mcq``, ``streams`` and ``consumers`` loggers to

- the log file (``log.file``, default ``<stack.home>/logs/mcq.log``, rotated at 10 MB):
  the whole story, tracebacks included; an unexpected error's one line on the terminal
  names this file;
- with ``log.format: json`` also stderr, one JSON object per line (time, level, logger,
  message, exception), as a Kubernetes log collector reads it;
- with ``log.format: text`` and a :class:`TerminalHandler` from the shell, the terminal:
  each INFO line of ours on stdout, each warning and error on stderr, the message alone.
  Library code never prints and takes no callback to say something: it logs.

The libraries' own loggers (py4j, urllib3, httpx and httpx2, the Kafka clients) are kept to their
warnings, in the file only: no library noise on a user's terminal.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pythonjsonlogger.json import JsonFormatter

if TYPE_CHECKING:
    from mcq.config import LogSettings

OURS = ("mcq", "streams", "consumers", "bench")
NOISY = ("py4j", "urllib3", "httpx", "httpx2", "httpcore", "httpcore2", "confluent_kafka", "uvicorn", "asyncio")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"
_HANDLERS: list[logging.Handler] = []


def json_formatter() -> logging.Formatter:
    """One JSON object per record: ``time``, ``level``, ``logger``, ``message`` and, for an
    exception, ``exc_info`` with its traceback."""
    return JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger", "process": "pid"},
        json_ensure_ascii=False,
    )


SHOWN = "mcq_shown"
"""A record's attribute (``extra={SHOWN: True}``) saying the shell has printed it already."""


class TerminalHandler(logging.Handler):
    """Our INFO lines to ``out``, warnings and errors to ``err``: the message alone, as a
    person at a terminal reads it (the log file keeps time, level and logger). DEBUG
    stays in the file whatever ``log.level`` is."""

    def __init__(self, out: Callable[[str], None], err: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self._out, self._err = out, err

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, SHOWN, False):
            return
        try:
            (self._err if record.levelno >= logging.WARNING else self._out)(record.getMessage())
        except Exception:  # a closed terminal must not end the work
            self.handleError(record)


def configure(log: LogSettings, terminal: logging.Handler | None = None) -> Path | None:
    """Set up this process's log as ``log`` says (again: replace what an earlier call set).
    ``terminal`` (text format only) shows our lines to the person running the command.
    Returns the log file, or None when there is none (it cannot be created: the line that
    says so goes to stderr once)."""
    for handler in _HANDLERS:
        for name in (*OURS, *NOISY):
            logging.getLogger(name).removeHandler(handler)
        handler.close()
    _HANDLERS.clear()
    level = getattr(logging, log.level)
    handlers: list[logging.Handler] = []
    path = log.file
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            to_file = logging.handlers.RotatingFileHandler(path, maxBytes=10 << 20, backupCount=5, encoding="utf-8")
        except OSError as exc:
            print(f"mcq: no log file: {path}: {exc.strerror}", file=sys.stderr)
            path = None
        else:
            to_file.setFormatter(json_formatter() if log.format == "json" else logging.Formatter(TEXT_FORMAT))
            handlers.append(to_file)
    if log.format == "json":
        to_stderr = logging.StreamHandler(sys.stderr)
        to_stderr.setFormatter(json_formatter())
        handlers.append(to_stderr)
    ours = [*handlers, terminal] if terminal is not None and log.format == "text" else handlers
    for name in OURS:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.propagate = False  # never twice through a root handler someone else set
        for handler in ours:
            logger.addHandler(handler)
    quiet_libraries()
    for name in NOISY:
        logger = logging.getLogger(name)
        logger.propagate = False
        for handler in handlers[:1]:  # the file only
            logger.addHandler(handler)
    _HANDLERS.extend(ours)
    return path


def quiet_libraries() -> None:
    """The libraries' loggers (:data:`NOISY`) kept to their warnings, for a script that sets up
    plain :func:`logging.basicConfig` at INFO (a benchmark) rather than :func:`configure`:
    without it each schema registry request of httpx is a line on the terminal."""
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.WARNING)
