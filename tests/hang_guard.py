"""A pytest plugin (loaded by ``tests/conftest.py``): a test stuck where
its timeout cannot reach it ends the session with every thread's traceback.

pytest-timeout's signal is handled between Python instructions only, so a test stuck
inside a C call (librdkafka, libpq) outlives its timeout with nothing printed and holds
the session until CI's own limit ends it, blind (seen once in ``test_delivery``).
``MCQ_TEST_HANG_GRACE_S`` (default 120) after a test's timeout, faulthandler's own thread
writes every thread's traceback to the terminal and ends the session (exit status 1).
Half a minute before, ``tests/hang_watchdog.py`` (a process of its own) writes the
session's native stacks, with which thread holds the GIL (py-spy).
A stack the session started is left running, to be looked at.

The watchdog is a helper, never a reason to end a session: if it is gone (as once in CI, for
a reason that run's output did not show), that is said once, with how it ended, and
the session goes on with faulthandler's guard alone.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

_TERMINAL_FD = pytest.StashKey[int]()
_WATCHDOG = pytest.StashKey["subprocess.Popen[bytes]"]()
NATIVE_DUMP_BEFORE_S = 30
"""The native stacks are written this long before faulthandler ends the session."""


def pytest_configure(config: pytest.Config) -> None:
    # as pytest's faulthandler plugin: the terminal's stderr, before output is captured
    terminal = os.dup(sys.stderr.fileno())
    config.stash[_TERMINAL_FD] = terminal
    watchdog = Path(__file__).with_name("hang_watchdog.py")
    config.stash[_WATCHDOG] = subprocess.Popen(
        [sys.executable, str(watchdog), str(os.getpid())], stdin=subprocess.PIPE, stdout=terminal, stderr=terminal
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    watchdog = config.stash[_WATCHDOG]
    if watchdog.stdin is not None:
        with contextlib.suppress(OSError):
            watchdog.stdin.close()
    watchdog.wait(10)
    os.close(config.stash[_TERMINAL_FD])


def _tell(config: pytest.Config, line: str) -> None:
    watchdog = config.stash[_WATCHDOG]
    if watchdog.stdin is None or watchdog.stdin.closed:
        return  # gone, and said so
    try:
        watchdog.stdin.write(f"{line}\n".encode())
        watchdog.stdin.flush()
    except OSError:  # BrokenPipeError: the watchdog process has ended
        ended = watchdog.wait(10)
        how = f"signal {-ended}" if ended < 0 else f"exit status {ended}"
        os.write(
            config.stash[_TERMINAL_FD],
            f"\nhang guard: the watchdog process {watchdog.pid} ended ({how}); a hung test's native stacks "
            f"will not be written, faulthandler's tracebacks still will\n".encode(),
        )
        with contextlib.suppress(OSError):
            watchdog.stdin.close()


def timeout_of(item: pytest.Item) -> float:
    """The item's pytest-timeout limit: its marker, else ``--timeout``, else the ini value."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getoption("timeout", None) or item.config.getini("timeout") or 0)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    limit = timeout_of(item)
    if limit <= 0:
        return (yield)
    grace = float(os.environ.get("MCQ_TEST_HANG_GRACE_S", "120"))
    faulthandler.dump_traceback_later(limit + grace, exit=True, file=item.config.stash[_TERMINAL_FD])
    _tell(item.config, f"arm {max(limit, limit + grace - NATIVE_DUMP_BEFORE_S)}")
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()
        _tell(item.config, "disarm")
