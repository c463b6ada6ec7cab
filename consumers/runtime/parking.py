"""The retry lane and the dead-letter topic: what a parked or dead change carries.

A parked change is the original key and value, re-produced to the listener's retry
topic with headers saying when it may be tried again (the paper's Hold_Until), how many
delivery rounds it has had (the put-back count) and where it came from. A dead letter
(AQ's exception queue) is the same, in the dead-letter topic, with the last error.
"""

from __future__ import annotations

import random
import socket
import time
from dataclasses import dataclass

from confluent_kafka import Message

from mcq.change import POSITION_HEADER

H_ATTEMPTS = "mcq.attempts"
H_HOLD_UNTIL = "mcq.hold_until_ms"
H_ERROR = "mcq.error"
H_ERROR_KIND = "mcq.error_kind"
H_TOPIC = "mcq.topic"
H_PARTITION = "mcq.partition"
H_OFFSET = "mcq.offset"
H_LISTENER = "mcq.listener"
H_FAILED_AT = "mcq.failed_at_ms"
H_HOST = "mcq.host"
H_REQUEUED_FROM = "mcq.requeued_from"
H_REQUEST = "mcq.request"
"""On a record of a listener's own bulk lane that is a refresh request (``refresh``), not a state."""
SUPERSEDED = "superseded:"
"""Key prefix of a dead-letter resolution by key (``superseded:<key>``, in ``dlq-resolved``):
every dead letter of the key older than the position it names is superseded."""
H_KEY = "mcq.key"
"""The change's logical key (``ChangeKey.text()``) on a dead letter: what a newer applied
change of the key supersedes."""

Headers = list[tuple[str, str | bytes | None]]


def header_of(msg: Message, name: str) -> str | None:
    """One header's text (the last of that name, as :func:`headers_of` keeps it), without
    decoding the others: the history reads one header of every change."""
    found: str | None = None
    raw = msg.headers() or []
    for key, value in raw.items() if isinstance(raw, dict) else raw:
        if key == name:
            found = value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")
    return found


def headers_of(msg: Message) -> dict[str, str]:
    out: dict[str, str] = {}
    raw = msg.headers() or []
    for name, value in raw.items() if isinstance(raw, dict) else raw:
        out[name] = value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")
    return out


@dataclass(frozen=True)
class Origin:
    """Where a change first entered this listener: its logical (or bulk) topic record."""

    topic: str
    partition: int
    offset: int
    attempts: int = 0
    """Delivery rounds so far."""

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    @classmethod
    def of(cls, msg: Message, retry_lane: bool) -> Origin:
        """The origin of a record: its own position, or on the retry lane (the only lane whose
        records carry one, so the only one whose headers are read) the one its headers carry."""
        h = headers_of(msg) if retry_lane else {}
        if H_TOPIC in h:
            return cls(h[H_TOPIC], int(h[H_PARTITION]), int(h[H_OFFSET]), int(h.get(H_ATTEMPTS, "0")))
        return cls(msg.topic() or "?", msg.partition() or 0, msg.offset() or 0, 0)


def hold_until_ms(msg: Message) -> int:
    value = headers_of(msg).get(H_HOLD_UNTIL)
    return int(value) if value else 0


def backoff_s(attempt: int, initial: float, maximum: float) -> float:
    """Exponential back-off with full jitter: random in [initial/2, min(max, initial*2^attempt)]."""
    ceiling = min(maximum, initial * (2**attempt))
    return random.uniform(min(initial / 2, ceiling), ceiling)


def failure_headers(
    listener: str,
    origin: Origin,
    attempts: int,
    error: str,
    kind: str,
    hold_until_ms: int | None = None,
    position: str | None = None,
    key: str | None = None,
) -> Headers:
    """Headers of a parked or dead change. ``position`` (the change's source position) goes
    along so that a tombstone keeps the one only its header had."""
    h: Headers = [
        (H_LISTENER, listener.encode()),
        (H_TOPIC, origin.topic.encode()),
        (H_PARTITION, str(origin.partition).encode()),
        (H_OFFSET, str(origin.offset).encode()),
        (H_ATTEMPTS, str(attempts).encode()),
        (H_ERROR, error.encode("utf-8", "replace")[:8000]),
        (H_ERROR_KIND, kind.encode()),
        (H_FAILED_AT, str(int(time.time() * 1000)).encode()),
        (H_HOST, socket.gethostname().encode()),
    ]
    if hold_until_ms is not None:
        h.append((H_HOLD_UNTIL, str(hold_until_ms).encode()))
    if position is not None:
        h.append((POSITION_HEADER, position.encode()))
    if key is not None:
        h.append((H_KEY, key.encode()))
    return h
