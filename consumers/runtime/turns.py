"""The real-time lane's turns inside a bulk batch.

A listener handles one batch at a time. A real-time change that arrives while a bulk batch
is being handled (decoded, judged, applied, its applied positions flushed and its offsets
committed: ~13 ms for 100 changes into a ``table`` target) used to wait for the whole of
it: beside a refresh of a million keys, real-time p99 was 3x its idle figure.

So a bulk batch offers the real-time lane a turn every ``every_s`` of its own work: between
records as it decodes them, before each of the chunks it applies them in (each chunk one
call of the adapter, sized from what the adapter's calls cost: about 2 ms of work, more
when a call's fixed cost would otherwise be over a third of it), and while it waits for
its flush. A turn takes what the real-time consumer has fetched
already (it never waits) and handles it as a batch of its own, with its own flush and
commit; the bulk batch then goes on where it was, its changes judged again against what
the turn applied (``Delivery``). The bulk batch still flushes and commits once: its
offsets are committed only after the target took every one of its chunks.

A turn that handled changes costs a flush and a commit of its own (a few ms here, ~90 ms on
a machine slowed by others). Under a stream of real-time changes, each produced as soon as
the one before is applied, a look every ``every_s`` gave the bulk batch 0.5 ms per turn: on
the slowed machine of 2026-12-05 a refresh applied 185 changes in 8 s beside 88 real-time
ones. So after a turn the bulk batch also works ``share`` of that turn's time before the
next look: the refresh keeps at least a quarter of the time under any real-time stream, and
a real-time change waits at most a third of a turn longer. A turn that found nothing costs
microseconds, and the next look comes after ``every_s`` as before.

Pure logic apart from the clock: the runtime gives the turn and reports each chunk's cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable

EVERY_S = 0.0005
"""Bulk work between two looks at the real-time lane (a look that finds nothing costs a
few microseconds). Beside a 100,000-change lane (bench/listener_lanes.py, 1,000 samples,
looks every 1 ms), looking at every record gave loaded p50 0.002-0.003 s and p99
0.008-0.010 s; every 2 ms gave 0.004-0.005 and 0.010-0.011 s. Most of what is left is not
the wait for a look: see BENCHMARKS.md."""


BULK_SHARE = 1 / 3
"""After a turn, the bulk batch's own work before the next look, as a share of the turn's time."""


class RealtimeTurns:
    """When a bulk batch lets the real-time lane in, and how many changes it applies per call."""

    def __init__(
        self,
        take: Callable[[], bool],
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        share: float = BULK_SHARE,
    ):
        self._take = take  # handles what the real-time lane has fetched; whether it had anything
        self.every_s = every_s
        self.share = share
        self._clock = clock
        self._since = clock()
        self._owed = every_s  # the bulk work due before the next look
        self._inside = False
        self._cost = CallCost()
        self._calls = 0
        self.spent_s = 0.0
        """Wall time spent in turns (their own batches), not the bulk batch's own work."""
        self.taken = 0
        """Turns that handled real-time records."""

    def start(self) -> None:
        """A bulk batch begins: its work is counted from now."""
        self._since = self._clock()

    def offer(self) -> bool:
        """Give the real-time lane its turn if the bulk batch has worked what it owes since the
        last one (``every_s``, or ``share`` of that turn's time when more); whether a turn
        handled anything. Never inside a turn."""
        if self._inside or self._clock() - self._since < self._owed:
            return False
        self._inside = True
        began = self._clock()
        try:
            took = self._take()
            self.taken += took
            return took
        finally:
            self._inside = False
            self._since = self._clock()
            self.spent_s += self._since - began
            self._owed = max(self.every_s, self.share * (self._since - began))

    def chunk(self, left: int) -> int:
        """How many of the ``left`` changes to give the adapter in its next call: about
        ``CHUNK_S`` of work, but never so few that a call's fixed cost (a transaction, a round
        trip) is more than a third of it. Sizes alternate a little around that (0.75x, 1.25x):
        calls of one size alone cannot tell a call's fixed cost from its cost per change."""
        self._calls += 1
        swing = 0.75 if self._calls % 2 else 1.25
        cost = self._cost.fit()
        if cost is None:
            return min(left, round(PROBE * swing))
        fixed, per = cost
        most = max(1.0, (CHUNK_S - fixed) / per, 2 * fixed / per)
        return max(1, min(left, round(most * swing)))

    def measured(self, changes: int, seconds: float) -> None:
        """One adapter call of ``changes`` took ``seconds``."""
        self._cost.add(changes, seconds)


CHUNK_S = 0.002
"""An adapter call's work in a bulk batch, the longest a real-time change waits for one."""

PROBE = 20
"""Changes per call while an adapter's costs are being learnt (15 and 25 alternately)."""


class CallCost:
    """An adapter call's cost as ``fixed + per * changes``, fitted by least squares over the
    recent calls (older ones fade). None until calls of different sizes were seen."""

    FADE = 0.98

    def __init__(self) -> None:
        self._w = self._n = self._t = self._nn = self._nt = 0.0

    def add(self, changes: int, seconds: float) -> None:
        if changes <= 0:
            return
        f = self.FADE
        self._w = f * self._w + 1
        self._n = f * self._n + changes
        self._t = f * self._t + seconds
        self._nn = f * self._nn + changes * changes
        self._nt = f * self._nt + changes * seconds

    def fit(self) -> tuple[float, float] | None:
        """(fixed seconds per call, seconds per change), or None while the sizes seen are too
        alike to tell them apart (their spread under a tenth of their mean)."""
        if self._w == 0:
            return None
        mean = self._n / self._w
        spread = self._w * self._nn - self._n * self._n  # w^2 times the sizes' variance
        if spread < (0.1 * mean * self._w) ** 2:
            return None
        per = (self._w * self._nt - self._n * self._t) / spread
        fixed = (self._t - per * self._n) / self._w
        if per <= 0:  # noise: bigger calls were not dearer; the whole cost on the changes
            return 0.0, self._t / self._n
        return max(fixed, 0.0), per
