"""Metadata of topics asked for by name, never of the whole cluster.

A metadata request for every topic of a cluster that holds thousands (a campus, or a
developer's stack after many test runs) took 0.1-0.3 s here, and a listener's start made
three of them. A request naming one topic is a round trip of a millisecond or two. The
admin client asking must not create what it names: a broker with auto-creation on would
otherwise make every topic a listener merely looks for.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._metadata import ClusterMetadata, TopicMetadata  # .admin re-exports them without __all__

from mcq.config import Settings


def metadata_admin(settings: Settings, **extra: Any) -> AdminClient:
    """An admin client whose metadata requests never create the topics they name."""
    return AdminClient({**settings.kafka.client_config(), **extra, "allow.auto.create.topics": False})


def named_topics(
    admin: AdminClient | Consumer, names: list[str], timeout_s: float = 15.0
) -> tuple[dict[str, TopicMetadata], ClusterMetadata | None]:
    """The metadata of those of ``names`` that exist (without an error), each asked for by
    name, and the last cluster metadata answered (its brokers; None when ``names`` is empty).
    ``admin`` may be a consumer about to read them: its leaders are then known when it is
    assigned their partitions (``mcq.topics.read.assign_now``)."""
    found: dict[str, TopicMetadata] = {}
    cluster: ClusterMetadata | None = None
    for name in dict.fromkeys(names):
        cluster = admin.list_topics(topic=name, timeout=timeout_s)
        meta = cluster.topics.get(name)
        if meta is not None and meta.error is None:
            found[name] = meta
    return found, cluster


def all_topic_names(settings: Settings, timeout_s: float = 15.0) -> frozenset[str]:
    """Every topic of the cluster: for the rare question that needs them all."""
    return frozenset(metadata_admin(settings).list_topics(timeout=timeout_s).topics)


def topic_partitions(settings: Settings, name: str, timeout_s: float = 15.0) -> int:
    """How many partitions topic ``name`` has (0: it does not exist)."""
    found, _ = named_topics(metadata_admin(settings), [name], timeout_s)
    return len(found[name].partitions) if name in found else 0
