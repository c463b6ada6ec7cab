"""How a reader of topics assigns itself partitions: each topic's metadata asked for first,
through the consumer that reads, so that librdkafka knows the leaders when the partitions
are assigned (without them it defers each partition's first offset query by 500 ms)."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from mcq.topics.read import assign_now


class _Consumer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def list_topics(self, topic: str, timeout: float) -> None:
        self.calls.append(("metadata", topic))

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("assign", [(tp.topic, tp.partition, tp.offset) for tp in partitions]))


def test_each_topics_metadata_is_asked_for_once_before_its_partitions_are_assigned() -> None:
    consumer = _Consumer()
    wanted = [TopicPartition("a", 0, -2), TopicPartition("b", 1, 7), TopicPartition("a", 2, 5)]
    assign_now(consumer, wanted)  # type: ignore[arg-type]
    assert consumer.calls == [
        ("metadata", "a"),
        ("metadata", "b"),
        ("assign", [("a", 0, -2), ("b", 1, 7), ("a", 2, 5)]),
    ]


def test_nothing_to_assign_asks_for_no_metadata() -> None:
    consumer = _Consumer()
    assign_now(consumer, [])  # type: ignore[arg-type]
    assert consumer.calls == [("assign", [])]
