"""Capture's keeper: start again a source connector whose task failed on a lost connection.

Kafka Connect never restarts a FAILED task by itself, and Debezium's PostgreSQL task fails
for good when its database goes away at one moment of its start: Connect starts it again
after a rebalance (a broker or worker restart); Debezium retries a refused first query
("Couldn't obtain encoding"), but a refusal a few queries later throws a plain
``DebeziumException`` ("Couldn't get timestamp utils from underlying connection", caused by
"Connection refused"), not the retriable kind it retries. Capture then stops
until an operator runs ``mcq connect restart``, although the database came back seconds
later. Strimzi restarts such tasks (``autoRestart``); mcq's own deployments have the
normaliser do it (``streams/beside.py``), through Connect's REST API.

Only a failure whose trace says a connection was refused, reset, closed or timed out is
restarted, after a backoff per connector (``FIRST_WAIT_S``, doubling up to ``MAX_WAIT_S``).
Any other failure (a lost replication slot, a refused configuration, a bad record) stays
FAILED: a restart would hide what an operator must see and decide, and ``mcq connect
status`` reports it. Restarts ask Connect for the failed instances only (KIP-745), so two
keepers (a normaliser and its standby) never stop a task the other just started."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcq.connect_rest import ConnectClient, ConnectError

log = logging.getLogger(__name__)

FIRST_WAIT_S = 5.0
MAX_WAIT_S = 300.0
LOOK_EVERY_S = 10.0

LOST_CONNECTION = re.compile(
    r"java\.net\.ConnectException|Connection refused|Connection reset|SocketTimeoutException|Broken pipe"
    r"|Database connection failed"
    r"|The connection attempt failed|This connection has been closed|This replication stream has been closed"
    r"|An I/O error occurred while sending to the backend"
    r"|the database system is (?:starting up|shutting down|in recovery mode|not yet accepting connections)"
    r"|terminating connection due to administrator command|Connection to \S+ refused"
    r"|org\.apache\.kafka\.common\.errors\.(?:TimeoutException|DisconnectException|NetworkException)"
)
"""What a trace says when its task failed only because a server was away (PostgreSQL's
JDBC driver, Java's sockets and Kafka's clients; SQL states 57P01 and 57P03 by their
messages). A streaming task whose database was killed fails with the replication stream
closed (its connection gone: seen in CI on 2026-12-04); a lost slot fails its restart with
a message of its own, which is left for an operator."""


def lost_connection(trace: str) -> bool:
    """Whether a failed task's trace says it lost (or never got) its connection."""
    return bool(LOST_CONNECTION.search(trace))


def failures(status: dict[str, Any]) -> list[str]:
    """The traces of a connector status's FAILED parts (the connector, then its tasks)."""
    parts = [status.get("connector") or {}, *(status.get("tasks") or [])]
    return [str(p.get("trace") or "") for p in parts if p.get("state") == "FAILED"]


@dataclass
class Backoff:
    """When a connector may be restarted next: at once the first time, then after a wait
    that doubles while its restarts keep failing, and starts over once it ran a while."""

    first_s: float = FIRST_WAIT_S
    most_s: float = MAX_WAIT_S
    wait_s: float = 0.0
    not_before: float = 0.0
    restarts: int = 0

    def due(self, now: float) -> bool:
        return now >= self.not_before

    def restarted(self, now: float) -> None:
        self.restarts += 1
        self.wait_s = min(self.most_s, max(self.first_s, self.wait_s * 2))
        self.not_before = now + self.wait_s

    def running(self, now: float) -> None:
        if self.wait_s and now >= self.not_before + self.most_s:
            self.wait_s = 0.0  # ran well past its last wait: the next failure is a new outage


@dataclass
class CaptureKeeper:
    """Looks at ``connectors`` every ``every_s`` and restarts those failed on a lost
    connection (``look``); ``run`` does it until ``stopping`` is set."""

    client: ConnectClient
    connectors: Callable[[], list[str]]
    every_s: float = LOOK_EVERY_S
    clock: Callable[[], float] = time.monotonic
    backoff: dict[str, Backoff] = field(default_factory=dict)
    _away: bool = False
    _held: set[str] = field(default_factory=set)

    def look(self) -> list[tuple[int, str]]:
        """One look at every connector; returns what it did or found, one line each, with
        its log level (a restart or a failure left alone: WARNING; Connect away: INFO)."""
        lines: list[tuple[int, str]] = []
        for name in self.connectors():
            try:
                status = self.client.status(name)
            except ConnectError as exc:
                if not self._away:
                    line = f"capture keeper: cannot ask Kafka Connect ({exc}); asking again every {self.every_s:.0f} s"
                    lines.append((logging.INFO, line))
                self._away = True
                return lines
            if self._away:
                lines.append((logging.INFO, "capture keeper: Kafka Connect answers again"))
                self._away = False
            if status is None:
                continue  # not applied yet, or removed: mcq connect apply's business
            lines.extend((logging.WARNING, line) for line in self._keep(name, failures(status)))
        return lines

    def _keep(self, name: str, traces: list[str]) -> list[str]:
        now = self.clock()
        backoff = self.backoff.setdefault(name, Backoff())
        if not traces:
            backoff.running(now)
            self._held.discard(name)
            return []
        first = traces[0].splitlines()[0] if traces[0] else "no trace"
        if not all(lost_connection(t) for t in traces):
            if name in self._held:
                return []
            self._held.add(name)
            return [f"capture keeper: {name} FAILED ({first}); not a lost connection, so left for an operator: "
                    f"`mcq connect status` shows the trace, `mcq connect restart {name}` starts it again"]  # fmt: skip
        if not backoff.due(now):
            return []
        try:
            self.client.restart(name, only_failed=True)
        except ConnectError as exc:
            return [f"capture keeper: {name} FAILED on a lost connection; its restart was refused: {exc}"]
        backoff.restarted(now)
        return [f"capture keeper: {name} FAILED on a lost connection ({first}); restarted its failed tasks "
                f"(restart {backoff.restarts}; the next no sooner than {backoff.wait_s:.0f} s from now)"]  # fmt: skip

    def run(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.every_s):
            try:
                for level, line in self.look():
                    log.log(level, line)
            except Exception as exc:  # the keeper must outlive any one answer
                log.warning(f"capture keeper: {type(exc).__name__}: {exc}")
