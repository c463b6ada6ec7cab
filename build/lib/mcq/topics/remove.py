"""What a deployment (a topic prefix) holds in Kafka and the schema registry, and its removal:
``mcq topics remove``, for a deployment that is retired, or a trial that is over.

A deployment's names all start with ``<prefix>.``: its logical topics, its system topics
(the registry store, heartbeats, refresh requests, withheld changes, each listener's
applied positions, retry and bulk lanes and dead letters), its listeners' consumer groups
and the Avro subjects of its topics (``<topic>-key`` / ``<topic>-value``). Two kinds of
names under that prefix are someone else's and are never touched:

* the raw topics Debezium writes (``mcq.raw.<source>.*``): they belong to the capture of
  a source, which other deployments may share (``mcq connect remove``, then Kafka's
  tools, retire them);
* another deployment whose prefix starts with this one (``mcq.test`` under ``mcq``),
  known by its own registry store topic ``<prefix>._registry``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from mcq.topics.exceptions import TopicError

RAW_ROOT = "mcq.raw."
"""Where Debezium's raw topics are named (``mcq.capture.connector.RAW_TOPIC_ROOT``)."""
REGISTRY_SUFFIX = "._registry"


@dataclass(frozen=True)
class Holdings:
    """Everything a deployment holds, by name."""

    prefix: str
    topics: tuple[str, ...]
    groups: tuple[str, ...]
    subjects: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not (self.topics or self.groups or self.subjects)


def owned(names: Iterable[str], prefix: str, topics: Iterable[str]) -> list[str]:
    """Those of ``names`` under ``prefix.`` that are this deployment's: not a raw topic (or a
    subject of one), not under a longer prefix that is a deployment of its own (it has a
    registry store among ``topics``)."""
    mine = prefix + "."
    nested = sorted(
        t.removesuffix(REGISTRY_SUFFIX) + "."
        for t in topics
        if t.endswith(REGISTRY_SUFFIX) and t.startswith(mine) and t != prefix + REGISTRY_SUFFIX
    )
    return sorted(
        n
        for n in names
        if n.startswith(mine) and not n.startswith(RAW_ROOT) and not any(n.startswith(p) for p in nested)
    )


def holdings(admin: AdminClient, registry: SchemaRegistryClient, prefix: str) -> Holdings:
    """What the cluster and the schema registry hold of deployment ``prefix`` now."""
    try:
        topics = [t for t in admin.list_topics(timeout=15).topics if not t.startswith("__")]
        groups = [g.group_id for g in admin.list_consumer_groups(request_timeout=15).result().valid]
    except KafkaException as exc:
        raise TopicError(f"cannot list the topics and consumer groups of {prefix!r}: {exc}") from None
    mine = owned(topics, prefix, topics)
    # a registry may list only so many subjects (Apicurio's ccompat API: the first 1,000), so
    # the subjects of the deployment's topics are asked for by name as well
    try:
        listed = set(registry.get_subjects())
    except (SchemaRegistryError, httpx.HTTPError) as exc:
        raise TopicError(f"schema registry: cannot list the subjects: {exc}") from None
    named = {f"{t}-{part}" for t in mine for part in ("key", "value")} - listed
    subjects = listed | {s for s in named if _registered(registry, s)}
    return Holdings(prefix, tuple(mine), tuple(owned(groups, prefix, topics)), tuple(owned(subjects, prefix, topics)))


def _registered(registry: SchemaRegistryClient, subject: str) -> bool:
    try:
        return bool(registry.get_versions(subject))
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:
            return False
        raise TopicError(f"schema registry: cannot look up subject {subject}: {exc}") from None
    except httpx.HTTPError as exc:
        raise TopicError(f"schema registry: cannot look up subject {subject}: {exc}") from None


def local_files(home: Path, state_dir: Path | None, held: Holdings) -> list[Path]:
    """What this machine keeps of the deployment: the normaliser's default checkpoint (a
    normaliser started on it after the topics are gone would go on from its raw offsets and
    never write again what it wrote before) and the listeners' state snapshots."""
    found = [home / "checkpoints" / f"normalize-{held.prefix}"]
    listeners = {g[len(held.prefix) + 1 :].removesuffix(".bulk") for g in held.groups}
    if state_dir is not None:
        found += [
            state_dir / f"{held.prefix}.{name}.{kind}" for name in sorted(listeners) for kind in ("store", "applied")
        ]
    return [p for p in found if p.exists()]


def busy_groups(admin: AdminClient, groups: Iterable[str]) -> list[str]:
    """``group: member@host, ...`` for each of ``groups`` with members now."""
    wanted = list(groups)
    if not wanted:
        return []
    out = []
    for group, future in admin.describe_consumer_groups(wanted, request_timeout=15).items():
        try:
            members = future.result().members
        except KafkaException as exc:
            raise TopicError(f"cannot describe consumer group {group}: {exc}") from None
        if members:
            out.append(f"{group}: {', '.join(f'{m.client_id}@{m.host}' for m in members)}")
    return out


def remove(admin: AdminClient, registry: SchemaRegistryClient, held: Holdings) -> list[str]:
    """Delete the groups, then the topics, then the subjects of ``held``; the errors, one
    line each (a name gone meanwhile is no error)."""
    errors: list[str] = []
    if held.groups:
        for group, future in admin.delete_consumer_groups(list(held.groups), request_timeout=30).items():
            _settle(f"consumer group {group}", future, errors)
    if held.topics:
        for topic, future in admin.delete_topics(list(held.topics), operation_timeout=60).items():
            _settle(f"topic {topic}", future, errors)
    for subject in held.subjects:
        try:
            registry.delete_subject(subject)
            registry.delete_subject(subject, permanent=True)  # the name is free for a later deployment
        except SchemaRegistryError as exc:
            if exc.http_status_code != 404:
                errors.append(f"subject {subject}: {exc}")
        except httpx.HTTPError as exc:
            errors.append(f"subject {subject}: {exc}")
    return errors


def _settle(what: str, future: Any, errors: list[str]) -> None:
    try:
        future.result()
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError) or error.code() not in GONE:
            errors.append(f"{what}: {exc}")


GONE = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.GROUP_ID_NOT_FOUND)
"""Removed meanwhile (by another run, or the broker's own cleanup): what was wanted."""
