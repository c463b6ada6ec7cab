"""The change contract: Avro schemas for the change key and record (``schemas/``),
registered with the topic name strategy (``<topic>-key``, ``<topic>-value``) and a
compatibility mode the registry enforces.

Registry errors are wrapped here, at the serializer boundary, into
:class:`SchemaRefused` naming the subject and the registry's reason.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from typing import Any, Literal

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from mcq.config import Settings
from mcq.errors import McqError
from mcq.resources import read_text

Compatibility = Literal["BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"]
DEFAULT_COMPATIBILITY: Compatibility = "BACKWARD"


class ContractError(McqError):
    """The schema registry or a schema of the change contract; the message names the subject."""


class SchemaRefused(ContractError):
    """The registry refused a schema (incompatible, invalid, unreachable)."""


class SchemaRegistryUnavailable(ContractError):
    """The schema registry did not answer (connection, 5xx): try again later, the record is fine."""

    retriable = True


@cache
def schema_text(name: str) -> str:
    """The Avro schema ``schemas/<name>.avsc`` shipped with the package, normalised JSON."""
    try:
        return json.dumps(json.loads(read_text("schemas", f"{name}.avsc")), separators=(",", ":"))
    except json.JSONDecodeError as exc:
        raise SchemaRefused(f"schemas/{name}.avsc:{exc.lineno}: not JSON: {exc.msg}") from None


def registry_client(settings: Settings) -> SchemaRegistryClient:
    """The process's client of the schema registry at ``settings``: one per address and
    credentials, so that its cache of schemas by id (and its HTTP connections) is shared by
    every codec of the process. Building one costs an SSL context, and each cache would
    fetch every schema again."""
    return _client(tuple(sorted(settings.registry.client_config().items())))


@lru_cache(maxsize=8)
def _client(config: tuple[tuple[str, Any], ...]) -> SchemaRegistryClient:
    return SchemaRegistryClient(dict(config))


def register(
    client: SchemaRegistryClient,
    subject: str,
    schema: str,
    compatibility: Compatibility = DEFAULT_COMPATIBILITY,
) -> int:
    """Register a schema under a subject whose compatibility mode is set first; return its id.

    An incompatible evolution is refused by the registry and raised as SchemaRefused.
    """
    try:
        try:
            client.set_compatibility(subject_name=subject, level=compatibility)
        except SchemaRegistryError as exc:
            # two processes setting up the same subject at once: Apicurio answers 409 to the
            # second; what counts is that the mode is the one asked for
            if exc.http_status_code != 409 or client.get_compatibility(subject) != compatibility:
                raise
        return int(client.register_schema(subject, Schema(schema, "AVRO")))
    except SchemaRegistryError as exc:
        raise SchemaRefused(
            f"subject {subject}: the registry refused the schema ({compatibility}): "
            f"{exc.error_message} (HTTP {exc.http_status_code}, code {exc.error_code})"
        ) from None


def register_topic(
    client: SchemaRegistryClient, topic: str, compatibility: Compatibility = DEFAULT_COMPATIBILITY
) -> tuple[int, int]:
    """Register the change key and record schemas for a logical topic (topic name strategy)."""
    key_id = register(client, f"{topic}-key", schema_text("change_key"), compatibility)
    value_id = register(client, f"{topic}-value", schema_text("change_record"), compatibility)
    return key_id, value_id


def parsed(name: str) -> dict[str, Any]:
    return dict(json.loads(schema_text(name)))
