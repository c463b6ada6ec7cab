"""A pytest plugin (loaded by ``tests/conftest.py``): a test stuck where
its timeout cannot reach it ends the session with every thread's traceback.

pytest-timeout's signal is handled between Python instructions only, so a test stuck
inside a C call (librdkafka, libpq) outlives its timeout with nothing printed and holds
the session until CI's own limit ends it, blind (seen once in ``test_delivery``).
``MCQ_TEST_HANG_GRACE_S`` (default 120) after a test's timeout, faulthandler's own thread
writes every thread's traceback to the terminal and ends the session (exit status 1).
A stack the session started is left running, to be looked at.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Generator

import pytest

_TERMINAL_FD = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    # as pytest's faulthandler plugin: the terminal's stderr, before output is captured
    config.stash[_TERMINAL_FD] = os.dup(sys.stderr.fileno())


def pytest_unconfigure(config: pytest.Config) -> None:
    os.close(config.stash[_TERMINAL_FD])


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
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()
