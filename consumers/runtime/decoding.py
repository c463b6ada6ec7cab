"""A logical topic's record read as a :class:`mcq.change.Change`, for a listener.

A record is decoded with its writer's schema from the schema registry; while the
registry does not answer, the listener waits for it (nothing is wrong with the record).
A tombstone is a delete: compaction may have removed the DELETE record before it (a
listener that was behind sees only the tombstone). Its position is in the header
``mcq.position``; without one (written before positions were), it stands at the key's
applied position. A record that cannot be read raises :class:`mcq.change.BadChange`
naming topic[partition]@offset, which the runtime dead-letters.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from consumers.runtime.parking import backoff_s, headers_of
from consumers.runtime.target import Abandon
from mcq.change import POSITION_HEADER, BadChange, Change, ChangeCodec, ChangeKey, Position
from mcq.contract import SchemaRegistryUnavailable

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from confluent_kafka import Message


class RecordDecoder:
    """Decodes one listener's records."""

    def __init__(
        self,
        name: str,
        codec: ChangeCodec,
        applied_at: Callable[[ChangeKey], Position | None],
        stop: threading.Event,
        tick: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self.codec = codec
        self._applied_at = applied_at
        self._stop = stop
        self._tick = tick  # a wait for the registry still turns the loop (liveness)

    def decode(self, msg: Message) -> Change | None:
        """Decode a record; while the schema registry does not answer, wait for it (raises
        :class:`Abandon` when the listener is asked to stop meanwhile)."""
        attempt = 0
        while True:
            try:
                if msg.value() is None:
                    return self.tombstone(msg)
                return self.codec.decode(msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key(),
                                         msg.value())  # fmt: skip
            except SchemaRegistryUnavailable as exc:
                log.warning(f"listener {self.name}: {exc}; retrying")
                self._tick()
                if self._stop.wait(backoff_s(attempt, 0.5, 15.0)):
                    raise Abandon() from None
                attempt += 1

    def tombstone(self, msg: Message) -> Change:
        """The delete a tombstone stands for."""
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        key = self.codec.decode_key(topic, partition, offset, msg.key())
        text = headers_of(msg).get(POSITION_HEADER)
        try:
            position = Position.parse(text) if text else (self._applied_at(key) or Position(0, 0))
        except ValueError:
            where = f"{topic}[{partition}]@{offset}"
            raise BadChange(where, f"header {POSITION_HEADER} is not a position: {text!r}") from None
        stamp = msg.timestamp()[1]
        return Change(
            key=key,
            change_type="DELETE",
            position=position,
            entry_time=datetime.fromtimestamp(stamp / 1000, UTC) if stamp > 0 else datetime.now(UTC),
            source_table=key.ref,
            origin="tombstone",
            cause="tombstone",
            topic=topic,
            partition=partition,
            offset=offset,
        )
