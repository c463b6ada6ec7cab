"""``mcq replay``: move a stopped listener back in its logical topics, so that what it
applied from there on is applied again (idempotently), as after a target was restored
from a backup.

Two things are moved together, while no instance of the listener runs:

* the real-time consumer group's committed offsets on every logical topic of its
  interests, to the earliest record, to the first record at or after a time, or to the
  offsets a file names (the retry lane, the bulk lane and the dead letters are left as
  they are: what waits there is still handled);
* the applied positions (the duplicate filter, ``consumers.runtime.applied``) of every
  key of those topics: each is written again at position 0 with its presence kept, so
  every replayed change is newer than what the listener remembers, and a replayed
  delete of a key the target holds is still a delete. Its park and dead marks are
  cleared, so no replayed change queues behind a parked change resolved long ago. Each
  key's reset is a tombstone then the new value (folding keeps the newest position: only
  a tombstone can take a key back).

A consumer group with live members refuses the move (Kafka would too); the plan names
the instances. ``dry_run`` computes and returns the same plan without writing anything.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin._listoffsets import OffsetSpec  # .admin re-exports it without __all__

from consumers.exceptions import ConsumerError, ListenerConfigError
from consumers.runtime.applied import AppliedPositions, applied_text
from consumers.runtime.groups import TP, ListenerGroups
from mcq.change import ChangeKey

log = logging.getLogger(__name__)


@dataclass
class ReplayPlan:
    """What a replay moves: offsets per partition (from -> to) and the keys reset."""

    listener: str
    offsets: dict[TP, tuple[int | None, int]] = field(default_factory=dict)
    """partition -> (committed now, or None when never committed; the offset replayed from)"""
    keys: dict[str, bool] = field(default_factory=dict)
    """applied keys reset to position 0 (key text -> whether the key is at the target)"""
    marks: list[str] = field(default_factory=list)
    """park:/dead: marks cleared"""

    def lines(self) -> list[str]:
        out = []
        for (topic, partition), (now, to) in sorted(self.offsets.items()):
            behind = "" if now is None else f" ({now - to:+,} records)" if now >= to else f" (ahead by {to - now:,})"
            out.append(f"{topic}[{partition}]: {'-' if now is None else now} -> {to}{behind}")
        out.append(f"applied positions reset for {len(self.keys):,} keys, {len(self.marks):,} park/dead marks cleared")
        return out


def read_offsets_file(path: Path, topics: set[str]) -> dict[TP, int]:
    """``topic,partition,offset`` lines (``#`` comments and blank lines allowed); an error
    names the file and line."""
    out: dict[TP, int] = {}
    try:
        text = path.read_text()
    except OSError as exc:
        raise ListenerConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    for n, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        where = f"{path}:{n}"
        if len(row) != 3:
            raise ListenerConfigError(f"{where}: expected topic,partition,offset, got {len(row)} field(s)")
        topic, partition, offset = (x.strip() for x in row)
        if topic not in topics:
            raise ListenerConfigError(f"{where}: {topic} is not a logical topic this listener reads")
        try:
            p, o = int(partition), int(offset)
        except ValueError:
            raise ListenerConfigError(f"{where}: partition and offset must be whole numbers") from None
        if p < 0 or o < 0:
            raise ListenerConfigError(f"{where}: partition and offset must not be negative")
        out[(topic, p)] = o
    if not out:
        raise ListenerConfigError(f"{path}: names no offset")
    return out


@dataclass
class Replay(ListenerGroups):
    """One listener's replay (see the module's docstring)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        prefix = self.settings.topic_prefix
        self._ref_topics = {t.ref: t.topic(prefix) for t in self.registry.tables_of(self.name)}
        self._producer = Producer({**self.settings.kafka.client_config(), "enable.idempotence": True})

    # ------------------------------------------------------------------ planning

    def _partitions(self) -> list[TopicPartition]:
        topics = self.logical_topics()
        tps = self.partitions(topics)
        missing = sorted(set(topics) - {tp.topic for tp in tps})
        if missing:
            raise ConsumerError(f"replay {self.name}: logical topic(s) missing: {', '.join(missing)}")
        return tps

    def _targets(self, since: str | int | Path, tps: list[TopicPartition]) -> dict[TP, int]:
        """The offset each partition is replayed from."""
        if isinstance(since, Path):
            named = read_offsets_file(since, {tp.topic for tp in tps})
            known = {(tp.topic, tp.partition) for tp in tps}
            for tp in named:
                if tp not in known:
                    raise ListenerConfigError(f"{since}: {tp[0]} has no partition {tp[1]}")
        ends = self.offsets(tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        starts = self.offsets(tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        if since == "earliest":
            return starts
        if isinstance(since, int):
            at = self.offsets(tps, OffsetSpec.for_timestamp(since))  # type: ignore[no-untyped-call]
            # no record at or after the time: nothing of that partition is replayed
            return {tp: (ends[tp] if off < 0 else off) for tp, off in at.items()}
        assert isinstance(since, Path)
        # partitions the file does not name are not replayed; a named offset stays within the log
        return {tp: min(max(named.get(tp, ends[tp]), starts[tp]), ends[tp]) for tp in ends}

    def plan(self, since: str | int | Path) -> ReplayPlan:
        """What a replay from ``since`` ("earliest", a time in ms since the epoch, or an
        offsets file) would move; raises :class:`ListenerRunning` while the listener runs."""
        self.refuse_while_running("replay")
        tps = self._partitions()
        targets = self._targets(since, tps)
        committed = self.committed(self.topics.group, tps)
        plan = ReplayPlan(self.name)
        replayed: set[str] = set()
        for tp, to in targets.items():
            now = committed.get(tp)
            if now is None or to < now:  # a partition not read yet is not moved forward either
                plan.offsets[tp] = (now, to)
                replayed.add(tp[0])
        applied = AppliedPositions(self.settings, self.topics.applied, self._producer)
        try:
            applied.catch_up()  # the whole topic, folded as the listener folds it
            plan.keys = {k: present for k, present in applied.entries() if self._topic_of(k) in replayed}
            plan.marks = sorted(m for m in applied.marked() if self._topic_of(m.partition(":")[2]) in replayed)
        finally:
            applied.close(save=False)
        return plan

    def _topic_of(self, key_text: str) -> str | None:
        try:
            return self._ref_topics.get(ChangeKey.from_text(key_text).ref)
        except (ValueError, KeyError, TypeError):
            return None  # not a change key (another kind of record): not reset

    # ------------------------------------------------------------------ doing it

    def apply(self, plan: ReplayPlan) -> None:
        """Reset the planned applied positions, then move the group (a crash in between
        leaves the offsets where they were: running the replay again finishes it)."""
        producer = self._producer
        for i, (key, present) in enumerate(sorted(plan.keys.items()), start=1):
            producer.produce(self.topics.applied, key=key.encode(), value=None)
            producer.produce(self.topics.applied, key=key.encode(), value=applied_text((0, 0, present, 0)).encode())
            if i % 20_000 == 0:
                producer.poll(0)
                log.info(f"replay {self.name}: reset {i:,} of {len(plan.keys):,} applied positions")
        for mark in plan.marks:
            producer.produce(self.topics.applied, key=mark.encode(), value=None)
        if producer.flush(60) != 0:
            raise ConsumerError(f"replay {self.name}: the applied positions could not all be written; nothing moved")
        if plan.offsets:
            self.move(self.topics.group, {tp: to for tp, (_, to) in plan.offsets.items()})
