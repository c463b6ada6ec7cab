"""The latest state of logical tables, kept from their compacted topics: what the entities
job assembles each entity from (streams/entities/), and what a refresh resolves keys
against (consumers/runtime/refresh.py).

:class:`StateStore` keeps the last state of every key of the logical tables it is given,
read from their compacted topics (so a listener needs no access to the source, and a
replay rebuilds it), indexed by TNAME/subtype and person_id. ``catch_up()`` reads to the
end of the topics as they are now: called before a batch is applied, the store holds at
least every change of the batch, so a projection is never older than the change that
asked for it.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from confluent_kafka import Message

from consumers import state_snapshot
from consumers.exceptions import ConsumerError
from mcq.change import BadChange, Change, ChangeCodec, ChangeKey, Position
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.refs import KEY_FIELDS, parse_ref
from mcq.registry.model import Registry
from mcq.topics.exceptions import TopicReadError
from mcq.topics.follow import TopicFollower

Row = dict[str, str | None]
KeyTuple = tuple[str, str | None, int | None, str | None, int | None, str | None]
"""A ChangeKey's fields in order (tname, subtype, person_id, pkey_string, pkey_number, aux_string)."""


class IndexedState:
    """Rows by table/subtype and key, indexed by key field."""

    def __init__(self) -> None:
        # plain values only (tuples, not ChangeKey/Position objects): a snapshot is restored
        # as it was saved, with no object built per key (85k keys on the campus)
        self._rows: dict[str, dict[str, tuple[KeyTuple, Row]]] = defaultdict(dict)  # ref -> key text -> row
        self._by_key: dict[tuple[str, str, str], set[str]] = defaultdict(set)  # (ref, key field, value as text)
        self._positions: dict[str, tuple[int, int]] = {}  # key text -> (last commit LSN, LSN) of its last change

    def entries(self, ref: str, **key: str | int) -> list[tuple[ChangeKey, Row, Position | None]]:
        """The live keys, rows and positions of a table/subtype whose key fields are the given
        values (all of them when none is given)."""
        table = self._rows[ref]
        texts: set[str] | None = None
        for f, v in key.items():
            found = self._by_key.get((ref, f, str(v)), set())
            texts = set(found) if texts is None else texts & found
        chosen = sorted(table) if texts is None else sorted(t for t in texts if t in table)
        out = []
        for t in chosen:
            at = self._positions.get(t)
            out.append((ChangeKey(*table[t][0]), table[t][1], None if at is None else Position(*at)))
        return out

    def put(self, ref: str, key: ChangeKey, row: Row | None, position: Position | None = None) -> None:
        """Set (or, with None, remove) the state of a key, and the source position it is from."""
        text = key.text()
        if position is not None:
            self._positions[text] = (position.last_commit_lsn, position.lsn)
        fields = [(f, str(v)) for f in KEY_FIELDS if (v := getattr(key, f)) is not None]
        rows = self._rows[ref]
        if row is None:
            rows.pop(text, None)
            for f, v in fields:
                self._by_key[(ref, f, v)].discard(text)
            return
        fields_in_order = (key.tname, key.subtype, key.person_id, key.pkey_string, key.pkey_number, key.aux_string)
        rows[text] = (fields_in_order, dict(row))
        for f, v in fields:
            self._by_key[(ref, f, v)].add(text)


class StateStore(IndexedState):
    """The last state per key of some logical tables, kept from their topics. With a
    ``snapshot`` path, what it held when closed is saved there, and the next store opened
    on the same topics starts from it when it still describes them (``state_snapshot``)."""

    def __init__(
        self, settings: Settings, registry: Registry, refs: Iterable[str], snapshot: Path | None = None
    ) -> None:
        super().__init__()
        prefix = settings.topic_prefix
        self.refs = sorted(set(refs))
        self._topics: dict[str, str] = {}
        for ref in self.refs:
            table = registry.table(*parse_ref(ref))
            if table is None:
                raise ConsumerError(f"projection: no logical table {ref} in the registry")
            self._topics[table.topic(prefix)] = ref
        self._codec = ChangeCodec(registry_client(settings))
        self._follower = TopicFollower(settings, sorted(self._topics), self._fold, "projection")
        self._partitions = self._follower.partitions
        self._admin = self._follower.admin.client
        self._next = self._follower.next  # next offset to read, per partition
        self._snapshot = snapshot
        self._saved_at: float | None = None  # when the snapshot restored was saved
        self._read_since = 0  # records read since it
        self._ids = state_snapshot.topic_ids(self._admin, sorted({tp.topic for tp in self._partitions}))
        self.restored = self._restore() if snapshot is not None else "no snapshot kept"
        """Whether the store started from a snapshot, or why not (for status lines and tests)."""
        self._follower.start()  # from where the snapshot ends, else from the beginning

    def _restore(self) -> str:
        assert self._snapshot is not None
        snap = state_snapshot.restorable(self._snapshot, self._admin, self._topics, self._ids)
        if isinstance(snap, str):
            return snap
        st = snap.state
        self._rows.update(st["rows"])  # kept as saved: see IndexedState
        self._by_key.update(st["by_key"])
        self._positions = st["positions"]
        self._next.update(snap.next)
        self._saved_at = snap.saved_at
        return f"restored {sum(len(t) for t in self._rows.values())} keys from {self._snapshot}"

    def _save(self) -> None:
        if self._snapshot is None or self._ids is None:
            return
        retention = partial(state_snapshot.delete_retention_ms, self._admin, sorted(self._topics))
        if not state_snapshot.due(self._saved_at, self._read_since, retention, time.time()):
            return
        state = {
            "rows": dict(self._rows),
            "by_key": dict(self._by_key),
            "positions": self._positions,
        }
        state_snapshot.save(self._snapshot, state_snapshot.Snapshot(self._topics, self._ids, self._next, state))

    def _fold(self, msg: Message) -> None:
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        self._read_since += 1
        try:
            if msg.value() is None:  # a tombstone: all that compaction may have left of a delete
                self.put(self._topics[topic], self._codec.decode_key(topic, partition, offset, msg.key()), None)
                return
            change = self._codec.decode(topic, partition, offset, msg.key(), msg.value())
        except BadChange:
            return  # the listener itself dead-letters a bad record; the projection cannot use it
        if change is not None:
            self.put(self._topics[topic], change.key, change.state, change.position)

    def catch_up(self, changes: Iterable[Change] = (), timeout_s: float = 60.0) -> None:
        """Read every topic to its end as of now (so at least to every given change)."""
        need: dict[tuple[str, int], int] = {}
        for c in changes:
            if c.topic in self._topics and c.partition is not None and c.offset is not None:
                key = (c.topic, c.partition)
                need[key] = max(need.get(key, 0), c.offset + 1)
        try:
            self._follower.catch_up(timeout_s, need)
        except TopicReadError as exc:
            raise ConsumerError(f"projection: {exc}") from None

    def positions(self) -> dict[tuple[str, int], int]:
        """The next offset to read per partition: the store holds every record before it."""
        return dict(self._next)

    def close(self) -> None:
        """Stop reading; with a snapshot path, save what the store holds for the next run."""
        self._follower.close()
        with contextlib.suppress(OSError):  # a snapshot only saves time: the next run reads the topics whole
            self._save()
