"""A stopped listener's consumer groups, as the commands that move them see them
(``mcq replay``, ``mcq flush``): which listener, its topics, the instances still in its
groups, end and committed offsets, and the move itself."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # .admin re-exports it without __all__

from consumers.exceptions import ConsumerError, ListenerConfigError
from consumers.runtime.topics import live_members
from mcq.config import Settings
from mcq.registry.model import Registry
from mcq.topics.listener import ListenerTopics, interest_topics

TP = tuple[str, int]


class ListenerRunning(ConsumerError):
    """The listener runs (its groups have live members): stop it first. Nothing was changed."""


@dataclass
class ListenerGroups:
    settings: Settings
    registry: Registry
    name: str

    def __post_init__(self) -> None:
        if self.registry.listener(self.name) is None:
            known = ", ".join(sorted(li.name for li in self.registry.listeners)) or "none"
            raise ListenerConfigError(f"no listener named {self.name} in the registry (known: {known})")
        self.topics = ListenerTopics(self.settings.topic_prefix, self.name)
        self.admin = AdminClient(self.settings.kafka.client_config())

    def logical_topics(self) -> list[str]:
        """The logical topics of the listener's interests."""
        return interest_topics(self.registry, self.topics)

    def live_members(self) -> list[str]:
        """The instances in the listener's consumer groups now."""
        return live_members(self.admin, self.topics)

    def refuse_while_running(self, verb: str) -> None:
        live = self.live_members()
        if live:
            raise ListenerRunning(f"{verb} {self.name}: the listener is running ({'; '.join(live)}): stop it first")

    def partitions(self, topics: list[str]) -> list[TopicPartition]:
        """Every partition of those of ``topics`` that exist."""
        meta = self.admin.list_topics(timeout=15).topics
        return [TopicPartition(t, p) for t in topics if t in meta for p in sorted(meta[t].partitions)]

    def offsets(self, tps: list[TopicPartition], spec: OffsetSpec) -> dict[TP, int]:
        """One offset per partition (earliest, latest, for a time) in one request."""
        futures = self.admin.list_offsets({TopicPartition(tp.topic, tp.partition): spec for tp in tps},
                                          request_timeout=15)  # fmt: skip
        try:
            return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
        except KafkaException as exc:
            raise ConsumerError(f"listener {self.name}: cannot read offsets: {exc}") from None

    def committed(self, group: str, tps: list[TopicPartition]) -> dict[TP, int | None]:
        """The group's committed offset per partition; None where it never committed."""
        try:
            done = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result()
        except KafkaException as exc:
            raise ConsumerError(f"listener {self.name}: cannot read group {group}: {exc}") from None
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in done.topic_partitions}

    def move(self, group: str, offsets: dict[TP, int]) -> None:
        """Commit ``offsets`` for ``group`` (which has no live members)."""
        moved = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        try:
            self.admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, moved)])[group].result()
        except KafkaException as exc:
            raise ConsumerError(f"listener {self.name}: moving group {group}: {exc}") from None
