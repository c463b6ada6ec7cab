"""The hand-over gate (jvm/spark-gate) in Spark's JVM: after a crash it fences each output
partition on its own, and finds a record's partition as Spark's Kafka sink does."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from mcq.config import Settings
from mcq.stack import Stack
from mcq.topics.read import read_to_end
from streams.handover_gate import gate_of, landed_lines
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


def _acknowledge(spark: Any, records: int) -> None:
    """Count ``records`` out as Kafka's acknowledgements would (the gate's state is the JVM's)."""
    loaded = spark._jvm.org.apache.spark.util.Utils.classForName("mcq.spark.HandOverGate$Sent", True, False)
    sent = loaded.newInstance()
    for _ in range(records):
        sent.onAcknowledgement(None, None)
