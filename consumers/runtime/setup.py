"""What a listener makes sure of before it reads: its topics (and its logical topics, said
when none existed under its prefix), its bulk lane's schema subjects, its history writer."""

from __future__ import annotations

import logging

from confluent_kafka import Producer

from consumers.exceptions import ListenerConfigError
from mcq.config import Settings
from mcq.contract import register_topic, registry_client
from mcq.history import HistoryWriter
from mcq.registry.model import Delivery as DeliveryPolicy
from mcq.registry.model import Registry
from mcq.topics.exceptions import TopicSettingsError
from mcq.topics.listener import ListenerTopics
from mcq.topics.named import all_topic_names, topic_partitions
from mcq.topics.plan import apply_topics, plan_topics, prefixes_holding

log = logging.getLogger(__name__)


def ensure_topics(settings: Settings, registry: Registry, topics: ListenerTopics) -> None:
    """The listener's own topics and its logical topics exist (drift is said, left as it is)."""
    name = topics.listener
    names = {t.topic(settings.topic_prefix) for t in registry.tables_of(name)}
    logical = [s for s in plan_topics(registry, settings.topic_prefix) if s.name in names]
    try:
        report = apply_topics(settings, [*logical, *topics.specs()])
    except TopicSettingsError as exc:
        raise ListenerConfigError(f"listener {name}: {exc}") from None
    for line in report.drift:
        log.warning(f"listener {name}: topic drift (left as it is): {line}")
    if names and names <= set(report.created):
        log.warning(nothing_normalised(name, settings.topic_prefix, sorted(names), all_topic_names(settings)))
    # bulk work is written as change records: its subjects exist before anyone writes
    # (parked and dead changes keep their original bytes and schema ids)
    register_topic(registry_client(settings), topics.bulk)


def history_writer(
    settings: Settings, delivery: DeliveryPolicy, topics: ListenerTopics, producer: Producer
) -> HistoryWriter | None:
    """Its steps' writer to its history topic (made by :func:`ensure_topics`), with the
    partitions the topic has; None (and one line saying so) without it."""
    if not delivery.history:
        return None
    topic = topics.history
    partitions = topic_partitions(settings, topic)
    if not partitions:
        log.warning(
            f"listener {topics.listener}: no history topic {topic} (mcq topics apply): mcq trace lacks its steps"
        )
        return None
    return HistoryWriter(producer, topic, partitions)


def nothing_normalised(name: str, prefix: str, names: list[str], existing: frozenset[str]) -> str:
    """What to say when none of the listener's logical topics existed: nothing was ever
    normalised under its prefix (the normaliser has not run yet, or they differ)."""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    line = (
        f"listener {name}: none of its logical topics existed under the topic prefix {prefix!r} "
        f"(created them empty: {shown}); it has nothing to apply until `mcq streams normalize` writes "
        f"under {prefix!r}"
    )
    elsewhere = prefixes_holding(names, prefix, existing)
    if elsewhere:
        more = f" (and {len(elsewhere) - 3} other prefixes)" if len(elsewhere) > 3 else ""
        line += (
            f". They exist under {', '.join(repr(p) for p in elsewhere[:3])}{more}: is MCQ_TOPIC_PREFIX "
            "(topic_prefix) set as the normaliser's?"
        )
    return line
