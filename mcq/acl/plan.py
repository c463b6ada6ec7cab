"""Which Kafka ACLs each of mcq's identities needs, derived from the registry alone.

A grant is one ALLOW ACL binding. Principals are ``User:<name>``: a listener's is the
username of its credentials (``listeners.<NAME>.sasl_username``) or
``<prefix>-listener-<name>``; the normaliser's, Connect's and the console's are
``<prefix>-normaliser``, ``<prefix>-connect`` and ``<prefix>-console``. Every
principal named ``<prefix>-…`` is managed: an ACL of such a principal that the plan does
not hold is drift. ``mcq acl apply`` removes it when an earlier apply made it (a listener
taken out of the registry loses its access) and reports it as foreign otherwise (one
given by hand, a DENY rule): mcq.acl.ledger.

Nothing here talks to a broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcq.capture.connector import RAW_TOPIC_ROOT, raw_topic_prefix
from mcq.config import Settings
from mcq.registry.model import Registry
from mcq.topics.listener import ListenerTopics, interest_topics
from mcq.topics.plan import history_topic, provenance_topic, refresh_topic, registry_topic, withheld_topic

SCRATCH_GROUPS = "_mcq-"
"""Group ids of mcq's assign-only readers (``_mcq-applied-<uuid>``, ``_mcq-reader-<uuid>``…):
they read from offsets they choose and never commit, so holding this prefix lets no one
move another listener's committed position (those live in ``<prefix>.<listener>``)."""
SPARK_GROUPS = "spark-kafka-"
"""Group ids Spark's Kafka source and batch reader use (``spark-kafka-source-…``,
``spark-kafka-relation-…``); Spark assigns partitions itself and never commits."""
CONNECT_INTERNAL = "_mcq-connect-"
"""The Connect worker's config, offset and status topics (``_mcq-connect-configs``…)."""
CONNECT_GROUP = "mcq-connect"
DEBEZIUM_HEARTBEATS = "__debezium-heartbeat."


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW binding: PRINCIPAL may OPERATION on RESOURCE NAME (LITERAL or PREFIXED)."""

    principal: str
    resource: str  # TOPIC, GROUP, CLUSTER
    pattern: str  # LITERAL, PREFIXED
    name: str
    operation: str  # READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS
    why: str = field(default="", compare=False)

    def line(self) -> str:
        what = f"{self.resource.lower()} {self.name}{'*' if self.pattern == 'PREFIXED' else ''}"
        return f"{self.principal}: {self.operation} on {what}"


@dataclass(frozen=True)
class Principals:
    """The identities a plan grants to; see the module docstring for the defaults."""

    prefix: str
    listeners: dict[str, str]
    normaliser: str
    connect: str
    console: str

    @classmethod
    def of(cls, settings: Settings, registry: Registry) -> Principals:
        prefix = settings.topic_prefix
        listeners = {}
        for lst in registry.listeners:
            creds = settings.listener_credentials(lst.name)
            listeners[lst.name] = f"User:{creds.sasl_username if creds else f'{prefix}-listener-{lst.name.lower()}'}"
        return cls(
            prefix=prefix,
            listeners=listeners,
            normaliser=f"User:{prefix}-normaliser",
            connect=f"User:{prefix}-connect",
            console=f"User:{prefix}-console",
        )

    def all(self) -> set[str]:
        return {*self.listeners.values(), self.normaliser, self.connect, self.console}

    def manages(self, principal: str) -> bool:
        """An ACL of this principal belongs to mcq (see the module docstring)."""
        return principal in self.all() or principal.startswith(f"User:{self.prefix}-")


def connect_grants(principal: str) -> list[Grant]:
    """What a Connect worker running mcq's Debezium connectors needs: it runs every source's
    connector, so it writes (and creates) every raw topic, its own worker topics and
    Debezium's heartbeat topics, and uses its worker group. The local stack's worker runs
    under exactly these (``mcq stack up``)."""
    out = []
    for resource, pattern, name, ops, why in (
        (
            "TOPIC",
            "PREFIXED",
            f"{RAW_TOPIC_ROOT}.",
            ("WRITE", "CREATE", "DESCRIBE_CONFIGS"),
            "raw CDC topics of every source",
        ),
        ("TOPIC", "PREFIXED", CONNECT_INTERNAL, ("READ", "WRITE", "CREATE", "DESCRIBE_CONFIGS"), "worker topics"),
        ("TOPIC", "PREFIXED", DEBEZIUM_HEARTBEATS, ("WRITE", "CREATE", "DESCRIBE_CONFIGS"), "Debezium heartbeats"),
        ("GROUP", "LITERAL", CONNECT_GROUP, ("READ",), "the worker group"),
        ("CLUSTER", "LITERAL", "kafka-cluster", ("DESCRIBE", "DESCRIBE_CONFIGS"), "topic creation defaults"),
    ):
        out += [Grant(principal, resource, pattern, name, op, why) for op in ops]
    return out


def plan_acls(registry: Registry, principals: Principals) -> list[Grant]:
    """Every grant the registry's identities need, sorted, without duplicates."""
    p = principals.prefix
    grants: set[Grant] = set()

    def grant(who: str, resource: str, pattern: str, name: str, ops: tuple[str, ...], why: str) -> None:
        grants.update(Grant(who, resource, pattern, name, op, why) for op in ops)

    for lst in registry.listeners:
        who = principals.listeners[lst.name]
        own = ListenerTopics(p, lst.name)
        for topic in interest_topics(registry, own):
            grant(who, "TOPIC", "LITERAL", topic, ("READ", "DESCRIBE_CONFIGS"), "an interest's logical topic")
        for spec in own.specs():  # its heartbeats among them: no one else may write those
            grant(who, "TOPIC", "LITERAL", spec.name, ("READ", "WRITE", "CREATE", "DESCRIBE_CONFIGS"), spec.purpose)
        grant(who, "TOPIC", "LITERAL", own.refresh, ("READ", "DESCRIBE_CONFIGS"), "refresh requests (bulk lane)")
        grant(who, "TOPIC", "LITERAL", registry_topic(p), ("READ",), "the registry store (reloads)")
        grant(who, "GROUP", "LITERAL", own.group, ("READ",), "its real-time consumer group")
        grant(who, "GROUP", "LITERAL", own.bulk_group, ("READ",), "its bulk consumer group")
        grant(who, "GROUP", "PREFIXED", SCRATCH_GROUPS, ("READ",), "assign-only readers that never commit")

    n = principals.normaliser
    read_write = ("READ", "WRITE", "DESCRIBE_CONFIGS")
    for source in registry.sources:
        raw = f"{raw_topic_prefix(source)}."
        grant(n, "TOPIC", "PREFIXED", raw, ("READ", "DESCRIBE_CONFIGS"), f"raw CDC topics of source {source.name}")
    for table in registry.tables:
        grant(n, "TOPIC", "LITERAL", table.topic(p), read_write, f"logical topic {table.ref}")
    grant(n, "TOPIC", "LITERAL", withheld_topic(p), read_write, "what it withheld")
    grant(n, "TOPIC", "LITERAL", refresh_topic(p), read_write, "explicit refresh requests from the outbox")
    grant(n, "TOPIC", "LITERAL", registry_topic(p), ("READ", "DESCRIBE_CONFIGS"), "the registry (never written)")
    grant(n, "TOPIC", "LITERAL", provenance_topic(p), read_write, "first-seen provenance")
    grant(n, "TOPIC", "LITERAL", history_topic(p), ("WRITE", "CREATE", "DESCRIBE_CONFIGS"), "captures (mcq trace)")
    grant(n, "GROUP", "LITERAL", history_topic(p), ("READ",), "the follower of the logical topics (mcq trace)")
    grant(n, "GROUP", "PREFIXED", SPARK_GROUPS, ("READ",), "Spark's Kafka readers")
    grant(n, "GROUP", "PREFIXED", SCRATCH_GROUPS, ("READ",), "assign-only readers that never commit")

    grants.update(connect_grants(principals.connect))

    r = principals.console
    grant(r, "TOPIC", "PREFIXED", f"{p}.", ("READ", "DESCRIBE_CONFIGS"), "browse every mcq topic")
    grant(r, "GROUP", "PREFIXED", f"{p}.", ("DESCRIBE",), "listener lag")
    grant(r, "GROUP", "PREFIXED", SCRATCH_GROUPS, ("READ",), "assign-only readers that never commit")
    return sorted(grants)
