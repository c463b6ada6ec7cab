"""A raw topic of one partition keeps each key's order by itself (Debezium writes a table's
changes to one partition in commit order, and the normaliser writes them as read, with no
shuffle); a raw topic someone made with several partitions does not, and the normaliser
then orders every key of the batch by source position before writing it."""

from __future__ import annotations

import uuid
from pathlib import Path

from mcq.capture.connector import raw_topic
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.topics import delete_topics
from mcq.topics.plan import TopicSpec, apply_topics
from streams.runner import run_normalize
from tests.integration.typed import produce_updates, typed_registry_yaml
from tests.support.logical import decode_topic, last_state


def test_a_key_spread_over_several_raw_partitions_ends_at_its_newest_source_position(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex[:8]
    registry = parse_registry(typed_registry_yaml(token, f"y_{token}"), "registry.yaml")
    topic = raw_topic(registry.sources[0], f"y_{token}.typed")
    s = settings.model_copy(update={"topic_prefix": f"rp{token}"})
    apply_topics(s, [TopicSpec(topic, 3, {"cleanup.policy": "delete"})])
    # key 1's newest change sits in the partition read first, its oldest in the one read
    # last; key 2's changes are all in one partition, in order: (id, note, LSN) per partition
    produce_updates(s, topic, [(1, "newest", 300), (2, "b1", 110), (2, "b2", 120)], partition=0)
    produce_updates(s, topic, [(1, "middle", 200)], partition=1)
    produce_updates(s, topic, [(1, "oldest", 100), (3, "c", 130)], partition=2)
    try:
        run_normalize(s, registry, once=True, checkpoint=tmp_path / "checkpoint")
        records = decode_topic(s, registry.tables[0].topic(s.topic_prefix))
        one = [v["after"]["note"] for k, v in records if v and int(k["pkey_number"]) == 1]
        assert one == ["oldest", "middle", "newest"], one  # written in source order, not partition order
        assert {int(k[4]): v["after"]["note"] for k, v in last_state(records).items()} == {1: "newest", 2: "b2", 3: "c"}
    finally:
        delete_topics(s, [topic])
