"""A plan of grants against a broker: what it lacks, what it holds beyond the plan, and
``apply``, which changes exactly that (a second apply changes nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

# .admin re-exports these without __all__ (as mcq/topics does for ConfigResource)
from confluent_kafka.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from mcq.acl.exceptions import AclError, AclUnsupported
from mcq.acl.plan import Grant, Principals
from mcq.config import Settings

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class AclDrift:
    missing: list[Grant]
    """In the plan, not on the broker."""
    extra: list[Grant]
    """On the broker for a principal mcq manages, not in the plan (DENY bindings included)."""

    def lines(self, applied: bool = False) -> list[str]:
        """One line per grant: ``missing:``/``extra:``, or once applied ``created:``/``deleted:``."""
        add, remove = ("created", "deleted") if applied else ("missing", "extra")
        return [f"{add}: {g.line()}" for g in self.missing] + [f"{remove}: {g.line()}" for g in self.extra]

    def __bool__(self) -> bool:
        return bool(self.missing or self.extra)


# Kafka's CLUSTER resource is librdkafka's (and confluent-kafka's) BROKER (both type 4)
_RESOURCE_TYPES = {"CLUSTER": ResourceType.BROKER}


def _binding(g: Grant) -> AclBinding:
    return AclBinding(
        _RESOURCE_TYPES.get(g.resource) or ResourceType[g.resource],
        g.name,
        ResourcePatternType[g.pattern],
        g.principal,
        "*",
        AclOperation[g.operation],
        AclPermissionType.ALLOW,
    )


def _name(value: Enum | str | int) -> str:
    return value.name if isinstance(value, Enum) else str(value)


def _grant(b: AclBinding) -> Grant:
    """A broker binding as a grant (a DENY, or a host other than ``*``, which a plan never
    holds, under an operation name that says so: always extra)."""
    op = _name(b.operation)
    if b.permission_type != AclPermissionType.ALLOW or b.host != "*":
        op = f"{op} ({_name(b.permission_type)} from {b.host})"
    resource = "CLUSTER" if b.restype == ResourceType.BROKER else _name(b.restype)
    return Grant(b.principal, resource, _name(b.resource_pattern_type), b.name, op)


class AclAdmin:
    """Reads and changes the ACLs of the cluster ``settings.kafka`` points at."""

    def __init__(self, settings: Settings, admin: AdminClient | None = None) -> None:
        self.settings = settings
        self.admin = admin or AdminClient(settings.kafka.client_config())

    def grant(self, grants: list[Grant]) -> None:
        """Create these bindings (those that exist already stay as they are)."""
        results = self.admin.create_acls([_binding(g) for g in grants], request_timeout=TIMEOUT_S)
        for binding, future in results.items():
            try:
                future.result()
            except KafkaException as exc:
                raise AclError(f"create ACL {binding}: {exc.args[0]}") from None

    def current(self, principals: Principals) -> list[tuple[Grant, AclBinding]]:
        """The broker's bindings of the principals mcq manages."""
        any_ = None  # librdkafka: no name, principal or host given matches any
        everything = AclBindingFilter(
            ResourceType.ANY,
            any_,  # type: ignore[arg-type]
            ResourcePatternType.ANY,
            any_,  # type: ignore[arg-type]
            any_,  # type: ignore[arg-type]
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        try:
            bindings = self.admin.describe_acls(everything, request_timeout=TIMEOUT_S).result()
        except KafkaException as exc:
            err = exc.args[0]
            if "SECURITY_DISABLED" in str(err) or "No Authorizer" in str(err):
                raise AclUnsupported(
                    f"the cluster at {self.settings.kafka.bootstrap_servers} has no authorizer: {err}"
                ) from None
            raise AclError(f"describe ACLs at {self.settings.kafka.bootstrap_servers}: {err}") from None
        out = []
        for b in bindings:
            g = _grant(b)
            if principals.manages(g.principal):
                out.append((g, b))
        return out

    def _compare(self, plan: list[Grant], principals: Principals) -> tuple[list[Grant], list[tuple[Grant, AclBinding]]]:
        """What the plan has and the broker lacks, and the broker's bindings beyond the plan."""
        held = self.current(principals)
        wanted = set(plan)
        have = {g for g, _ in held}
        return sorted(wanted - have), [(g, b) for g, b in held if g not in wanted]

    def diff(self, plan: list[Grant], principals: Principals) -> AclDrift:
        missing, extra = self._compare(plan, principals)
        return AclDrift(missing=missing, extra=sorted(g for g, _ in extra))

    def apply(self, plan: list[Grant], principals: Principals) -> AclDrift:
        """Create what is missing, delete what is extra; returns what was changed."""
        missing, extra = self._compare(plan, principals)
        if missing:
            self.grant(missing)
        if extra:
            filters = [
                AclBindingFilter(
                    b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type
                )
                for _, b in extra
            ]
            for flt, future in self.admin.delete_acls(filters, request_timeout=TIMEOUT_S).items():
                try:
                    future.result()
                except KafkaException as exc:
                    raise AclError(f"delete ACL {flt}: {exc.args[0]}") from None
        return AclDrift(missing=missing, extra=sorted(g for g, _ in extra))
