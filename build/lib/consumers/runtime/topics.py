"""What the listener runtime asks Kafka about its own topics and groups: how long a
compacted topic keeps its tombstones (which the listener and ``mcq status`` judge by) and
which instances are in a listener's groups now. The names themselves are
:mod:`mcq.topics.listener`."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # .admin re-exports it without __all__
from confluent_kafka.cimpl import KafkaException

from consumers.exceptions import ConsumerError
from mcq.config import Settings
from mcq.topics.listener import ListenerTopics


def tombstone_retention(settings: Settings, topics: list[str], known: dict[str, int | None]) -> dict[str, int | None]:
    """``delete.retention.ms`` of each compacted topic (None: not compacted, or not there),
    read once per topic into ``known``."""
    wanted = [t for t in topics if t not in known]
    if wanted:
        admin = AdminClient(settings.kafka.client_config())
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in wanted]
        for resource, future in admin.describe_configs(resources).items():
            try:
                config = future.result()
            except KafkaException:
                known[resource.name] = None  # gone meanwhile: nothing to judge
                continue
            policy = config["cleanup.policy"].value if "cleanup.policy" in config else ""
            retention = config["delete.retention.ms"].value if "delete.retention.ms" in config else None
            known[resource.name] = int(retention) if "compact" in (policy or "") and retention is not None else None
    return {t: known.get(t) for t in topics}


def live_members(admin: AdminClient, topics: ListenerTopics) -> list[str]:
    """The instances in a listener's consumer groups now (``client id@host (group)``): what
    a command that moves the groups must refuse to run beside."""
    out = []
    groups = [topics.group, topics.bulk_group]
    for group, future in admin.describe_consumer_groups(groups, request_timeout=15).items():
        try:
            described = future.result()
        except KafkaException as exc:
            raise ConsumerError(f"listener {topics.listener}: cannot describe consumer group {group}: {exc}") from None
        out += [f"{m.client_id}@{m.host} ({group})" for m in described.members]
    return out
