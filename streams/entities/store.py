"""An entity's member rows kept from their compacted topics (the listener's
:class:`~consumers.projection.StateStore`, with the entity's join indexes), and what
was written to the entity's own topic, read back from it at start."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Message

from consumers.projection import StateStore
from consumers.runtime.parking import headers_of
from mcq.change import POSITION_HEADER, BadChange, ChangeCodec, Position
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.registry.model import LogicalTable, Registry
from mcq.topics.follow import TopicFollower
from streams.entities.index import EntityIndex, digest


class EntityStore(EntityIndex, StateStore):
    """The rows of an entity's member tables, from their topics (restored from ``snapshot``
    when it still describes them), and the roots each record read put dirty."""

    def __init__(self, settings: Settings, registry: Registry, table: LogicalTable, snapshot: Path | None) -> None:
        self._entity_setup(registry, table)
        self.on_fanout: Callable[[int], None] | None = None
        """Told each record's fan-out (the entities it put dirty), once it is past the start's read."""
        assert table.entity is not None
        StateStore.__init__(self, settings, registry, table.entity.members(), snapshot)

    def _restore(self) -> str:
        said = super()._restore()
        self.rebuild_indexes()
        return said

    def _fold(self, msg: Message) -> None:
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        self._read_since += 1
        ref = self._topics[topic]
        try:
            if msg.value() is None:  # a tombstone: a delete; its position is in a header
                self._trigger = (_header_position(msg), None, None, ref)
                self.put(ref, self._codec.decode_key(topic, partition, offset, msg.key()), None)
                if self.on_fanout is not None:
                    self.on_fanout(self.fanout_last)
                return
            change = self._codec.decode(topic, partition, offset, msg.key(), msg.value())
        except BadChange:
            return  # the listeners dead-letter a bad record; an entity cannot use it
        if change is not None:
            self._trigger = (change.position, change.entry_time, change.txid, change.source_table)
            self.put(ref, change.key, change.state, change.position)
        if self.on_fanout is not None:
            self.on_fanout(self.fanout_last)

    def abandon(self) -> None:
        """Stop reading without saving a snapshot (after an error: what it holds may be ahead
        of what was written)."""
        self._follower.close()

    def take(self, timeout_s: float) -> bool:
        """Fold in what has been fetched, waiting up to ``timeout_s`` for the first record."""
        return self._follower.take(timeout_s)


def _header_position(msg: Message) -> Position | None:
    text = headers_of(msg).get(POSITION_HEADER)
    try:
        return None if text is None else Position.parse(text)
    except ValueError:
        return None


class Written:
    """What the entity topics hold per key: a fingerprint of the last row written and the
    last position (deletes included), read from the topics themselves, so a restart, a lost
    snapshot or a second run writes only what differs."""

    def __init__(self) -> None:
        self.rows: dict[str, bytes] = {}
        self.positions: dict[str, Position] = {}

    def read(self, settings: Settings, topics: list[str]) -> None:
        codec = ChangeCodec(registry_client(settings))

        def fold(msg: Message) -> None:
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            try:
                if msg.value() is None:
                    text = codec.decode_key(topic, partition, offset, msg.key()).text()
                    self.rows.pop(text, None)
                    at = _header_position(msg)
                    if at is not None:
                        self.note(text, at)
                    return
                change = codec.decode(topic, partition, offset, msg.key(), msg.value())
            except BadChange:
                return
            if change is None:
                return
            text = change.key.text()
            self.note(text, change.position)
            if change.change_type == "DELETE" or change.after is None:
                self.rows.pop(text, None)
            else:
                self.rows[text] = digest(change.after)

        follower = TopicFollower(settings, topics, fold, "entities-written")
        try:
            follower.start()
            follower.catch_up(120.0)
        finally:
            follower.close()

    def note(self, text: str, position: Position) -> None:
        last = self.positions.get(text)
        if last is None or position > last:
            self.positions[text] = position

    def next_position(self, text: str, newest: Position | None) -> Position:
        """The position of the next record of a key: its newest member change, but always
        after the last one written (a listener skips what is not newer than it applied)."""
        last = self.positions.get(text)
        if newest is not None and (last is None or newest > last):
            return newest
        if last is None:
            return Position(0, 1)
        return Position(last.last_commit_lsn, last.lsn + 1)
