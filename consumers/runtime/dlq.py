"""The dead-letter console (AQ's exception queue, Cerebrum's failed events):
``mcq dlq list | show | requeue | discard NAME``.

A dead letter is never deleted: requeueing or discarding one writes a resolution,
keyed by the entry's id (``partition:offset``), to the listener's compacted
``dlq-resolved`` topic; ``list`` shows the entries without one. Requeueing puts the
original record back in the listener's retry lane, due at once, with a fresh attempt
count; a newer change of the same key applied meanwhile makes it superseded.

The listener resolves dead letters itself when a newer change of their key reaches the
target: one ``superseded:<key>`` record in ``dlq-resolved`` naming the position applied
resolves every dead letter of that key from an older position (its ``mcq.key`` and
``mcq.position`` headers say which) -- the target holds a newer state already, so the
dead letter no longer needs anyone.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message, Producer

from consumers.exceptions import DeadLetterError
from consumers.runtime.parking import (
    H_ATTEMPTS,
    H_ERROR,
    H_ERROR_KIND,
    H_FAILED_AT,
    H_HOLD_UNTIL,
    H_KEY,
    H_LISTENER,
    H_OFFSET,
    H_PARTITION,
    H_REQUEUED_FROM,
    H_TOPIC,
    SUPERSEDED,
    Headers,
    headers_of,
)
from mcq.change import POSITION_HEADER, BadChange, Change, ChangeCodec, Position
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.topics.exceptions import TopicReadError
from mcq.topics.listener import ListenerTopics
from mcq.topics.read import read_to_end


@dataclass
class DeadLetter:
    id: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, str]
    resolution: dict[str, Any] | None = None
    change: dict[str, Any] | None = field(default=None)

    @property
    def failed_at(self) -> str:
        ms = int(self.headers.get(H_FAILED_AT, "0") or 0)
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z" if ms else "?"

    @property
    def origin(self) -> str:
        h = self.headers
        return f"{h.get(H_TOPIC, '?')}[{h.get(H_PARTITION, '?')}]@{h.get(H_OFFSET, '?')}"

    @property
    def error(self) -> str:
        return self.headers.get(H_ERROR, "")

    @property
    def attempts(self) -> int:
        return int(self.headers.get(H_ATTEMPTS, "0") or 0)


def _read_all(settings: Settings, topic: str) -> list[Message]:
    try:
        return read_to_end(settings, topic)
    except TopicReadError as exc:
        raise DeadLetterError(str(exc)) from None


class DeadLetters:
    """One listener's dead-letter topic and its resolutions."""

    def __init__(self, settings: Settings, listener: str) -> None:
        self.settings = settings
        self.listener = listener
        self.topics = ListenerTopics(settings.topic_prefix, listener)

    def entries(self, include_resolved: bool = False) -> list[DeadLetter]:
        resolutions: dict[str, dict[str, Any]] = {}
        for msg in _read_all(self.settings, self.topics.dlq_resolved):
            key, value = (msg.key() or b"").decode("utf-8", "replace"), msg.value()
            if value is None:
                resolutions.pop(key, None)
                continue
            try:
                resolution = json.loads(value)
            except ValueError:
                continue  # not a resolution: resolves nothing
            if isinstance(resolution, dict) and isinstance(resolution.get("action"), str):
                resolutions[key] = resolution
        superseded = {k.removeprefix(SUPERSEDED): v for k, v in resolutions.items() if k.startswith(SUPERSEDED)}
        out = []
        for msg in _read_all(self.settings, self.topics.dlq):
            entry_id = f"{msg.partition()}:{msg.offset()}"
            entry = DeadLetter(
                entry_id,
                msg.partition() or 0,
                msg.offset() or 0,
                msg.key(),
                msg.value(),
                headers_of(msg),
                resolutions.get(entry_id),
            )
            if entry.resolution is None and superseded:
                entry.resolution = self._superseded(entry, superseded)
            if include_resolved or entry.resolution is None:
                out.append(entry)
        return out

    def _superseded(self, entry: DeadLetter, superseded: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        """The resolution by key that covers this dead letter, if any."""
        key, position = entry.headers.get(H_KEY), entry.headers.get(POSITION_HEADER)
        if key is None or position is None:  # written before dead letters carried them
            change = self.change(entry)
            if change is None:
                return None
            key, position = change.key.text(), position or str(change.position)
        resolution = superseded.get(key)
        if resolution is None:
            return None
        try:
            if Position.parse(position) < Position.parse(str(resolution.get("position"))):
                return resolution
        except ValueError:
            return None
        return None

    def get(self, entry_id: str) -> DeadLetter:
        for entry in self.entries(include_resolved=True):
            if entry.id == entry_id:
                return entry
        raise DeadLetterError(f"listener {self.listener}: no dead letter {entry_id!r} in {self.topics.dlq}")

    def change(self, entry: DeadLetter) -> Change | None:
        """The change a dead letter holds; None when it cannot be read (a bad record)."""
        codec = ChangeCodec(registry_client(self.settings))
        try:
            return codec.decode(self.topics.dlq, entry.partition, entry.offset, entry.key, entry.value)
        except BadChange:
            return None

    def decoded(self, entry: DeadLetter) -> dict[str, Any] | None:
        """The change a dead letter holds, as a dict; None when it cannot be read (a bad record)."""
        change = self.change(entry)
        if change is None:
            return None
        record = change.record()
        record["entry_time"] = change.entry_time.isoformat()
        return record

    def _resolve(self, producer: Producer, entry: DeadLetter, action: str, reason: str) -> None:
        value = {"action": action, "at": time.time(), "reason": reason}
        producer.produce(self.topics.dlq_resolved, key=entry.id.encode(), value=json.dumps(value).encode())

    def requeue(self, entries: list[DeadLetter], reason: str = "") -> int:
        """Back to the retry lane, due now, attempts reset; then marked requeued."""
        producer = Producer({**self.settings.kafka.client_config(), "enable.idempotence": True})
        for entry in entries:
            if entry.resolution is not None:
                raise DeadLetterError(f"dead letter {entry.id} was already {entry.resolution['action']}")
            h = entry.headers
            headers: Headers = [
                (H_LISTENER, self.listener),
                (H_TOPIC, h.get(H_TOPIC, "?")),
                (H_PARTITION, h.get(H_PARTITION, "0")),
                (H_OFFSET, h.get(H_OFFSET, "0")),
                (H_ATTEMPTS, "0"),
                (H_HOLD_UNTIL, "0"),
                (H_ERROR, h.get(H_ERROR, "")),
                (H_ERROR_KIND, h.get(H_ERROR_KIND, "")),
                (H_REQUEUED_FROM, f"{self.topics.dlq}:{entry.id}"),
            ]
            producer.produce(self.topics.retry, key=entry.key, value=entry.value, headers=headers)
        if producer.flush(30):
            raise DeadLetterError(f"requeue to {self.topics.retry}: not delivered within 30 s; nothing marked")
        for entry in entries:  # marked only once the retry lane holds it: never lost in between
            self._resolve(producer, entry, "requeued", reason)
        if producer.flush(30):
            raise DeadLetterError(f"{self.topics.dlq_resolved}: resolutions not delivered within 30 s")
        return len(entries)

    def discard(self, entries: list[DeadLetter], reason: str) -> int:
        producer = Producer({**self.settings.kafka.client_config(), "enable.idempotence": True})
        for entry in entries:
            self._resolve(producer, entry, "discarded", reason)
        if producer.flush(30):
            raise DeadLetterError(f"{self.topics.dlq_resolved}: resolutions not delivered within 30 s")
        return len(entries)
