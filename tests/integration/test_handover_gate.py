"""The hand-over gate (jvm/spark-gate) in Spark's JVM: after a crash it fences each output
partition on its own, finds a record's partition as Spark's Kafka sink does, and lets a
held query drop what the running instance landed without waiting."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from mcq.change import RAW_HEADER
from mcq.config import Settings
from mcq.stack import Stack
from mcq.topics.read import read_to_end
from streams.handover_follow import LandedFollower
from streams.handover_gate import gate_of, landed_lines, read_landed
from streams.session import spark_session

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark(stack: Stack, settings: Settings) -> Iterator[Any]:
    session = spark_session(settings, "test-handover-gate")
    yield session
    gate_of(session).open("")  # as a run that never takes over finds it


def test_the_gate_finds_the_partition_spark_s_kafka_sink_wrote_a_key_to(spark: Any, settings: Settings) -> None:
    topic = f"test-gate-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(settings.kafka.client_config())
    next(iter(admin.create_topics([NewTopic(topic, num_partitions=5, replication_factor=1)]).values())).result()
    keys = [i.to_bytes(2, "big") + os.urandom(i % 23) for i in range(300)]  # distinct, of many lengths
    frame = spark.createDataFrame([(k, b"v") for k in keys], "key binary, value binary")
    frame.write.format("kafka").options(**settings.kafka.spark_options()).option("topic", topic).save()
    written = {m.key() or b"": m.partition() or 0 for m in read_to_end(settings, topic, 120)}
    assert len(written) == len(keys)
    gate = gate_of(spark)
    assert {k: int(gate.partitionOf(k.hex().upper(), 5)) for k in keys} == written


def test_after_a_crash_a_record_is_taken_as_written_only_by_its_own_partition_s_fence(spark: Any) -> None:
    """Raw offset 12 of key p (partition 0) was lost while 15 (partition 1) landed: 12 is
    written again, 10 and 15 are not; a partition without a fence writes everything."""
    gate = gate_of(spark)
    by_partition: dict[int, list[bytes]] = {}
    for i in range(200):
        key = f"key-{i}".encode()
        by_partition.setdefault(int(gate.partitionOf(key.hex(), 3)), []).append(key)
    p, q, r = (by_partition[n] for n in range(3))
    passing = int(gate.passing())
    gate.close()
    gate.open(landed_lines({("raw.a", 0, "t.x"): {0: (10, frozenset({p[0]})), 1: (15, frozenset({q[0]}))}}, {"t.x": 3}))

    def written(offset: int, key: bytes) -> bool:
        return bool(gate.written("raw.a", 0, "t.x", offset, key.hex().upper()))

    assert written(9, p[1]) and written(10, p[0])
    assert not written(10, p[1])  # at the fence, only the keys it names
    assert not written(12, p[2])  # lost with the crashed producer: written again
    assert written(12, q[1]) and written(15, q[0])
    assert not written(16, q[2])
    assert not written(1, r[0])  # partition 2 held nothing of raw.a[0] since: everything again
    assert not bool(gate.written("raw.a", 1, "t.x", 1, p[0].hex()))  # another raw partition: no fence
    _acknowledge(spark, int(gate.passing()) - passing)  # what passed here was never sent


def test_a_held_record_the_running_instance_landed_is_dropped_at_once_and_one_it_did_not_waits(
    spark: Any, settings: Settings
) -> None:
    """A follower of the output topic tells the gate what landed: raw offsets 0-39 of
    raw.f[0], each under its own key, spread over 3 output partitions as Spark's sink
    spreads them. Held records it covers come back "written" while the gate is closed;
    raw offset 40 never landed and waits until the take-over's fences open the gate, then
    passes. The follower's fences after the "crash" are what the tails say."""
    gate = gate_of(spark)
    topic = f"test-follow-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(settings.kafka.client_config())
    next(iter(admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]).values())).result()
    since_ms = int(time.time() * 1000) - 1000
    keys = [f"follow-{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(41)]
    producer = Producer({**settings.kafka.client_config(), "partitioner": "murmur2_random"})  # as Java's
    for offset, key in enumerate(keys[:40]):
        producer.produce(topic, b"v", key, headers=[(RAW_HEADER, f"raw.f[0]@{offset}".encode())])
    assert producer.flush(30) == 0
    passing = int(gate.passing())
    gate.close()
    follower = LandedFollower(settings, [topic], since_ms, gate.landed, since_ms).start()
    try:
        answers: dict[int, bool] = {}

        def ask(offset: int) -> None:
            answers[offset] = bool(gate.written("raw.f", 0, topic, offset, keys[offset].hex().upper()))

        assert follower.current.wait(30)
        assert follower.behind(gate.seen) == 40  # all landed after the copy: the held query will reach 0-39
        for offset, behind in ((3, 36), (39, 0)):  # landed: dropped while the gate is closed
            asking = threading.Thread(target=ask, args=(offset,), daemon=True)
            asking.start()
            asking.join(60)
            assert answers.get(offset) is True
            assert follower.behind(gate.seen) == behind  # raw offsets landed up to 39
        held = threading.Thread(target=ask, args=(40,), daemon=True)
        held.start()
        held.join(2.0)
        assert held.is_alive()  # not landed: waits at the closed gate
        assert follower.behind(gate.seen) == 0  # it is past everything that landed
        fences = follower.fences()
        assert fences is not None
        assert sorted(fences.splitlines()) == sorted(read_landed(settings, [topic], since_ms).splitlines())
        gate.open(fences)
        held.join(30)
        assert answers.get(40) is False  # written by the take-over
    finally:
        follower.stop()
        gate.open("")
        _acknowledge(spark, int(gate.passing()) - passing)


def _acknowledge(spark: Any, records: int) -> None:
    """Count ``records`` out as Kafka's acknowledgements would (the gate's state is the JVM's)."""
    loaded = spark._jvm.org.apache.spark.util.Utils.classForName("mcq.spark.HandOverGate$Sent", True, False)
    sent = loaded.newInstance()
    for _ in range(records):
        sent.onAcknowledgement(None, None)
