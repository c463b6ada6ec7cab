"""Names of the ``file`` adapter's batch files, which sort in the order they were written.

An importer applies the files in name order, so a file that sorts before one written
earlier makes it apply an older state last. A name is therefore made from one clock
reading (the UTC date and time and its nanoseconds come from the same number, never
from two calls that a second boundary can fall between) and a sequence number that
grows with every name. The time never goes back either: when the wall clock steps back
(NTP, a VM resumed), the last time used is kept, and the sequence number alone orders
the names. Every name is greater than the one before, in byte order, since all fields
have a fixed width::

    <listener>-20240131T235959-999999999-000000000042
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

SEQUENCE_DIGITS = 12


class FileNamer:
    """Batch file names of one listener, strictly increasing (one per adapter instance)."""

    def __init__(self, listener: str, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.listener = listener
        self._clock_ns = clock_ns
        self._last_ns = 0
        self._sequence = 0
        self._lock = threading.Lock()

    def next(self) -> str:
        """The next name (without extension)."""
        with self._lock:
            now = max(self._clock_ns(), self._last_ns)  # one reading; never earlier than the last
            self._last_ns = now
            self._sequence += 1
            seconds, fraction = divmod(now, 10**9)
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds))
            return f"{self.listener}-{stamp}-{fraction:09d}-{self._sequence:0{SEQUENCE_DIGITS}d}"
