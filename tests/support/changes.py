"""Change records a test makes by hand, sent to the logical topics as the normaliser would
(and the entities made of them, as ``mcq entities run`` would), and read back."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Producer

from mcq.change import Change, ChangeCodec, ChangeKey, Position
from mcq.contract import registry_client
from mcq.testing.listeners import World
from mcq.topics.listener import ListenerTopics

_lsn = [5_000_000]


def ch(ref: str, kind: str, after: dict[str, str] | None = None, before: dict[str, str] | None = None, **key: Any
       ) -> Change:  # fmt: skip
    _lsn[0] += 10
    tname, _, subtype = ref.partition("/")
    return Change(
        ChangeKey(tname, subtype or None, **key), kind, Position(_lsn[0], _lsn[0]),  # type: ignore[arg-type]
        datetime.now(UTC), "campus.x", after, before, origin="table campus.x",
    )  # fmt: skip


def send_changes(w: World, *changes: Change) -> None:
    codec = ChangeCodec(registry_client(w.settings))
    producer = Producer(w.settings.kafka.client_config())
    for c in changes:
        table = w.registry.table(c.key.tname, c.key.subtype)
        assert table is not None
        topic = table.topic(w.settings.topic_prefix)
        key, value = codec.encode(topic, c)
        producer.produce(topic, key=key, value=value)
        if c.change_type == "DELETE":
            producer.produce(topic, key=key, value=None)
    assert producer.flush(30) == 0
    feed_entities(w, changes)


def feed_entities(w: World, changes: Iterable[Change]) -> None:
    """The entities made of the tables of ``changes`` written to their topics, as ``mcq
    entities run`` writes them (the job itself, until caught up)."""
    from streams.entities.job import EntityJob

    refs = {c.key.ref for c in changes}
    names = [t.tname for t in w.registry.entity_tables() if t.entity is not None and refs & set(t.entity.members())]
    if names:
        EntityJob(w.settings, w.registry, names).run(until_caught_up=True)


def entity_records(w: World, tname: str) -> list[Change]:
    """Every change record an entity's topic holds now, in order (tombstones left out)."""
    from mcq.testing.worlds import read_topic_to_end

    table = w.registry.table(tname, None)
    assert table is not None
    topic = table.topic(w.settings.topic_prefix)
    codec = ChangeCodec(registry_client(w.settings))
    found = [codec.decode(topic, p, o, k, v) for k, v, p, o in read_topic_to_end(w.settings, topic)]
    return [c for c in found if c is not None]


def listener(w: World, name: str) -> World:
    return World(w.settings, name, w.table, w.registry, w.registry_file, ListenerTopics(w.settings.topic_prefix, name))
