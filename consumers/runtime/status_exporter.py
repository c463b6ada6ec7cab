"""``mcq status --serve``: the process monitor's verdicts as Prometheus gauges, checked every
so often, so alert rules fire on exactly what ``mcq status`` exits 1 for (DEAD, STUCK, dead
letters at the threshold, deletes at risk) instead of re-deriving them from each listener's
own metrics (a DEAD listener has no metrics to scrape).

Gauges, per listener: ``mcq_status_alert{kind}`` (1 while the alert holds: ``dead``,
``stuck``, ``dead_letters``, ``tombstones_at_risk``), ``mcq_status_pending``,
``mcq_status_oldest_pending_seconds``, ``mcq_status_dead_letters``,
``mcq_status_instances_alive``; and ``mcq_status_last_check_timestamp_seconds`` (a check
that stopped succeeding is itself an alert) and ``mcq_status_check_failures_total``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from consumers.runtime.status import ListenerStatus

log = logging.getLogger(__name__)

ALERT_KINDS = ("dead", "stuck", "dead_letters", "tombstones_at_risk")


class StatusGauges:
    """The gauges of one exporter, set from one ``status_report`` at a time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.alert = Gauge("mcq_status_alert", "1 while mcq status raises this alert", ["listener", "kind"], registry=r)
        self.pending = Gauge("mcq_status_pending", "Changes pending, all lanes", ["listener"], registry=r)
        self.oldest = Gauge(
            "mcq_status_oldest_pending_seconds", "Age of the oldest pending change", ["listener"], registry=r
        )
        self.dead_letters = Gauge(
            "mcq_status_dead_letters", "Dead letters not requeued or discarded", ["listener"], registry=r
        )
        self.alive = Gauge("mcq_status_instances_alive", "Instances with a live heartbeat", ["listener"], registry=r)
        self.checked = Gauge(
            "mcq_status_last_check_timestamp_seconds", "When the last check succeeded (epoch s)", registry=r
        )
        self.failures = Counter("mcq_status_check_failures", "Checks that could not be made", registry=r)
        self._known: set[str] = set()
        self.checked_once = False
        """A check has succeeded: the exporter is ready (its gauges say something)."""

    def observe(self, statuses: Iterable[ListenerStatus], now: float | None = None) -> None:
        seen = set()
        for status in statuses:
            name = status.name
            seen.add(name)
            holds = {
                "dead": status.verdict == "DEAD",
                "stuck": status.verdict == "STUCK",
                "dead_letters": status.dead_letter_alert is not None,
                "tombstones_at_risk": status.tombstones_at_risk is not None,
            }
            for kind in ALERT_KINDS:
                self.alert.labels(name, kind).set(1 if holds[kind] else 0)
            self.pending.labels(name).set(status.pending)
            self.oldest.labels(name).set(status.oldest_pending_age_s or 0)
            self.dead_letters.labels(name).set(status.dead_letters)
            self.alive.labels(name).set(len(status.alive))
        for gone in self._known - seen:  # a listener taken out of the registry: no stale alert
            for kind in ALERT_KINDS:
                self.alert.remove(gone, kind)
            for gauge in (self.pending, self.oldest, self.dead_letters, self.alive):
                gauge.remove(gone)
        self._known = seen
        self.checked.set(time.time() if now is None else now)
        self.checked_once = True


def check_every(
    gauges: StatusGauges, check: Callable[[], list[ListenerStatus]], every_s: float, stopping: threading.Event
) -> None:
    """Check, set the gauges, wait; a failed check is counted and logged, never fatal (the
    gauges keep their last values; the last-check timestamp says how old they are)."""
    while not stopping.is_set():
        try:
            gauges.observe(check())
        except Exception as exc:  # a broker away for a while: the next check tries again
            gauges.failures.inc()
            log.warning("mcq status: check failed: %s", exc)
        stopping.wait(every_s)
