"""A plan of grants against a broker: what it lacks, what it holds beyond the plan, and
``apply``, which changes exactly that (a second apply changes nothing) -- deleting only
bindings it made itself (mcq.acl.ledger), never a DENY or one added by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

# .admin re-exports these without __all__ (as mcq/topics does for ConfigResource)
from confluent_kafka.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from mcq.acl.exceptions import AclError, AclUnsupported
from mcq.acl.ledger import AclLedger
from mcq.acl.plan import Grant, Principals
from mcq.config import Settings

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class AclDrift:
    missing: list[Grant]
    """In the plan, not on the broker."""
    extra: list[Grant]
    """On the broker, made by ``mcq acl apply`` (mcq.acl.ledger), no longer in the plan."""
    foreign: list[Grant] = field(default_factory=list)
    """On the broker for a principal mcq manages, not in the plan and not made by apply (by
    hand, a DENY, another host): reported, never deleted."""

    def lines(self, applied: bool = False) -> list[str]:
        """One line per grant: ``missing:``/``extra:``, or once applied ``created:``/``deleted:``;
        ``foreign:`` for what apply leaves alone."""
        add, remove = ("created", "deleted") if applied else ("missing", "extra")
        return (
            [f"{add}: {g.line()}" for g in self.missing]
            + [f"{remove}: {g.line()}" for g in self.extra]
            + [f"foreign: {g.line()} (not made by mcq acl apply: left alone)" for g in self.foreign]
        )

    def __bool__(self) -> bool:
        """Drift that apply changes (foreign bindings are not)."""
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
        self.ledger = AclLedger(settings)

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

    def _compare(
        self, plan: list[Grant], principals: Principals, made: set[Grant]
    ) -> tuple[list[Grant], list[tuple[Grant, AclBinding]], list[Grant]]:
        """What the plan has and the broker lacks; the broker's bindings beyond the plan that
        apply made (to delete), and those it did not (foreign: never deleted)."""
        held = self.current(principals)
        wanted = set(plan)
        have = {g for g, _ in held}
        beyond = [(g, b) for g, b in held if g not in wanted]
        extra = [(g, b) for g, b in beyond if g in made]
        foreign = sorted(g for g, _ in beyond if g not in made)
        return sorted(wanted - have), extra, foreign

    def diff(self, plan: list[Grant], principals: Principals) -> AclDrift:
        missing, extra, foreign = self._compare(plan, principals, self.ledger.made())
        return AclDrift(missing=missing, extra=sorted(g for g, _ in extra), foreign=foreign)

    def apply(self, plan: list[Grant], principals: Principals) -> AclDrift:
        """Create what is missing, delete what is extra (only bindings apply made); returns
        what was changed, and what was left alone."""
        made = self.ledger.made()
        missing, extra, foreign = self._compare(plan, principals, made)
        self.ledger.record([g for g in plan if g not in made])
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
            self.ledger.forget([g for g, _ in extra])
        return AclDrift(missing=missing, extra=sorted(g for g, _ in extra), foreign=foreign)
