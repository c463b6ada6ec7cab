"""What a listener has done per key, shared by its instances through a compacted topic.

Three facts per logical key, each its own record in ``<prefix>.listener.NAME.applied``
(compacted: the last value per record key is what counts), and one per logical topic:

* ``<key>`` = ``commit/lsn/+digest`` (the key is at the target) or ``commit/lsn/-`` (it is
  not: deleted at the source, or left this listener's view): the position of the last
  change applied, and whether the key is now *present* at the target; the digest is of
  the state the listener's view gave the target (``commit/lsn`` alone: present, digest
  not known). An update whose view has the digest the target got last is invisible to
  this listener (housekeeping: it changed only columns the listener does not see) and is
  not delivered. A change not newer than
  it is a duplicate or a replay (skipped), a parked change a newer one overtook is
  superseded, and whether the key is present decides what a change means to this
  listener (an insert when it enters the view, a delete when it leaves it, nothing for a
  tombstone of a key the target never had).
* ``park:<key>`` = ``commit/lsn``: the newest change of the key parked in the retry
  lane. While it is newer than what was applied or dead-lettered, the key is *blocked*:
  its later changes queue behind it in the retry lane instead of overtaking it, so the
  changes of one key are applied by one consumer, in order, whichever instance holds
  which partition.
* ``dead:<key>`` = ``commit/lsn``: the newest change of the key dead-lettered (the
  parked queue of the key is resolved up to there).
* ``exposed:<topic>`` = a JSON :class:`~consumers.runtime.acks.ExposureMark`: changes the
  listener read there had waited longer than the topic keeps tombstones, so deleted keys
  may remain at its target; tombstoned once a whole-table refresh of the table has been
  applied (``mcq status`` reports it until then).

A tombstone of ``<key>`` (or of a mark) takes it back, as if never written: ``mcq replay``
writes one before a key's reset to position 0 (the fold keeps the newest position, so a
lower one alone would be ignored).

Written before the offsets are committed (the caller flushes the producer), so the next
owner of a partition, which reads the topic to its end when partitions are assigned,
knows all of it.

With a ``snapshot`` path (``state_dir``), what a run knew when it closed is saved there
and the next run on that host starts from it, reading only the records written since
(``consumers.state_snapshot`` decides whether a snapshot still describes the topic): a
scheduled run otherwise reads every key the listener ever applied before its first batch.
Folding is idempotent and keeps the newest position per key, so a snapshot plus the
records after it is what reading the whole topic gives.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from array import array
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer, TopicPartition

from consumers import state_snapshot
from consumers.exceptions import ConsumerError, KafkaUnavailable
from consumers.runtime.acks import ExposureMark, fold_mark
from mcq import jsontext
from mcq.change import ChangeKey, Position
from mcq.config import Settings
from mcq.topics.exceptions import TopicReadError
from mcq.topics.follow import TopicFollower
from mcq.topics.read import all_watermarks

PARK, DEAD = "park:", "dead:"
OWN_WRITES_KEPT = 2_000_000  # offsets of own writes remembered per partition (8 bytes each)


Applied = tuple[int, int, bool, int]
"""The last change applied for a key: its position (last commit LSN, LSN; compared as a
tuple, as :class:`~mcq.change.Position` compares), whether the key is at the target now,
and the digest of the state it got (:func:`state_digest`; 0: not known). A plain tuple: a
snapshot restores 85k of them with no object built per key."""


def state_digest(state: dict[str, Any] | None) -> int:
    """A 64-bit digest of a state as a listener's view gives it to the target (never 0).
    Its text is :mod:`mcq.jsontext`'s (since 2026-12-04; the standard library's before): a
    digest held from before differs once, so that key's next invisible update is applied
    once instead of skipped, which is harmless."""
    if state is None:
        return 0
    text = jsontext.dumps(state, sort_keys=True, default=str)
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") or 1


def _read_error(exc: TopicReadError) -> ConsumerError:
    """The applied positions could not be read: for now (the broker restarting), or at all."""
    return (KafkaUnavailable if exc.retriable else ConsumerError)(f"applied positions: {exc}")


def applied_text(applied: Applied) -> str:
    """``commit/lsn/+digest`` (or ``commit/lsn`` without one), or ``commit/lsn/-`` when the
    key is not at the target."""
    if not applied[2]:
        return f"{applied[0]}/{applied[1]}/-"
    return f"{applied[0]}/{applied[1]}/+{applied[3]:x}" if applied[3] else f"{applied[0]}/{applied[1]}"


def parse_applied(value: bytes) -> Applied:
    parts = value.decode().split("/")
    tail = parts[2] if len(parts) > 2 else ""
    return (int(parts[0]), int(parts[1]), tail != "-", int(tail[1:], 16) if tail.startswith("+") else 0)


class AppliedPositions:
    def __init__(self, settings: Settings, topic: str, producer: Producer, snapshot: Path | None = None) -> None:
        self.topic = topic
        self._producer = producer
        self._applied: dict[str, Applied] = {}
        self._marks: dict[str, Position] = {}  # park:<key> and dead:<key>
        self._keys: dict[str, ChangeKey] = {}  # parsed keys, for lookups by partial key
        self._exposed: dict[str, ExposureMark] = {}  # exposed:<topic>, by topic
        self._undelivered = 0  # writes Kafka refused for good (delivery reports)
        self._own: dict[int, array[int]] = {}  # partition -> offsets of this process's writes (delivery reports)
        self._own_at: dict[int, int] = {}  # partition -> index in _own of the first write not passed over yet
        self._undelivered_offsets = False  # more own writes than remembered
        try:
            self._follower = TopicFollower(settings, [topic], self._fold_record, "applied", required=True)
        except TopicReadError as exc:
            raise _read_error(exc) from None
        self._partitions = [tp.partition for tp in self._follower.partitions]
        self._offsets = self._follower.admin  # offsets without waiting behind a fetch
        self._snapshot = snapshot
        self._saved_at: float | None = None  # when the snapshot restored was saved
        self._read_since = 0  # records read or written since it
        self._described = {topic: "applied"}  # what a snapshot of these positions describes
        self._ids = state_snapshot.topic_ids(self._offsets.client, [topic]) if snapshot is not None else None
        self.restored = self._restore() if snapshot is not None else "no snapshot kept"
        """Whether the positions started from a snapshot, or why not (for status lines and tests)."""
        self._follower.start()  # from where the snapshot ends, else from the beginning

    def __len__(self) -> int:
        return len(self._applied)

    # ------------------------------------------------------------------ reading

    def get(self, key: ChangeKey) -> Position | None:
        found = self._applied.get(key.text())
        return Position(found[0], found[1]) if found else None

    def present(self, key: ChangeKey) -> bool:
        """Whether the key is at the target (as far as this listener applied changes)."""
        found = self._applied.get(key.text())
        return found is not None and found[2]

    def digest(self, key: ChangeKey) -> int:
        """The digest of the state the target got last for the key (0: not known, or not there)."""
        found = self._applied.get(key.text())
        return found[3] if found is not None and found[2] else 0

    def blocked(self, key: ChangeKey) -> bool:
        """Whether a change of the key waits in the retry lane: later ones queue behind it."""
        text = key.text()
        parked = self._marks.get(PARK + text)
        if parked is None:
            return False
        applied = self._applied.get(text)
        dead = self._marks.get(DEAD + text)
        parked_at = (parked.last_commit_lsn, parked.lsn)
        return not ((applied is not None and applied[:2] >= parked_at) or (dead is not None and dead >= parked))

    def parked(self, key: ChangeKey) -> Position | None:
        """The newest change of the key parked in the retry lane, if any ever was."""
        return self._marks.get(PARK + key.text())

    def exposed(self) -> dict[str, ExposureMark]:
        """The exposure marks held, by topic."""
        return dict(self._exposed)

    def present_keys(self, tname: str | None = None) -> Iterator[ChangeKey]:
        """Every key present at the target, or every one of ``tname``'s (found by its text
        first: a listener may hold a million keys, and a key is built only when asked for)."""
        tail = None if tname is None else ChangeKey.text_tail(tname)
        for text, applied in self._applied.items():
            if applied[2] and (tail is None or text.endswith(tail)):
                yield self._key(text)

    def entries(self) -> Iterator[tuple[str, bool]]:
        """Every key applied (its text), and whether it is at the target."""
        for text, applied in self._applied.items():
            yield text, applied[2]

    def marked(self) -> list[str]:
        """The park:/dead: marks held (their record keys)."""
        return list(self._marks)

    def _key(self, text: str) -> ChangeKey:
        key = self._keys.get(text)
        if key is None:
            key = self._keys[text] = ChangeKey.from_text(text)
        return key

    # ------------------------------------------------------------------ writing

    def record(self, key: ChangeKey, position: Position, present: bool = True, digest: int = 0) -> None:
        """Remember an applied change (``digest``: of the state the target got); the caller
        flushes the producer before committing. A position equal to the one held is written
        again when presence changes (a tombstone without position, a refresh of the same
        state) or the state does (a refresh through another view)."""
        text = key.text()
        current = self._applied.get(text)
        at = (position.last_commit_lsn, position.lsn)
        digest = digest if present else 0
        if current is None or at > current[:2] or (at == current[:2] and (not present or digest != current[3])):
            self._put(text, (at[0], at[1], present, digest))

    def mark_parked(self, key: ChangeKey, position: Position) -> None:
        self._mark(PARK + key.text(), position)

    def mark_dead(self, key: ChangeKey, position: Position) -> None:
        self._mark(DEAD + key.text(), position)

    def dead(self, key: ChangeKey) -> Position | None:
        """The newest change of the key dead-lettered, while no newer one was applied."""
        return self._marks.get(DEAD + key.text())

    def clear_dead(self, key: ChangeKey) -> None:
        """Forget the key's dead mark (a newer change of it was applied: its dead letters are
        superseded)."""
        if self._marks.pop(DEAD + key.text(), None) is not None:
            self._produce(DEAD + key.text(), None)

    def mark_exposed(self, mark: ExposureMark) -> bool:
        """Remember that deletes on ``mark.topic`` may have been missed; the caller flushes
        the producer before committing past the changes judged. A topic already marked
        keeps its mark (the report and its repair are the same): False then."""
        if mark.topic in self._exposed:
            return False
        self._exposed[mark.topic] = mark
        self._produce(mark.key, mark.text())
        return True

    def clear_exposed(self, topic: str) -> bool:
        """Forget the mark of ``topic`` (a whole-table refresh repaired the target): True if
        there was one."""
        mark = self._exposed.pop(topic, None)
        if mark is None:
            return False
        self._produce(mark.key, None)
        return True

    def _produce(self, key: str, value: str | None) -> None:
        self._producer.produce(
            self.topic, key=key.encode(), value=None if value is None else value.encode(), on_delivery=self._delivered
        )

    def _delivered(self, err: object, msg: Message) -> None:
        if err is not None:
            self._undelivered += 1  # memory now knows more than the topic: no snapshot of it is saved
            return
        self._read_since += 1  # the next run reads it if no snapshot is saved after it
        own = self._own.setdefault(msg.partition() or 0, array("q"))
        if len(own) < OWN_WRITES_KEPT:
            own.append(msg.offset() or 0)
        else:  # a long run: past its own writes it reads the topic at close instead
            self._undelivered_offsets = True

    def _put(self, text: str, applied: Applied) -> None:
        self._applied[text] = applied
        self._produce(text, applied_text(applied))

    def _mark(self, name: str, position: Position) -> None:
        current = self._marks.get(name)
        if current is None or position > current:
            self._marks[name] = position
            self._produce(name, str(position))

    # ------------------------------------------------------------------ following the topic

    def _fold_record(self, msg: Message) -> None:
        self._read_since += 1
        self._fold((msg.key() or b"").decode(), msg.value())

    def _fold(self, key: str, value: bytes | None) -> None:
        if fold_mark(self._exposed, key, value):
            return
        if value is None:  # a key taken back (``mcq replay``): its next record starts it again
            self._applied.pop(key, None)
            self._marks.pop(key, None)
            return
        if key.startswith((PARK, DEAD)):
            a, b = value.decode().split("/")[:2]
            pos = Position(int(a), int(b))
            if key not in self._marks or pos > self._marks[key]:
                self._marks[key] = pos
            return
        applied = parse_applied(value)
        current = self._applied.get(key)
        if current is None or applied[:2] > current[:2] or (applied[:2] == current[:2] and applied[2:] != current[2:]):
            self._applied[key] = applied

    def catch_up(self, timeout_s: float = 60.0) -> None:
        """Read what the other instances (and earlier runs) wrote, up to the end as of now."""
        try:
            self._follower.catch_up(timeout_s)
        except TopicReadError as exc:
            raise _read_error(exc) from None

    def refresh(self) -> None:
        """Take in whatever has arrived, without waiting; a partition's unread records that
        are all this process's own writes are passed over (memory holds them already)."""
        self._pass_own_writes()
        try:
            self._follower.refresh()
        except TopicReadError as exc:
            raise _read_error(exc) from None

    def _pass_own_writes(self) -> None:
        """Skip what is unread of a partition when every offset of it is one of this
        process's own writes, as their delivery reports name them (in order, per partition).
        A listener alone in its group otherwise read back every position it wrote, one
        record at a time, before every batch; another instance's write among them, or an
        offset not reported, and the partition is read as before."""
        for partition in self._partitions:
            own = self._own.get(partition)
            unread = self._follower.unread((self.topic, partition)) if own else None
            if not own or not unread:
                continue
            at = self._own_at.get(partition, 0)
            while at < len(own) and own[at] < unread.start:
                at += 1
            self._own_at[partition] = at
            last = at + len(unread) - 1
            # own offsets rise one by one: the first and the last at the range's ends means all of it
            mine = last < len(own) and own[at] == unread.start and own[last] == unread.stop - 1
            if mine and self._follower.skip_to((self.topic, partition), unread.stop):
                self._own_at[partition] = last + 1

    def positions(self) -> dict[int, int]:
        """The next offset to read per partition: every record before it is folded in."""
        return {p: offset for (_, p), offset in self._follower.next.items()}

    def close(self, save: bool = True) -> None:
        """Stop reading; with a snapshot path and ``save``, keep what is known for the next
        run, up to the topic's end (this run's own last writes included, so the next run
        starts after them; read back only when another instance wrote in between). Only a
        run whose writes all reached Kafka may save: a snapshot must never know more than
        the topic (the caller flushed the producer and says so with ``save``; a write
        refused for good is seen here too)."""
        try:
            retention = partial(state_snapshot.delete_retention_ms, self._offsets.client, [self.topic])
            if (
                save
                and self._snapshot is not None
                and not self._undelivered
                and state_snapshot.due(self._saved_at, self._read_since, retention, time.time())
            ):
                with contextlib.suppress(ConsumerError, TopicReadError, OSError):  # it only saves time
                    if not self._past_own_writes():
                        self.catch_up(timeout_s=15.0)
                    self._save()
        finally:
            self._follower.close()

    def _past_own_writes(self) -> bool:
        """Move past what is left to read when all of it is this process's own writes
        (their delivery reports name every offset, and memory holds them already): an
        initial load's 85k writes need not be read back before the snapshot is saved.
        False, and nothing moved, when another instance wrote in between: then it is read."""
        if self._undelivered_offsets:
            return False
        marks = all_watermarks(self._offsets, [TopicPartition(self.topic, p) for p in self._partitions])
        ends = {}
        done = self._follower.next
        for p in self._partitions:
            low, high = marks[(self.topic, p)]
            start = max(done.get((self.topic, p), low), low)
            unread = range(start, high)
            if sorted(o for o in self._own.get(p, ()) if o >= start) != list(unread):
                return False
            if unread:
                ends[(self.topic, p)] = high
        done.update(ends)
        return True

    # ------------------------------------------------------------------ the snapshot

    def _restore(self) -> str:
        assert self._snapshot is not None
        snap = state_snapshot.restorable(self._snapshot, self._offsets.client, self._described, self._ids)
        if isinstance(snap, str):
            return snap
        st = snap.state
        self._applied = st["applied"]  # already (commit, lsn, present, digest) per key
        if any(len(a) < 4 for a in self._applied.values()):  # saved before digests were kept
            self._applied = {k: (*a[:3], 0) if len(a) < 4 else a for k, a in self._applied.items()}  # type: ignore[misc]
        self._marks = {name: Position(c, lsn) for name, (c, lsn) in st["marks"].items()}
        for key, value in st["exposed"].items():
            fold_mark(self._exposed, key, value.encode())
        self._follower.next.update(snap.next)
        self._saved_at = snap.saved_at
        return f"restored {len(self._applied)} keys from {self._snapshot}"

    def _save(self) -> None:
        if self._snapshot is None or self._ids is None:
            return
        state = {
            "applied": self._applied,
            "marks": {name: (p.last_commit_lsn, p.lsn) for name, p in self._marks.items()},
            "exposed": {mark.key: mark.text() for mark in self._exposed.values()},
        }
        nxt = dict(self._follower.next)
        state_snapshot.save(self._snapshot, state_snapshot.Snapshot(self._described, self._ids, nxt, state))
