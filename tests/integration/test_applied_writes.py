"""The direct engine's writes of applied positions (streams/jobs/direct.py: write_applied):
every one lands, in the partition the listener's own producer gives its key, even when more
are handed over at once than librdkafka's queue holds."""

from __future__ import annotations

import zlib

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from mcq.config import Settings
from mcq.stack import Stack
from mcq.topics.read import read_to_end
from streams.jobs import direct

pytestmark = pytest.mark.integration


def test_applied_positions_beyond_the_producers_queue_all_land_in_their_keys_partitions(
    stack: Stack, settings: Settings, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"applied-{token}"
    admin = AdminClient(settings.kafka.client_config())
    for future in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result()
    writes = {f'{{"person_id":{i},"tname":"PHONE"}}': f"{i}/{i + 1}" for i in range(150_000)}
    monkeypatch.setattr(direct, "BATCH", 150_000)  # librdkafka queues 100,000 messages: some wait for room

    direct.write_applied(settings, topic, writes)

    found = {(m.key() or b"").decode(): (m.value() or b"").decode() for m in read_to_end(settings, topic)}
    assert found == writes
    partitions = {(m.key() or b"").decode(): m.partition() for m in read_to_end(settings, topic)}
    # librdkafka's default partitioner (consistent_random): CRC-32 of the key, modulo the partitions
    assert all(p == zlib.crc32(k.encode()) % 3 for k, p in partitions.items())
