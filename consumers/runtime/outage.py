"""Waiting out a Kafka broker that does not answer (a restart, a network partition).

A listener is a long-running service: a broker that went away must not end it. A call
that fails with a *transient* Kafka error (``mcq.topics.read.transient``: the broker is
unreachable, still electing leaders, or fenced a client's stale leader epoch after a
restart; :class:`consumers.exceptions.KafkaUnavailable` for a read the runtime made of it)
is asked again with backoff until the broker answers or a stop is requested.
The operator is told once when the outage starts and once when it ends; meanwhile the
caller's liveness tick keeps moving (the process is alive and waiting, not hung), and its
readiness is its own business. Any other error is raised at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from consumers.exceptions import ConsumerError, KafkaUnavailable
from consumers.runtime.parking import backoff_s
from mcq.topics.read import transient

log = logging.getLogger(__name__)

T = TypeVar("T")

FLUSH_WAIT_S = 240.0
"""How long a batch's records may wait for the broker (its restart) before that is an error:
inside the producer's message timeout (librdkafka's 300 s), so a record still queued is
delivered when the broker is back, never dropped meanwhile."""


class Flushable(Protocol):
    def flush(self, timeout: float) -> int: ...


class Stopped(Exception):
    """A stop was requested while the broker was away."""


def until_kafka_answers(
    what: str,
    call: Callable[[], T],
    *,
    stop: threading.Event,
    who: str = "kafka",
    tick: Callable[[], None] = lambda: None,
    max_backoff_s: float = 10.0,
) -> T:
    """``call()``, asked again while it fails transiently; raises :class:`Stopped` when
    ``stop`` is set meanwhile."""
    since: float | None = None
    attempt = 0
    while True:
        try:
            result = call()
        except Exception as exc:
            if not (transient(exc) or isinstance(exc, KafkaUnavailable)):
                raise
            if since is None:
                since = time.monotonic()
                log.warning(f"{who}: kafka is not answering while {what} ({exc}); waiting for it, asking again")
            tick()
            if stop.wait(backoff_s(attempt, 0.5, max_backoff_s)):
                raise Stopped(what) from None
            attempt += 1
            continue
        if since is not None:
            log.info(f"{who}: kafka answers again after {time.monotonic() - since:.0f} s ({what})")
        return result


def flushed(producer: Flushable, give_up_at: float, who: str, step_s: float = 10.0) -> None:
    """One flush of ``producer``. Records still queued raise :class:`KafkaUnavailable` (the
    outage wait asks again) until ``give_up_at`` (``time.monotonic``), then :class:`ConsumerError`."""
    left = producer.flush(step_s)
    if not left:
        return
    if time.monotonic() < give_up_at:
        raise KafkaUnavailable(f"{left} record(s) of the batch not delivered yet")
    raise ConsumerError(f"{who}: {left} record(s) not delivered to Kafka after {FLUSH_WAIT_S:.0f} s")
