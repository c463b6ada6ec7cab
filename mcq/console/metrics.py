"""The console's Prometheus ``/metrics``: requests by route template (never by a listener's
name, so the series stay few), their duration, logins and actions by outcome (what the
audit log records), and the jobs this console started, by action and state.

A scraper needs no login to read it, as for ``/healthz``: it holds counts, no names of
users, listeners or keys.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""HTTP methods counted by name; any other a client sends is counted as ``other``."""

if TYPE_CHECKING:
    from mcq.console.jobs import Jobs


def outcome_class(outcome: str) -> str:
    """``ok``, ``started``, ``refused``, ``failed``...: an audit outcome's first word (what
    follows the colon names things)."""
    return outcome.split(":", 1)[0].strip() or "unknown"


class _JobsCollector(Collector):
    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        what = "Jobs this console started and still lists, by action and state"
        family = GaugeMetricFamily("mcq_console_jobs", what, labels=["action", "state"])
        counts = Tally((job.action, job.state.split(" ", 1)[0]) for job in self.jobs.all())  # "failed (exit 2)"
        for (action, state), n in sorted(counts.items()):
            family.add_metric([action, state], n)
        yield family


class ConsoleMetrics:
    """One console's metrics, in a registry of its own (two consoles in one test process
    do not share series)."""

    def __init__(self, jobs: Jobs) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "mcq_console_requests", "HTTP requests answered, by route template, method and status",
            ["route", "method", "status"], registry=self.registry,
        )  # fmt: skip
        self.seconds = Histogram(
            "mcq_console_request_seconds", "Time to answer a request, by route template", ["route"],
            registry=self.registry, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )  # fmt: skip
        self.audited = Counter(
            "mcq_console_audited", "Logins, logouts and actions written to the audit log, by action and outcome",
            ["action", "outcome"], registry=self.registry,
        )  # fmt: skip
        self.registry.register(_JobsCollector(jobs))

    def audit(self, action: str, outcome: str) -> None:
        # a refusal of the read-only role is recorded under the page's path: one series for all
        action = "page action" if action.startswith("/") else action
        self.audited.labels(action=action, outcome=outcome_class(outcome)).inc()

    async def endpoint(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """An ASGI middleware that counts and times every HTTP request by its route's template."""

        async def measured(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            status = 500

            async def sending(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await app(scope, receive, sending)
            finally:
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                method = scope["method"] if scope["method"] in METHODS else "other"  # a bounded label
                self.requests.labels(route=route, method=method, status=str(status)).inc()
                self.seconds.labels(route=route).observe(time.perf_counter() - started)

        return measured
