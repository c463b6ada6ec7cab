"""Each listener instance serves ``/livez``, ``/readyz`` and Prometheus ``/metrics``
(``mcq/health.py``): its metrics."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from mcq.health import HealthAddressTaken, HealthServer

__all__ = ["HealthAddressTaken", "HealthServer", "ListenerMetrics"]


class ListenerMetrics:
    """One registry per instance (several runtimes may share a process in tests)."""

    def __init__(self, listener: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"listener": listener}
        self.changes = Counter(
            "mcq_listener_changes", "Changes handled, by outcome", ["listener", "outcome"], registry=self.registry
        )
        self.pending = Gauge(
            "mcq_listener_pending", "Changes waiting, by lane", ["listener", "lane"], registry=self.registry
        )
        self.target_up = Gauge(
            "mcq_listener_target_up", "1 when the target answers", ["listener"], registry=self.registry
        )
        self.removed = Counter(
            "mcq_listener_removed",
            "Times the consumer group removed this instance during a batch (max_poll_interval_s overrun)",
            ["listener", "lane"],
            registry=self.registry,
        )
        self.turns = Counter(
            "mcq_listener_realtime_turns",
            "Real-time batches handled inside a bulk batch (a real-time change that did not wait for it)",
            ["listener"],
            registry=self.registry,
        )
        self.last_applied = Gauge(
            "mcq_listener_last_applied_timestamp_seconds",
            "When a change was last applied",
            ["listener"],
            registry=self.registry,
        )
        self._labels = labels
        self._counted: dict[str, Any] = {}  # outcome -> its labelled counter
        self._last_applied: Any = None

    def applied_at(self, when: float) -> None:
        """When a change was last applied (set for every change applied: its labelled
        gauge is looked up once)."""
        if self._last_applied is None:
            self._last_applied = self.last_applied.labels(**self._labels)
        self._last_applied.set(when)

    def count(self, outcome: str, n: int = 1) -> None:
        if n:
            child = self._counted.get(outcome)
            if child is None:  # labels() validates and hashes its arguments: 11% of a table listener's load
                child = self._counted[outcome] = self.changes.labels(outcome=outcome, **self._labels)
            child.inc(n)
