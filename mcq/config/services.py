"""Settings of the services mcq talks to or serves besides Kafka: Connect, the schema
registry, the console, topics' durability and mcq's own log."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)

from mcq.config.section import CONNECT_REST, Section
from mcq.targets import LOOPBACK


class ConsoleUser(Section):
    """One console login: a password hash (``mcq console --hash-password``; argon2id, never
    the password itself) and a role: ``read`` sees everything, ``admin`` may also act."""

    password_hash: SecretStr
    role: Literal["read", "admin"] = "read"


class ConsoleSettings(Section):
    """The operator's console (``mcq console``): who may log in and where actions are recorded."""

    bind: str = f"{LOOPBACK}:8088"
    users: dict[str, ConsoleUser] = {}
    """Logins by name (``MCQ_CONSOLE__USERS__ALICE__PASSWORD_HASH``, ``…__ROLE``)."""
    trusted_user_header: str | None = None
    """Behind an authenticating reverse proxy: the header naming the user it authenticated
    (``X-Forwarded-User``); only then is it believed, and only from ``trusted_proxies``."""
    trusted_role_header: str | None = None
    """The proxy's header with the user's role (``read`` or ``admin``; default ``read``)."""
    trusted_proxies: tuple[str, ...] = (LOOPBACK,)
    """Client addresses whose trusted headers are believed."""
    session_secret: SecretStr | None = None
    """Signs the session cookie; unset: a random one per process (logins end with it)."""
    refresh_s: int = Field(default=5, ge=1, le=3600)
    """How often the overview refreshes itself."""
    audit_log: Path | None = None
    """Where every console action is recorded as a JSON line (who, what, when); unset:
    ``<stack.home>/logs/console-audit.log``. Rotated at ``audit_log_max_mb`` (the last
    ``audit_log_keep`` files kept: ``.1`` the newest)."""
    audit_log_max_mb: float = Field(default=10.0, gt=0)
    audit_log_keep: int = Field(default=5, ge=1, le=100)
    tls_cert: Path | None = None
    """Serve HTTPS with this certificate (PEM; with ``tls_key``): the session cookie is then
    sent only over TLS (its ``Secure`` flag)."""
    tls_key: Path | None = None
    secure_cookie: bool | None = None
    """The session cookie's ``Secure`` flag; unset: on when the console serves TLS itself.
    Behind a TLS-terminating proxy, set it true."""
    login_free_failures: int = Field(default=3, ge=1, le=100)
    """Failed logins of one user name, or from one address, before each further attempt
    waits: 1 s after the next failure, doubling up to ``login_lockout_max_s``."""
    login_lockout_max_s: float = Field(default=900.0, gt=0)


class HttpServiceSettings(Section):
    """An HTTP service (Kafka Connect, the schema registry), optionally behind basic auth."""

    url: str = ""
    username: str | None = None
    password: SecretStr | None = None

    def auth(self) -> tuple[str, str] | None:
        if self.username is None or self.password is None:
            return None
        return (self.username, self.password.get_secret_value())


class ConnectSettings(HttpServiceSettings):
    """The Kafka Connect worker that runs the Debezium source connectors."""

    natural_text: bool = True
    """The worker has mcq's ``NaturalText`` transform on its plugin path (the local stack
    and the image do: ``jvm/connect-transforms``): connectors write values as compact JSON
    whose dates and times are already text. False, for a worker mcq cannot add a plugin
    to: values carry their Connect schema (about 6x larger) and the normaliser decodes them."""
    slot_retained_warn_mb: int = Field(default=1024, ge=1)
    """``mcq connect status`` and ``mcq status`` warn (exit 1) once a source's replication
    slot holds more WAL than this on the source's disk (``MCQ_CONNECT__SLOT_RETAINED_WARN_MB``)."""
    _stack_password_file: Path | None = PrivateAttr(default=None)
    """The local stack's worker (no url configured): where its REST login's password is."""

    def auth(self) -> tuple[str, str] | None:
        """The configured login; for the local stack's worker, the stack's own (read when
        used: ``mcq stack up`` makes it)."""
        configured = super().auth()
        if configured is not None or self._stack_password_file is None:
            return configured
        try:
            return (CONNECT_REST, self._stack_password_file.read_text().strip())
        except OSError:
            return None  # no stack made in this home yet

    def for_local_stack(self, password_file: Path) -> ConnectSettings:
        """These settings for the local stack's worker, whose REST login is in ``password_file``."""
        copy = self.model_copy()
        copy._stack_password_file = password_file
        return copy


class RegistrySettings(HttpServiceSettings):
    """The Confluent-API schema registry (Apicurio's ``ccompat`` API locally)."""

    def client_config(self) -> dict[str, Any]:
        """Configuration for ``confluent_kafka.schema_registry.SchemaRegistryClient``."""
        conf: dict[str, Any] = {"url": self.url}
        auth = self.auth()
        if auth:
            conf["basic.auth.user.info"] = f"{auth[0]}:{auth[1]}"
        return conf


class TopicSettings(Section):
    """Durability of every topic mcq creates (logical, lanes, dead letters, applied positions,
    heartbeats, the registry store) and, through Connect's topic creation, of the raw CDC
    topics. The local stack has one broker; a production cluster wants 3 and 2."""

    replication_factor: int = -1
    """Replicas of each partition; -1: the cluster's ``default.replication.factor``."""
    min_insync_replicas: int | None = None
    """``min.insync.replicas`` set on each topic (None: the cluster's default). With
    ``acks=all`` (mcq's producers) a write needs this many replicas in sync."""
    history_retention_days: float = Field(default=30.0, gt=0)
    """How long each key's history is kept (``<prefix>._history``, read by ``mcq trace``)."""

    @model_validator(mode="after")
    def _consistent(self) -> TopicSettings:
        if self.replication_factor == 0 or self.replication_factor < -1:
            raise ValueError(
                f"replication_factor must be -1 (the cluster's default) or >= 1, not {self.replication_factor}"
            )
        if self.min_insync_replicas is not None:
            if self.min_insync_replicas < 1:
                raise ValueError(f"min_insync_replicas must be >= 1, not {self.min_insync_replicas}")
            if self.replication_factor != -1 and self.min_insync_replicas > self.replication_factor:
                raise ValueError(
                    f"min_insync_replicas {self.min_insync_replicas} > replication_factor "
                    f"{self.replication_factor}: no write could ever succeed"
                )
        return self

    def config(self) -> dict[str, str]:
        """Topic configuration entries these settings add."""
        return {} if self.min_insync_replicas is None else {"min.insync.replicas": str(self.min_insync_replicas)}


class OutboxSettings(Section):
    """Who may log explicit changes in the source database (``mcq_log_insert/update/delete``,
    SECURITY DEFINER functions ``mcq connect apply`` installs), and how often a whole-table
    request (no key field named: every key stated again to every listener) may come."""

    roles: tuple[str, ...] = ("PUBLIC",)
    """The database roles granted EXECUTE on the functions (``PUBLIC``: every role, as
    before); any other role's grant is revoked on apply."""
    whole_table_every_s: int = Field(default=60, ge=0, le=30 * 86400)
    """At most one whole-table request per table/subtype and calling role this often (0: no limit)."""

    @field_validator("roles")
    @classmethod
    def _roles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for role in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$-]{0,62}", role):
                raise ValueError(f"{role!r} is not a role name")
        return value


class LogSettings(Section):
    """Where mcq's own log goes (:mod:`mcq.logs`). ``MCQ_LOG__FORMAT=json`` writes every
    line as one JSON object on stderr, as a Kubernetes log collector wants it."""

    format: Literal["text", "json"] = "text"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    file: Path | None = None
    """Default ``<stack.home>/logs/mcq.log``; the details of an unexpected error are there."""
