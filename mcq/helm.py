"""Values for the Helm chart ``helm/mcq``, generated from a registry file, never copied by hand.

``mcq helm values REGISTRY > values-registry.yaml`` writes what the chart needs to know of
the registry: the registry file itself (the chart's setup hook applies it), one entry per
listener (a real-time listener becomes a Deployment, a scheduled one a CronJob with the
registry's schedule) and, with ``--strimzi``, one Strimzi ``KafkaConnector`` per source
(the same configuration ``mcq connect apply`` puts over Connect's REST API; secrets stay
``${env:…}`` references the Connect pods resolve). Replicas and resources per listener
stay in the operator's own values file (``listenerOverrides``), so regenerating this one
after a registry change loses nothing.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import yaml

from mcq.acl.plan import Principals, plan_acls
from mcq.capture.connector import OUTBOX_TABLE, connector_name, raw_topic, raw_topic_partitions, render_source
from mcq.config import Settings
from mcq.registry.model import Listener, Registry
from mcq.secrets import REFERENCE
from mcq.topics.listener import ListenerTopics
from mcq.topics.plan import plan_topics

POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


def chart_values(
    registry: Registry, registry_text: str, settings: Settings, *, strimzi: bool = False
) -> dict[str, Any]:
    """The chart values that follow from REGISTRY (its text is applied as is by the setup hook)."""
    values: dict[str, Any] = {
        "registry": {"content": registry_text},
        "listeners": [_listener(listener) for listener in registry.listeners],
    }
    if registry.entity_tables():  # someone must write their topics
        values["entities"] = {"enabled": True}
    slots = realtime_slots(registry)
    per_executor = -(-slots // EXECUTORS)
    values["normalizer"] = {"sparkApplication": {"executor": {"instances": EXECUTORS, "cores": per_executor}}}
    if strimzi:
        values["strimzi"] = {"users": strimzi_users(registry, settings), "topics": strimzi_topics(registry, settings)}
        connectors = []
        for source in registry.sources:
            config = dict(render_source(registry, source, settings))
            connectors.append(
                {
                    "name": connector_name(source),
                    "class": config.pop("connector.class", POSTGRES_CONNECTOR),
                    "tasksMax": int(config.pop("tasks.max", "1")),
                    "config": config,
                }
            )
        values["capture"] = {"mode": "strimzi", "connectors": connectors}
    return values


EXECUTORS = 2
"""Executors of the normaliser as a SparkApplication: two, so losing one pod halves its slots
instead of stopping every query until Kubernetes replaces it."""
SHUFFLE_PARTITIONS = 4
"""spark.sql.shuffle.partitions of mcq's sessions (streams/session.py's default)."""


def realtime_slots(registry: Registry) -> int:
    """The task slots the real-time normaliser needs for REGISTRY, as ``streams.realtime``
    counts them on a running cluster: one long-lived task per raw partition (a raw topic
    Debezium creates has one, or its feed's ``raw_partitions``), one to spare, and the
    ordered query's shuffle when two raw topics feed one logical topic. The chart sizes the
    executors from it; real-time tasks mostly wait on Kafka, so a slot is not a CPU
    (``coreRequest`` stays the chart's)."""
    sources = {s.name: s for s in registry.sources}
    raws: dict[str, set[str]] = {}
    for table in registry.tables:
        for feed in table.feeds:
            raws.setdefault(table.ref, set()).add(raw_topic(sources[feed.source], feed.table))
    realtime = {t for feeds in raws.values() if len(feeds) == 1 for t in feeds}
    realtime |= {raw_topic(s, OUTBOX_TABLE) for s in registry.sources}
    shared = any(len(feeds) > 1 for feeds in raws.values())  # read by the ordered query instead
    asked = raw_topic_partitions(registry)
    return sum(asked.get(t, 1) for t in realtime) + 1 + (SHUFFLE_PARTITIONS if shared else 0)


def _listener(listener: Listener) -> dict[str, Any]:
    """A listener as the chart needs it: its schedule, the one target whose credentials its
    pod gets (``vendor``, ``source`` or ``ldap``, a named target, or none), and the
    ``MCQ_SECRET_*`` variables its registry entry references (each must come from a Secret)."""
    entry: dict[str, Any] = {"name": listener.name, "schedule": listener.schedule, "owner": listener.owner}
    settings = listener.adapter.settings
    if listener.adapter.type in ("table", "sql_import"):
        entry["target"] = None if settings.get("dsn") else str(settings.get("database") or "vendor")
    elif listener.adapter.type == "ldap":
        entry["target"] = str(settings.get("target") or "ldap")
    else:
        entry["target"] = None
    entry["secretRefs"] = sorted(_env_references(settings))
    return entry


def _env_references(value: Any) -> set[str]:
    if isinstance(value, dict):
        return {name for item in value.values() for name in _env_references(item)}
    if isinstance(value, list):
        return {name for item in value for name in _env_references(item)}
    found = REFERENCE.match(value) if isinstance(value, str) else None
    return {found.group(2)} if found and found.group(1) == "env" else set()


STRIMZI_OPERATIONS = {
    "READ": "Read", "WRITE": "Write", "CREATE": "Create", "DESCRIBE": "Describe", "DESCRIBE_CONFIGS": "DescribeConfigs",
}  # fmt: skip


def strimzi_users(registry: Registry, settings: Settings) -> list[dict[str, Any]]:
    """One Strimzi KafkaUser per identity of ``mcq acl plan`` (SCRAM-SHA-512, its ACLs):
    the operator makes each a Secret of the same name holding its password, which the
    chart hands to that pod alone."""
    principals = Principals.of(settings, registry)
    acls: dict[str, dict[tuple[str, str, str], list[str]]] = {}
    for grant in plan_acls(registry, principals):
        user = grant.principal.removeprefix("User:")
        ops = acls.setdefault(user, {}).setdefault((grant.resource, grant.pattern, grant.name), [])
        ops.append(STRIMZI_OPERATIONS[grant.operation])
    return [
        {
            "name": user,
            "acls": [
                {
                    "resource": {
                        "type": resource.lower(),
                        "name": name,
                        "patternType": "prefix" if pattern == "PREFIXED" else "literal",
                    },
                    "operations": sorted(set(ops)),
                }
                for (resource, pattern, name), ops in sorted(by_resource.items())
            ],
        }
        for user, by_resource in sorted(acls.items())
    ]


def strimzi_topics(registry: Registry, settings: Settings) -> list[dict[str, Any]]:
    """One Strimzi KafkaTopic per topic of ``mcq topics plan`` and each listener's own topics
    (its resource name made a Kubernetes name; ``topicName`` the topic's)."""
    prefix = settings.topic_prefix
    specs = [*plan_topics(registry, prefix)]
    for listener in registry.listeners:
        specs += ListenerTopics(prefix, listener.name).specs()
    return [
        {
            "name": _resource_name(spec.name),
            "topicName": spec.name,
            "partitions": spec.partitions,
            "config": dict(spec.config),
        }
        for spec in specs
    ]


def _resource_name(topic: str) -> str:
    """A topic's name as a Kubernetes resource's: lower case, ``_`` made ``-``, and a short
    hash of the real name when that changed it (two topics never share one)."""
    labels = [label.strip("-") for label in re.sub(r"[^a-z0-9.-]", "-", topic.lower()).split(".")]
    name = ".".join(label for label in labels if label)
    if name == topic and len(name) <= 253:
        return name
    return f"{name[:240].rstrip('-.')}-{hashlib.sha256(topic.encode()).hexdigest()[:8]}"


class _Literal(str):
    """A multi-line string written as a YAML block (the registry stays readable)."""


def _literal(dumper: yaml.SafeDumper, text: _Literal) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style="|")


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Literal, _literal)


def dump_values(values: dict[str, Any], origin: str) -> str:
    """YAML for ``-f``: a header naming where it came from, the registry as a block."""
    values = dict(values)
    registry = dict(values["registry"])
    registry["content"] = _Literal(registry["content"].rstrip("\n") + "\n")
    values["registry"] = registry
    header = (
        f"# Generated by `mcq helm values {origin}`: regenerate after every registry change,\n"
        "# never edit by hand (replicas and resources per listener go in listenerOverrides).\n"
    )
    return header + yaml.dump(values, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
