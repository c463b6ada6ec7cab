"""Projections: the current record of an entity, assembled from the latest state of the
logical tables it is made of (the MCQ paper's Push_Person reads person, department,
status and directory data).

:class:`StateStore` keeps the last state of every key of the logical tables it is given,
read from their compacted topics (so a listener needs no access to the source, and a
replay rebuilds it), indexed by TNAME/subtype and person_id. ``catch_up()`` reads to the
end of the topics as they are now: called before a batch is applied, the store holds at
least every change of the batch, so a projection is never older than the change that
asked for it.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from consumers.exceptions import ConsumerError
from mcq.change import BadChange, ChangeCodec, ChangeKey
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.registry.model import Registry

Row = dict[str, str | None]


class StateStore:
    """The last state per key of some logical tables, kept from their topics."""

    def __init__(self, settings: Settings, registry: Registry, refs: Iterable[str]) -> None:
        prefix = settings.topic_prefix
        self.refs = sorted(set(refs))
        self._topics: dict[str, str] = {}
        for ref in self.refs:
            tname, _, subtype = ref.partition("/")
            table = registry.table(tname, subtype or None)
            if table is None:
                raise ConsumerError(f"projection: no logical table {ref} in the registry")
            self._topics[table.topic(prefix)] = ref
        self._codec = ChangeCodec(registry_client(settings))
        self._rows: dict[str, dict[str, tuple[ChangeKey, Row]]] = defaultdict(dict)  # ref -> key text -> row
        self._by_person: dict[tuple[str, int], set[str]] = defaultdict(set)
        self._consumer = Consumer(
            {
                **settings.kafka.client_config(),
                "group.id": f"_mcq-projection-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        meta = self._consumer.list_topics(timeout=15).topics
        self._partitions = [
            TopicPartition(t, p)
            for t in self._topics
            if t in meta and meta[t].error is None
            for p in meta[t].partitions
        ]
        self._consumer.assign([TopicPartition(tp.topic, tp.partition, -2) for tp in self._partitions])

    def _take(self, timeout_s: float) -> bool:
        msg = self._consumer.poll(timeout_s)
        if msg is None:
            return False
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return True
            raise ConsumerError(f"projection: reading {msg.topic()}: {err}")
        topic = msg.topic() or ""
        try:
            change = self._codec.decode(topic, msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value())
        except BadChange:
            return True  # the listener itself dead-letters a bad record; the projection cannot use it
        if change is None:
            return True
        ref, text = self._topics[topic], change.key.text()
        rows = self._rows[ref]
        if change.state is None:
            old = rows.pop(text, None)
            if old and old[0].person_id is not None:
                self._by_person[(ref, old[0].person_id)].discard(text)
        else:
            rows[text] = (change.key, dict(change.state))
            if change.key.person_id is not None:
                self._by_person[(ref, change.key.person_id)].add(text)
        return True

    def catch_up(self, timeout_s: float = 60.0) -> None:
        """Read every topic to its end as of now."""
        ends = {
            (tp.topic, tp.partition): self._consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in self._partitions
        }
        deadline = time.monotonic() + timeout_s
        while True:
            positions = self._consumer.position(list(self._partitions)) if self._partitions else []
            behind = [
                tp
                for tp in positions
                if ends[(tp.topic, tp.partition)] > 0 and tp.offset < ends[(tp.topic, tp.partition)]
            ]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise ConsumerError(
                    f"projection: not caught up with {len(behind)} partition(s) after {timeout_s:.0f} s"
                )
            self._take(0.5)

    def rows(self, ref: str, person_id: int | None = None) -> list[Row]:
        """The live rows of a table/subtype, or of one person in it."""
        if person_id is None:
            return [row for _, row in self._rows[ref].values()]
        table = self._rows[ref]
        return [table[t][1] for t in sorted(self._by_person.get((ref, person_id), ())) if t in table]

    def row(self, ref: str, person_id: int) -> Row | None:
        found = self.rows(ref, person_id)
        return found[0] if found else None

    def find(self, ref: str, **match: str) -> list[Row]:
        """Rows whose columns equal the given values."""
        return [row for row in self.rows(ref) if all(row.get(k) == v for k, v in match.items())]

    def close(self) -> None:
        self._consumer.close()
