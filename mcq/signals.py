"""SIGTERM and SIGINT as a long-running command's request to stop (a pod's termination, a
Ctrl-C): the work in flight finishes, then the command ends."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def stop_on_signals(stop: Callable[[], None], say: Callable[[str], None], who: str, after: str) -> Iterator[None]:
    """While inside: SIGTERM/SIGINT call ``stop`` and say ``<who>: SIGTERM: stopping after
    <after>``; the previous handlers are back afterwards."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum: int, frame: object) -> None:
        say(f"{who}: {signal.Signals(signum).name}: stopping after {after}")
        stop()

    for s in previous:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
