"""The names a listener owns in Kafka: its consumer groups and its system topics (and
how long a topic keeps its tombstones, which the listener and ``mcq status`` judge by).

Nothing a listener still has to handle may expire silently (AQ's expiration goes to the
exception queue, never into the void). So the work-item topics (the retry lane, the bulk
lane, the dead letters) keep their records until they are consumed: ``retention.ms`` is
-1, and a record leaves only when the topic is deleted. A change that is not delivered
in time is expired by the listener itself, which moves it to the dead-letter topic with
the reason ``expired`` (an interest's ``expire_after_s``) -- the broker never drops one.
Consumed records stay on disk; a deployment that needs the space trims a topic below
its consumer groups' committed offsets (``kafka-delete-records``), never by age.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcq.registry.model import Registry
from mcq.topics.plan import HISTORY_PARTITIONS, TopicSpec, history_config, refresh_topic

# Work items: kept until consumed, never dropped by age or size (see above)
WORK_ITEMS_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
RETRY_CONFIG = dict(WORK_ITEMS_CONFIG)
BULK_CONFIG = dict(WORK_ITEMS_CONFIG)
DLQ_CONFIG = dict(WORK_ITEMS_CONFIG)
# State: the last value per key is what matters
STATE_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "retention.ms": "-1"}


@dataclass(frozen=True)
class ListenerTopics:
    """Everything named after one listener, under the deployment's topic prefix."""

    prefix: str
    listener: str

    @property
    def group(self) -> str:
        """The real-time consumer group (logical topics and the retry lane)."""
        return f"{self.prefix}.{self.listener}"

    @property
    def bulk_group(self) -> str:
        """The bulk lane's consumer group."""
        return f"{self.prefix}.{self.listener}.bulk"

    def _t(self, what: str) -> str:
        return f"{self.prefix}.listener.{self.listener}.{what}"

    @property
    def retry(self) -> str:
        return self._t("retry")

    @property
    def bulk(self) -> str:
        return self._t("bulk")

    @property
    def waiting(self) -> str:
        """Retry-lane records not due yet, each by its own due time (consumers/runtime/waiting.py)."""
        return self._t("waiting")

    @property
    def dlq(self) -> str:
        return self._t("dlq")

    @property
    def dlq_resolved(self) -> str:
        return self._t("dlq-resolved")

    @property
    def applied(self) -> str:
        return self._t("applied")

    @property
    def history(self) -> str:
        """Its steps in each key's history (``mcq trace``): append-only, only it writes there."""
        return self._t("history")

    @property
    def heartbeats(self) -> str:
        """This listener's own heartbeat topic: only its principal may write it, so no
        listener can make another look alive or break the monitor with a forged beat."""
        return self._t("heartbeats")

    @property
    def refresh(self) -> str:
        return refresh_topic(self.prefix)

    def bulk_lane(self) -> list[str]:
        """Bulk work: this listener's own bulk topic and the shared refresh requests."""
        return [self.bulk, self.refresh]

    def specs(self, partitions: int = 3) -> list[TopicSpec]:
        who = f"listener {self.listener}"
        return [
            TopicSpec(self.retry, partitions, dict(RETRY_CONFIG), f"{who}: parked changes (retry lane)"),
            TopicSpec(self.waiting, partitions, dict(STATE_CONFIG), f"{who}: parked changes not due yet"),
            TopicSpec(self.bulk, partitions, dict(BULK_CONFIG), f"{who}: refreshes and full loads (bulk lane)"),
            TopicSpec(self.dlq, 1, dict(DLQ_CONFIG), f"{who}: dead letters"),
            TopicSpec(self.dlq_resolved, 1, dict(STATE_CONFIG), f"{who}: requeued or discarded dead letters"),
            TopicSpec(self.applied, partitions, dict(STATE_CONFIG), f"{who}: source position applied per key"),
            TopicSpec(self.heartbeats, 1, dict(STATE_CONFIG), f"{who}: heartbeats (process monitor)"),
            TopicSpec(self.history, HISTORY_PARTITIONS, history_config(), f"{who}: its steps in each key's history"),
        ]


def heartbeat_listener(prefix: str, topic: str) -> str | None:
    """The listener whose heartbeat topic this is, or None when it is not one."""
    head, tail = f"{prefix}.listener.", ".heartbeats"
    if topic.startswith(head) and topic.endswith(tail) and len(topic) > len(head) + len(tail):
        return topic[len(head) : -len(tail)]
    return None


def interest_topics(registry: Registry, topics: ListenerTopics) -> list[str]:
    """The logical topics of a listener's interests (its real-time group reads them and its
    retry lane)."""
    return sorted({t.topic(topics.prefix) for t in registry.tables_of(topics.listener)})
