"""Whether a listener's target takes changes, and waiting for it when it does not.

An unavailable target (connection refused, authentication, a full disk) is waited for
with back-off, change by change, with nothing parked: one line when it goes, a slow
reminder, and one line once a change has been applied again -- not when it merely
answers (a full disk lets the directory be probed and refuses every write). A wait that
follows an answer with no change applied since continues the same outage and its
back-off. Readiness (``/readyz``) and the ``target_up`` metric follow.

Testable without servers: give it any object with ``open``, ``ready`` and
``apply_batch`` (``tests/unit/test_listener_delivery.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from consumers.exceptions import AdapterError, TargetUnavailable
from consumers.runtime.parking import backoff_s

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from consumers.adapter import Adapter
    from mcq.change import Change

WAIT_REMINDER_S = 60.0
"""While the target is down: one line when it goes, one when it is back, and this reminder."""


class Abandon(Exception):
    """Stop was asked while the target is down: the batch in flight is left uncommitted."""


class TargetWatch:
    """The target's availability as a listener instance sees it."""

    def __init__(
        self,
        name: str,
        adapter: Adapter,
        stop: threading.Event,
        on_wait: Callable[[str], None] = lambda detail: None,
        on_state: Callable[[bool], None] = lambda up: None,
    ) -> None:
        self.name = name
        self.adapter = adapter
        self.up = True
        self.waited_s = 0.0
        """Time spent waiting for the target since the listener started (a batch's pacing
        leaves it out)."""
        self._stop = stop
        self._on_wait = on_wait  # each turn of a wait: the loop is alive, its heartbeat says why it waits
        self._on_state = on_state  # up or down: the target_up metric
        self._down_since: float | None = None  # since when it is down (said), until a change is applied
        self._reminded_at = 0.0
        self._attempt = 0

    def try_batch(self, changes: list[Change]) -> list[AdapterError | None]:
        """The adapter's outcomes; an adapter that raises 'unavailable' (on reconnecting,
        say) instead of answering it per change is taken at its word for the whole batch."""
        try:
            outcomes = self.adapter.apply_batch(changes)
        except TargetUnavailable as exc:
            return [exc] * len(changes)
        if self._down_since is not None and not any(isinstance(o, TargetUnavailable) for o in outcomes):
            self._proven()  # it took (or judged) every change: the outage is over
        return outcomes

    def wait(self, error: TargetUnavailable | None, give_up: Callable[[], bool] | None = None) -> None:
        """Back off until the target answers; the loop's work stays where it is. ``error``
        None: ask the target first. ``give_up`` ends the wait early (a change that has
        expired meanwhile goes to the dead letters). Raises :class:`Abandon` when the
        listener is asked to stop meanwhile."""
        began = time.monotonic()
        try:
            self._wait(error, give_up)
        finally:
            self.waited_s += time.monotonic() - began

    def _wait(self, error: TargetUnavailable | None, give_up: Callable[[], bool] | None) -> None:
        while True:
            if give_up is not None and give_up():
                return
            if error is None:
                try:
                    self.adapter.open()
                    if self.adapter.ready():
                        break
                    error = TargetUnavailable("not ready")
                except TargetUnavailable as exc:
                    error = exc
            now = time.monotonic()
            if self._down_since is None:
                log.warning(f"listener {self.name}: target unavailable, waiting: {error}")
                self._down_since = self._reminded_at = now
                self._attempt = 0
            elif now - self._reminded_at >= WAIT_REMINDER_S:  # the change of state, then a slow reminder
                log.warning(
                    f"listener {self.name}: still waiting for the target ({now - self._down_since:.0f} s): {error}"
                )
                self._reminded_at = now
            self._set_up(False)
            self._on_wait(str(error))
            if self._stop.wait(backoff_s(self._attempt, 0.5, 15.0)):
                raise Abandon()
            self._attempt += 1
            error = None
        self._set_up(True)

    def _set_up(self, up: bool) -> None:
        self.up = up
        self._on_state(up)

    def _proven(self) -> None:
        """The target answered a batch: an outage said before is over."""
        if self._down_since is not None:
            log.info(f"listener {self.name}: target available again after {time.monotonic() - self._down_since:.0f} s")
            self._down_since = None
