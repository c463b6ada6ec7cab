"""Plan, create and compare the topics the registry calls for."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (  # .admin re-exports them without __all__
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from confluent_kafka.cimpl import NewTopic

from mcq.config import Settings
from mcq.registry.model import Registry
from mcq.topics.exceptions import TopicSettingsError
from mcq.topics.named import metadata_admin, named_topics

log = logging.getLogger(__name__)

# Compaction keeps the last state per key; a tombstone must outlive a slow listener's
# catch-up (a day) so it learns of the delete before compaction forgets the key.
LOGICAL_CONFIG = {
    "cleanup.policy": "compact",
    "min.compaction.lag.ms": str(60_000),
    "delete.retention.ms": str(24 * 3600 * 1000),
    "segment.ms": str(3600 * 1000),
}
# Refresh requests (mcq_log_* for a table that has source feeds) are work items, not
# state: never compacted, and kept until consumed -- never dropped by age or size, since
# a listener that is away longer would lose them silently (mcq/topics/listener.py).
REFRESH_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
SYSTEM_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "retention.ms": "-1"}


def registry_topic(prefix: str) -> str:
    """The registry store of the deployment whose topics start with ``prefix``."""
    return f"{prefix}._registry"


def provenance_topic(prefix: str) -> str:
    """Where the normaliser records each table/subtype's first-seen origin: apart from the
    registry store, which only ``mcq registry apply`` and the console may write."""
    return f"{prefix}._provenance"


def history_topic(prefix: str) -> str:
    """Each change's capture in its key's history (``mcq.history``): append-only, only the
    normaliser writes there (each listener has a history topic of its own)."""
    return f"{prefix}._history"


HISTORY_PARTITIONS = 6
HISTORY_RETENTION_DAYS = 30.0


def history_config(retention_days: float = HISTORY_RETENTION_DAYS) -> dict[str, str]:
    return {"cleanup.policy": "delete", "retention.ms": str(int(retention_days * 86_400_000))}


def is_history(prefix: str, topic: str) -> bool:
    """The capture's history topic, or a listener's (``<prefix>.listener.NAME.history``)."""
    return topic == history_topic(prefix) or (topic.startswith(f"{prefix}.listener.") and topic.endswith(".history"))


def history_spec(prefix: str) -> TopicSpec:
    return TopicSpec(history_topic(prefix), HISTORY_PARTITIONS, history_config(), "each key's history")


def refresh_topic(prefix: str = "mcq") -> str:
    return f"{prefix}._refresh"


def withheld_topic(prefix: str = "mcq") -> str:
    """Changes the normaliser could not deliver whole (a large value Debezium left out):
    kept, never applied, reported by ``mcq status``."""
    return f"{prefix}._withheld"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    purpose: str = ""


@dataclass(frozen=True)
class TopicReport:
    created: list[str]
    unchanged: list[str]
    drift: list[str]
    """One line per difference: topic, setting, registry value, cluster value."""


def prefixes_holding(names: list[str], prefix: str, existing: frozenset[str]) -> list[str]:
    """The topic prefixes other than PREFIX under which every one of NAMES (topics under
    PREFIX) exists, the most like PREFIX first (a typo's intended prefix leads): where the
    normaliser writes when a listener finds none of its topics."""
    suffixes = {n[len(prefix) :] for n in names if n.startswith(prefix + ".")}
    if not suffixes:
        return []
    first, *rest = sorted(suffixes, key=len)
    candidates = {t[: -len(first)] for t in existing if t.endswith(first) and len(t) > len(first)}
    found = sorted(p for p in candidates - {prefix} if p and all(p + s in existing for s in rest))
    return sorted(found, key=lambda p: -SequenceMatcher(None, prefix, p).ratio())


def plan_topics(registry: Registry, prefix: str = "mcq") -> list[TopicSpec]:
    """Every topic the registry needs, logical ones first."""
    specs = [
        TopicSpec(
            t.topic(prefix),
            t.partitions,
            {**LOGICAL_CONFIG, "delete.retention.ms": str(int(registry.delete_retention_s(t) * 1000))},
            f"logical changes of {t.ref}",
        )
        for t in registry.tables
    ]
    specs.append(TopicSpec(refresh_topic(prefix), 3, dict(REFRESH_CONFIG), "explicit refresh requests (bulk lane)"))
    specs.append(TopicSpec(withheld_topic(prefix), 1, dict(REFRESH_CONFIG), "changes the normaliser withheld"))
    specs.append(TopicSpec(registry_topic(prefix), 1, dict(SYSTEM_CONFIG), "the registry store"))
    specs.append(TopicSpec(provenance_topic(prefix), 1, dict(SYSTEM_CONFIG), "first-seen provenance of each table"))
    specs.append(
        TopicSpec(history_topic(prefix), HISTORY_PARTITIONS, history_config(), "each key's history (mcq trace)")
    )
    return specs


ALTERABLE = frozenset({"delete.retention.ms"})
"""Settings ``mcq topics apply`` brings an existing topic to: the registry derives them (how
long deletes are kept follows the listeners' schedules), and changing them loses nothing."""


def apply_topics(
    settings: Settings,
    specs: list[TopicSpec],
    alter: bool = False,
    create: bool = True,
) -> TopicReport:
    """Create missing topics (unless ``create`` is False: a diff); compare existing ones and
    report drift. With ``alter``, the :data:`ALTERABLE` settings that drifted are changed to
    the registry's (reported as ``altered``, not as drift)."""
    admin = metadata_admin(settings)
    durability = settings.topics
    specs = [TopicSpec(s.name, s.partitions, {**s.config, **durability.config()}, s.purpose) for s in specs]
    specs = [  # each key's history is kept as long as the deployment says
        TopicSpec(s.name, s.partitions, {**s.config, **history_config(durability.history_retention_days)}, s.purpose)
        if is_history(settings.topic_prefix, s.name)
        else s
        for s in specs
    ]
    existing, metadata = named_topics(admin, [s.name for s in specs])
    missing = [s for s in specs if s.name not in existing]
    created: list[str] = []
    if not create:
        report_missing = [f"{s.name}: missing (would be created)" for s in missing]
        missing = []
    else:
        report_missing = []
    if missing:
        brokers = len(metadata.brokers) if metadata else 0
        if durability.replication_factor > brokers:
            raise TopicSettingsError(
                f"topics.replication_factor is {durability.replication_factor} but the cluster at "
                f"{settings.kafka.bootstrap_servers} has {brokers} broker(s): no topic created "
                f"(set MCQ_TOPICS__REPLICATION_FACTOR to at most {brokers})"
            )
        rf = durability.replication_factor
        new = [NewTopic(t.name, num_partitions=t.partitions, replication_factor=rf, config=t.config) for t in missing]
        futures = admin.create_topics(new, operation_timeout=30)
        for name, fut in futures.items():
            try:
                fut.result()
                created.append(name)
                log.info(f"created {name}")
            except KafkaException as exc:
                code = exc.args[0].code()
                if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    who = settings.kafka.sasl_username or "this client"
                    raise TopicSettingsError(
                        f"topic {name} is missing and {who} may not create it at {settings.kafka.bootstrap_servers}: "
                        "run `mcq topics apply` with an identity that may (mcq's ACLs let no process create "
                        "another's topics)"
                    ) from None
                if code != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        _wait_usable(admin, [s.name for s in missing])
    drift: list[str] = []
    unchanged: list[str] = []
    present = [s for s in specs if s.name in existing]
    if present:
        configs = _describe(admin, [s.name for s in present])
        for spec in present:
            lines = []
            partitions = len(existing[spec.name].partitions)
            if partitions != spec.partitions:
                lines.append(f"{spec.name}: partitions: registry {spec.partitions}, cluster {partitions}")
            replicas = min((len(p.replicas) for p in existing[spec.name].partitions.values()), default=0)
            if durability.replication_factor != -1 and replicas != durability.replication_factor:
                lines.append(
                    f"{spec.name}: replication factor: settings {durability.replication_factor}, cluster {replicas}"
                )
            actual = configs[spec.name]
            changes: dict[str, str] = {}
            for key, value in spec.config.items():
                have = actual[key].value if key in actual else None
                if have == value:
                    continue
                if alter and key in ALTERABLE:
                    changes[key] = value
                    log.info(f"altered {spec.name}: {key}: {have} -> {value}")
                else:
                    lines.append(f"{spec.name}: {key}: registry {value}, cluster {have}")
            if changes:
                _alter(admin, spec.name, changes)
            drift.extend(lines)
            if not lines:
                unchanged.append(spec.name)
    drift = report_missing + drift
    for line in drift:
        log.warning(f"drift {line}")
    return TopicReport(created=created, unchanged=unchanged, drift=drift)


def _alter(admin: AdminClient, topic: str, changes: dict[str, str]) -> None:
    """Set these settings of ``topic`` (others untouched: an incremental alter)."""
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()


def _wait_usable(admin: AdminClient, names: list[str], timeout_s: float = 30.0) -> None:
    """Return once every topic is in the broker's metadata with a leader for each partition.

    ``create_topics`` returns when the controller has the topic; the broker a client asks
    next may not know it yet, and a consumer assigned to it a moment later would fail with
    UNKNOWN_TOPIC_OR_PART. Topics still not usable at ``timeout_s`` are named in the error.
    Each is asked for by name (:func:`named_topics`; ``admin`` must not auto-create): the metadata of
    every topic of a cluster with thousands took 0.1-0.3 s a round, a listener's first
    start waited 1.5 s here."""
    deadline = time.monotonic() + timeout_s
    waiting = set(names)
    while waiting:
        found, _ = named_topics(admin, sorted(waiting), timeout_s=10)
        for name, meta in found.items():
            if meta.partitions and all(p.leader >= 0 and p.error is None for p in meta.partitions.values()):
                waiting.discard(name)
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"topics created but not usable after {timeout_s:.0f} s: "
                           + ", ".join(sorted(waiting)))
            )  # fmt: skip
        time.sleep(0.05)


def _describe(admin: AdminClient, names: list[str], timeout_s: float = 30.0) -> dict[str, Any]:
    """Topic configs by name. A topic another process created a moment ago may not be known
    to every broker yet (UNKNOWN_TOPIC_OR_PART): asked again until ``timeout_s``, so two
    processes starting together (a listener and the normaliser) do not fail each other."""
    deadline = time.monotonic() + timeout_s
    while True:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
        try:
            return {r.name: f.result() for r, f in admin.describe_configs(resources).items()}
        except KafkaException as exc:
            error = exc.args[0]
            transient = error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART or error.retriable()
            if not transient or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def delete_topics(settings: Settings, topics: list[str]) -> None:
    """Delete these topics; one that was never created is no error (tests, benches, smoke)."""
    admin = AdminClient(settings.kafka.client_config())
    for fut in admin.delete_topics(topics, operation_timeout=30).values():
        with contextlib.suppress(KafkaException):
            fut.result()
