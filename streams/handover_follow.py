"""A held instance follows the running one (``streams/handover.py``): a reader of the
output topics tells the gate what the running instance lands (``HandOverGate.landed``),
so a held query drops each record the running one wrote as it reaches it instead of
waiting at its first record. Its JIT is warm and its checkpoint copy current when it
takes over; what is left for it then is what the running instance had not written.

What it tells is what Kafka has, per output partition, as after a crash
(``landed_lines``): a record is dropped only when the running instance's write of it
landed, never because it was sent. After a crash the follower reads on to the ends the
topics have then, and what it saw is the take-over's fences (``fences``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streams.handover_gate import Seen, Tails, landed_lines, note_landed, tail_reader

if TYPE_CHECKING:
    from mcq.config import Settings

log = logging.getLogger(__name__)

POLL_S = 0.1
"""How long the follower's fetch waits at the topics' end (what it tells lags by this)."""


class LandedFollower:
    """Reads ``topics`` from ``since_ms`` on, in a thread of its own, and calls ``tell``
    with the landed lines of every output partition that moved (the gate's ``landed``)."""

    def __init__(
        self, settings: Settings, topics: list[str], since_ms: int, tell: Callable[[str], None], copied_ms: int
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.since_ms = since_ms
        self.tell = tell
        self.copied_ms = copied_ms
        """When the held queries' checkpoint was copied: a raw record the running instance
        wrote after it is one they will reach."""
        self.seen: Seen = {}
        self.highest: dict[tuple[str, int], int] = {}
        """Raw partition -> the highest raw offset landed from it."""
        self.reach: dict[tuple[str, int], int] = {}
        """Raw partition -> the lowest raw offset landed from it after ``copied_ms``."""
        self.partitions: dict[str, int] = {}
        self.failed: str | None = None
        self.current = threading.Event()
        """Set once it read what the topics held when it started."""
        self._stop = threading.Event()
        self._ends: dict[tuple[str, int], int] | None = None
        self._result: str | None = None
        self._thread = threading.Thread(target=self._run, name="mcq-normalize-follow", daemon=True)

    def start(self) -> LandedFollower:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.failed is None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def fences(self, timeout_s: float = 60.0) -> str | None:
        """After a crash: read on to the ends the topics have now, stop, and return what
        landed (``landed_lines``); None when the follower failed or the topics' partitions
        changed (then read the tails again: ``read_landed``)."""
        from mcq.topics.read import end_offsets

        if not self.alive:
            return None
        ends = end_offsets(self.settings, self.topics)
        if {topic: len(parts) for topic, parts in ends.items()} != self.partitions:
            return None
        self._ends = {(t, p): end for t, parts in ends.items() for p, end in parts.items()}
        self._thread.join(timeout=timeout_s)
        return self._result

    def _run(self) -> None:
        from confluent_kafka import KafkaError, TopicPartition

        from mcq.topics.read import assign_now, offsets_since

        try:
            spans = offsets_since(self.settings, self.topics, self.since_ms)
            self.partitions = {topic: len(parts) for topic, parts in spans.items()}
            wanted = [TopicPartition(t, p, first) for t, parts in spans.items() for p, (first, _) in parts.items()]
            positions = {(tp.topic, tp.partition): tp.offset for tp in wanted}
            held = {(t, p): end for t, parts in spans.items() for p, (_, end) in parts.items()}
            consumer = tail_reader(self.settings, fetch_wait_ms=int(POLL_S * 1000))
        except Exception as exc:  # the take-over reads the tails itself
            self.failed = f"{type(exc).__name__}: {exc}"
            log.warning(f"normalize: cannot follow what the running instance writes ({self.failed})")
            return
        try:
            if wanted:
                assign_now(consumer, wanted)
            while not self._stop.is_set():
                moved: set[tuple[tuple[str, int, str], int]] = set()
                for msg in consumer.consume(1000, POLL_S) if wanted else []:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise RuntimeError(f"reading {msg.topic()}[{msg.partition()}]: {err}")
                    positions[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
                    noted = note_landed(self.seen, msg)
                    if noted is not None:
                        moved.add((noted[0], msg.partition() or 0))
                        self._note_raw(noted, msg.timestamp()[1])
                if moved:
                    self.tell(self._lines(moved))
                if not self.current.is_set() and all(positions.get(tp, 0) >= end for tp, end in held.items()):
                    self.current.set()
                ends = self._ends
                if ends is not None and all(positions.get(tp, 0) >= end for tp, end in ends.items()):
                    self._result = self._lines(None)
                    return
                if not wanted:
                    self._stop.wait(POLL_S)
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            log.warning(f"normalize: stopped following what the running instance writes ({self.failed})")
        finally:
            consumer.close()

    def _note_raw(self, noted: tuple[tuple[str, int, str], int], stamp: int) -> None:
        """Note a landed record's raw offset (``note_landed``'s answer) and when it landed."""
        (raw_topic, partition, _), offset = noted
        raw = (raw_topic, partition)
        self.highest[raw] = max(self.highest.get(raw, -1), offset)
        if stamp >= self.copied_ms and offset < self.reach.get(raw, offset + 1):
            self.reach[raw] = offset

    def behind(self, seen: Callable[[str, int], int]) -> int:
        """Raw records landed that the held queries have not reached (``seen``: the
        highest raw offset of a raw partition a task asked about, -1 for none), summed
        over the raw partitions they asked about or will reach."""
        total = 0
        for (raw, partition), highest in list(self.highest.items()):
            asked, floor = int(seen(raw, partition)), self.reach.get((raw, partition))
            if asked >= 0 or floor is not None:
                total += max(0, highest - max(asked, -1 if floor is None else floor - 1))
        return total

    def _lines(self, moved: set[tuple[tuple[str, int, str], int]] | None) -> str:
        """The landed lines of the output partitions that moved (all of them for None)."""
        tails: Tails = {}
        for at, out in ((at, out) for at, parts in self.seen.items() for out in parts) if moved is None else moved:
            offset, keys = self.seen[at][out]
            tails.setdefault(at, {})[out] = (offset, frozenset(keys))
        return landed_lines(tails, self.partitions)


NEAR_RECORDS = 1000
"""A held instance asks for the hand-over once its queries are this few raw records
behind what the running one landed (summed over raw partitions)."""
NEAR_WAIT_S = 120.0
"""...or once it waited this long for them (a running instance much faster than a held
one on the same cores)."""


def near(
    follower: LandedFollower, gate: Any, stopped: Callable[[], bool], records: int = NEAR_RECORDS,
    wait_s: float = NEAR_WAIT_S,
) -> int:  # fmt: skip
    """Wait until the held queries follow the running instance (``follower.behind``: raw
    records landed that they have not reached, at most ``records``), at most ``wait_s``;
    returns how far behind they were when it stopped waiting."""
    began = time.monotonic()
    while not follower.current.is_set() and follower.alive and not stopped() and time.monotonic() - began < wait_s:
        time.sleep(POLL_S)  # what the topics held at the copy: the tasks' first records are in it
    behind = follower.behind(gate.seen)
    while behind > records and follower.alive and not stopped() and time.monotonic() - began < wait_s:
        time.sleep(POLL_S)
        behind = follower.behind(gate.seen)
    log.info(
        f"normalize: held queries {behind} raw records behind the running instance after "
        f"{time.monotonic() - began:.1f} s of following it"
    )
    return behind
