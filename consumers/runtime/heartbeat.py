"""The process monitor (the paper's Mark_Process): each listener instance publishes a
throttled heartbeat to its listener's own compacted topic, keyed ``<listener>/<instance>``;
``mcq status`` reads them back.

A beat is input like any other: one that is not JSON, lacks a field, has a field of the
wrong type, or names another listener than its topic's is skipped with a warning, never
trusted and never fatal to the monitor."""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field, fields

from confluent_kafka import Producer

from mcq.config import Settings
from mcq.topics.read import read_to_end

log = logging.getLogger(__name__)


@dataclass
class Counters:
    """What an instance has done since it started."""

    applied: int = 0
    skipped: int = 0
    """Not newer than what was already applied for the key (duplicate, replay)."""
    filtered: int = 0
    """Of a row outside the listener's view (no interest, or no interest's rule admits its
    state) that the target does not hold either: nothing to do."""
    absent_deletes: int = 0
    """A delete (or tombstone) of a key the target does not hold: one it never held (added
    and removed between two runs, or while the listener was offline) or one that had left
    its view already. Nothing to do; counted apart from ``filtered`` so that a listener
    without a rule does not seem to filter."""
    failed: int = 0
    """Failed attempts (each in-place retry counts)."""
    parked: int = 0
    """Failed, and put in the retry lane with a hold."""
    queued: int = 0
    """Put in the retry lane behind a parked change of the same key, or until its delay is over."""
    superseded: int = 0
    dead_lettered: int = 0
    bulk_applied: int = 0


@dataclass
class Beat:
    listener: str
    instance: str
    host: str
    pid: int
    started_at: float
    at: float
    state: str
    timeout_s: float
    counters: dict[str, int] = field(default_factory=dict)
    partitions: int = 0
    http: str | None = None
    last_applied_at: float | None = None
    detail: str | None = None
    """Why the instance is in its state (the target's error while it waits for it)."""

    def alive(self, now: float | None = None) -> bool:
        return self.state != "stopped" and (now or time.time()) - self.at <= self.timeout_s


class Heartbeat:
    def __init__(self, producer: Producer, topic: str, listener: str, interval_s: float, timeout_s: float) -> None:
        self.topic = topic
        self.instance = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._producer = producer
        self._listener = listener
        self._interval = interval_s
        self._timeout = timeout_s
        self._started = time.time()
        self._last = 0.0

    def beat(
        self,
        state: str,
        counters: Counters,
        partitions: int,
        http: str | None,
        last_applied_at: float | None,
        force: bool = False,
        detail: str | None = None,
    ) -> bool:
        """Publish when the interval has passed (or when forced); True when published."""
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return False
        self._last = now
        beat = Beat(
            self._listener,
            self.instance,
            socket.gethostname(),
            os.getpid(),
            self._started,
            time.time(),
            state,
            self._timeout,
            asdict(counters),
            partitions,
            http,
            last_applied_at,
            detail,
        )
        self._producer.produce(
            self.topic, key=f"{self._listener}/{self.instance}".encode(), value=json.dumps(asdict(beat)).encode()
        )
        self._producer.poll(0)
        return True


def read_beats(settings: Settings, topic: str, listener: str, timeout_s: float = 30.0) -> list[Beat]:
    """The last heartbeat of every instance of ``listener`` that ever published one to its
    topic; malformed or foreign beats are skipped (see the module docstring)."""
    latest: dict[str, Beat] = {}
    for msg in read_to_end(settings, topic, timeout_s):
        key = (msg.key() or b"").decode("utf-8", "replace")
        if msg.value() is None:
            latest.pop(key, None)
            continue
        try:
            latest[key] = parse_beat(key, msg.value() or b"", listener)
        except ValueError as exc:
            log.warning("%s [%s] offset %s: heartbeat skipped: %s", topic, msg.partition(), msg.offset(), exc)
    return list(latest.values())


_TYPES: dict[str, tuple[type, ...]] = {
    "listener": (str,),
    "instance": (str,),
    "host": (str,),
    "pid": (int,),
    "started_at": (int, float),
    "at": (int, float),
    "state": (str,),
    "timeout_s": (int, float),
    "counters": (dict,),
    "partitions": (int,),
    "http": (str, type(None)),
    "last_applied_at": (int, float, type(None)),
    "detail": (str, type(None)),
}


def parse_beat(key: str, value: bytes, listener: str) -> Beat:
    """A beat read from ``listener``'s topic under ``key``; ValueError saying what is wrong."""
    try:
        data = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object but {type(data).__name__}")
    known = {f.name for f in fields(Beat)}  # a newer instance's beat may carry more
    beat = {k: v for k, v in data.items() if k in known}
    for name, types in _TYPES.items():
        if name not in beat and name in ("counters", "partitions", "http", "last_applied_at", "detail"):
            continue
        value_ = beat.get(name)
        if name not in beat or isinstance(value_, bool) or not isinstance(value_, types):
            raise ValueError(f"field {name!r} missing or not {'/'.join(t.__name__ for t in types)}")
        if isinstance(value_, float) and not math.isfinite(value_):
            raise ValueError(f"field {name!r} is not a finite number")
    counters = beat.get("counters", {})
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in counters.items()):
        raise ValueError("field 'counters' must map names to whole numbers")
    if beat["listener"] != listener or key != f"{listener}/{beat['instance']}":
        raise ValueError(f"names listener {beat['listener']!r} under key {key!r} in listener {listener!r}'s topic")
    return Beat(**beat)
