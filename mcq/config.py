"""Typed configuration, validated at the edge.

Every address and Kafka security setting comes from (highest first): environment
variables ``MCQ_<SECTION>__<FIELD>`` (for example ``MCQ_KAFKA__BOOTSTRAP_SERVERS``),
a YAML file named by ``MCQ_CONFIG`` (default ``mcq.yaml`` in the working directory
when present), then the defaults, which point at the local stack (`mcq stack up`).
Point the same code at a real cluster by setting the addresses; nothing else changes.

Secrets are :class:`pydantic.SecretStr`: they print as ``**********`` and are only
revealed where a client library needs them.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from mcq.errors import EXIT_CONFIG, McqError
from mcq.secrets import SECRET_KEY
from mcq.targets import LOOPBACK as LOOPBACK  # re-exported: what every service binds to
from mcq.targets import DatabaseSettings as DatabaseSettings
from mcq.targets import LdapSettings as LdapSettings
from mcq.targets import TargetConnection, find_target

PROJECT_ROOT = Path(__file__).resolve().parent.parent
KAFKA_ADMIN = "mcq-admin"
"""The local broker's SCRAM super user (its password: ``stack.kafka_admin_password``)."""
KAFKA_CONNECT = "mcq-connect"
"""The local Connect worker's identity on the broker's SASL_SSL port: no super user, only
its ACLs (``mcq.acl.plan.connect_grants``), so capture runs as least privilege wants it."""


class ConfigError(McqError):
    """Configuration that cannot be used; the message says which setting and where."""

    exit_code = EXIT_CONFIG


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StackPorts(_Section):
    """Ports of the local stack: non-default so nothing collides with a real install, and
    below Linux's ephemeral range (32768-60999): a client that keeps reconnecting to a
    port of that range while its server restarts can be given that very port as its own
    and connect to itself (TCP simultaneous open), and the server then cannot bind it
    (a broker SIGKILLed under load stayed down: "port 59092 ... already in use")."""

    postgres: int = 25432
    kafka: int = 29092
    kafka_controller: int = 29093
    kafka_sasl: int = 29094
    """The broker's SASL_SSL listener (SCRAM-SHA-512 over TLS with the stack's CA): every
    client there has an identity and gets only what its ACLs allow (``mcq acl``)."""
    connect: int = 28083
    registry: int = 28081
    ldap: int = 23389
    ldaps: int = 23636


class StackSettings(_Section):
    """Where the local stack keeps its state and how big its JVMs may grow."""

    home: Path = Field(default_factory=lambda: Path(os.environ.get("MCQ_HOME", PROJECT_ROOT / ".mcq")))
    jvm_cache: Path = PROJECT_ROOT / ".cache" / "jvm"
    ports: StackPorts = StackPorts()
    java: str = "java"
    postgres_bin: Path = Path("/usr/lib/postgresql/15/bin")
    postgres_os_user: str = "postgres"
    """Unix user that runs PostgreSQL when mcq runs as root (PostgreSQL refuses root)."""
    slapd: Path = Path("/usr/sbin/slapd")
    ldap_schema_dir: Path = Path("/etc/ldap/schema")
    ldap_module_dir: Path = Path("/usr/lib/ldap")
    kafka_heap: str = "-Xms256m -Xmx768m"
    connect_heap: str = "-Xms256m -Xmx768m"
    registry_heap: str = "-Xms128m -Xmx512m"
    start_timeout_s: float = 150.0
    kafka_admin_password: SecretStr = SecretStr("mcq-admin-local")
    """The SCRAM password of the local broker's ``mcq-admin`` user (a super user, like the
    plaintext loopback port's anonymous clients)."""
    kafka_connect_password: SecretStr = SecretStr("mcq-connect-local")
    """The SCRAM password of ``mcq-connect``, the identity the local Connect worker uses on
    the broker's SASL_SSL port, limited to what its ACLs allow (``mcq acl plan``)."""

    @property
    def secure_marker(self) -> Path:
        """Present while the stack in ``home`` is the secure one (``mcq stack up --secure``)."""
        return self.home / "conf" / "secure"

    @property
    def secret_file(self) -> Path:
        """The secure stack's random secret (mode 0600), from which the passwords of its
        local principals (normaliser, console, each listener) are derived; kept when the
        stack goes back to plaintext, so users made under it keep working."""
        return self.home / "conf" / "kafka-principals.secret"

    @property
    def secure(self) -> bool:
        """The stack in ``home`` is the secure one: its broker has no plaintext port, and
        mcq's clients default to SASL_SSL there."""
        return self.secure_marker.is_file()

    @property
    def ca_cert(self) -> Path:
        """The stack's CA certificate (``mcq.stack.tls``): what its clients trust."""
        return self.home / "tls" / "ca.crt"

    def set_secure(self, secure: bool) -> None:
        """Mark the stack in ``home`` secure (making its secret once) or plaintext."""
        if not secure:
            self.secure_marker.unlink(missing_ok=True)
            return
        self.secure_marker.parent.mkdir(parents=True, exist_ok=True)
        if not self.secret_file.is_file():
            fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
        self.secure_marker.write_text("made by `mcq stack up --secure`; `mcq stack up --plaintext` removes it\n")

    def local_password(self, user: str) -> SecretStr:
        """The SCRAM password of local principal USER on this stack: the admin's and Connect's
        are settings; every other one is derived from the stack's secret (HMAC-SHA-256), so
        any mcq process of this ``home`` can log in as the identity it runs as, and no one
        without the secret file can."""
        if user == KAFKA_ADMIN:
            return self.kafka_admin_password
        if user == KAFKA_CONNECT:
            return self.kafka_connect_password
        try:
            key = self.secret_file.read_bytes().strip()
        except OSError as exc:
            raise ConfigError(f"{self.secret_file}: the secure stack's secret is unreadable ({exc.strerror})") from None
        return SecretStr(hmac.new(key, user.encode(), hashlib.sha256).hexdigest())


KAFKA_CLIENT_LOGGER = "mcq.kafka.client"


def kafka_client_logger(level: str) -> logging.Logger:
    """The Python logger confluent-kafka's clients hand librdkafka's lines to (its default
    is to print every one on stderr, dozens a second while a broker restarts)."""
    logger = logging.getLogger(KAFKA_CLIENT_LOGGER)
    if not logger.handlers:
        logger.propagate = False
        handler: logging.Handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("kafka client: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.CRITICAL + 1 if level == "off" else getattr(logging, level.upper()))
    return logger


class KafkaSettings(_Section):
    """Kafka client settings, shared by producers, consumers, admin and Spark."""

    bootstrap_servers: str = ""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: Path | None = None
    client_log_level: Literal["off", "error", "warning", "info", "debug"] = "off"
    """librdkafka's own log lines ("Connection refused" while a broker restarts, metadata
    updates): written to stderr from this level up; off by default, since mcq says itself
    what an operator must know ("kafka is not answering while ...; waiting for it")."""
    extra: dict[str, str] = {}
    """Any other librdkafka property: passed unchanged to confluent-kafka, and to Spark's Kafka
    source/sink as ``kafka.<name>`` (renamed where the Java client calls it otherwise; the
    librdkafka-only ones listed in ``SPARK_UNPASSED`` are not passed). A property whose name
    says it is secret (``sasl.oauthbearer.client.secret``, ``ssl.key.password``…) is masked
    wherever the settings are shown (``mcq config``)."""

    @field_serializer("extra")
    def _mask_extra(self, extra: dict[str, str]) -> dict[str, str]:
        return {k: "**********" if SECRET_KEY.search(k) else v for k, v in extra.items()}

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, (self._mask_extra(value) if name == "extra" else value)

    def client_config(self) -> dict[str, Any]:
        """The confluent-kafka (librdkafka) configuration for these settings."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
            "logger": kafka_client_logger(self.client_log_level),
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = str(self.ssl_ca_location)
        conf.update(self.extra)
        return conf

    def spark_options(self) -> dict[str, str]:
        """The same settings as options of Spark's Kafka source/sink (``kafka.*``)."""
        opts = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "kafka.security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            opts["kafka.sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_mechanism == "OAUTHBEARER":
            opts.update(self._spark_oauthbearer())
        elif self.sasl_username and self.sasl_password is not None:
            module = (
                "org.apache.kafka.common.security.scram.ScramLoginModule"
                if self.sasl_mechanism and self.sasl_mechanism.startswith("SCRAM")
                else "org.apache.kafka.common.security.plain.PlainLoginModule"
            )
            opts["kafka.sasl.jaas.config"] = jaas_line(
                module, username=self.sasl_username, password=self.sasl_password.get_secret_value()
            )
        if self.ssl_ca_location:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.location"] = str(self.ssl_ca_location)
        for name, value in self.extra.items():
            if name in SPARK_UNPASSED or name.startswith(("sasl.kerberos.", "sasl.oauthbearer.")):
                continue
            if name == "ssl.ca.location":
                opts["kafka.ssl.truststore.type"] = "PEM"
                name = "ssl.truststore.location"
            elif name == "ssl.endpoint.identification.algorithm" and value == "none":
                value = ""  # the Java client's "no host name check"
            opts[f"kafka.{JAVA_NAMES.get(name, name)}"] = value
        return opts

    def _spark_oauthbearer(self) -> dict[str, str]:
        """OAUTHBEARER with OIDC client credentials, as librdkafka takes it in ``extra``
        (``sasl.oauthbearer.method: oidc``, ``.client.id``, ``.client.secret``,
        ``.token.endpoint.url``, ``.scope``), for the Java client: a JAAS line and the login
        callback handler that fetches the token. (Kafka 4 clients also want the endpoint in
        the JVM property ``org.apache.kafka.sasl.oauthbearer.allowed.urls``.)"""
        x = self.extra
        endpoint = x.get("sasl.oauthbearer.token.endpoint.url")
        if not endpoint or "sasl.oauthbearer.client.id" not in x:
            return {}  # an unsecured JWT or a custom handler: configured through kafka.extra alone
        fields = {
            "clientId": x["sasl.oauthbearer.client.id"],
            "clientSecret": x.get("sasl.oauthbearer.client.secret", ""),
        }
        if x.get("sasl.oauthbearer.scope"):
            fields["scope"] = x["sasl.oauthbearer.scope"]
        return {
            "kafka.sasl.jaas.config": jaas_line(
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule", **fields
            ),
            "kafka.sasl.oauthbearer.token.endpoint.url": endpoint,
            "kafka.sasl.login.callback.handler.class": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
            ),
        }


def jaas_line(module: str, **options: str) -> str:
    """A JAAS line: each value quoted, with the backslashes and quotes inside it escaped
    (Kafka's parser reads C-style escapes in quoted strings; a password with ``"`` in it
    would otherwise end the value early)."""

    def quote(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return f"{module} required {' '.join(f'{k}={quote(v)}' for k, v in options.items())};"


# librdkafka properties the Java client (Spark's Kafka source and sink) knows by another name
JAVA_NAMES = {
    "topic.metadata.refresh.interval.ms": "metadata.max.age.ms",
    "queue.buffering.max.ms": "linger.ms",
}
# kafka.extra entries that never reach Spark: librdkafka-only properties with no Java
# equivalent (certificate and key *files*: the Java client wants a keystore; librdkafka's
# logging, statistics and socket tuning; sasl.username/password, which the Java client takes
# as a JAAS line built from kafka.sasl_username/sasl_password; Kerberos kinit and OAUTHBEARER
# settings, prefixes sasl.kerberos./sasl.oauthbearer., configured through JAAS there), and
# consumer/producer settings Spark's Kafka connector manages itself and refuses as options.
SPARK_UNPASSED = frozenset(
    {
        "ssl.certificate.location", "ssl.key.location", "ssl.key.password", "ssl.keystore.location",
        "ssl.keystore.password", "enable.ssl.certificate.verification", "ssl.ca.certificate.stores",
        "sasl.username", "sasl.password", "debug", "log_level", "log.connection.close",
        "statistics.interval.ms", "api.version.request", "broker.version.fallback", "socket.keepalive.enable",
        "socket.nagle.disable", "enable.partition.eof", "queue.buffering.max.messages",
        "queue.buffering.max.kbytes", "group.id", "auto.offset.reset", "enable.auto.commit",
        "key.deserializer", "value.deserializer", "key.serializer", "value.serializer", "interceptor.classes",
    }
)  # fmt: skip


class KafkaCredentials(_Section):
    """One process's own Kafka identity (SASL), laid over ``kafka``'s settings: a listener's
    (``MCQ_LISTENERS__<NAME>__SASL_USERNAME`` / ``__SASL_PASSWORD``), so each listener reads and
    writes only what its ACLs allow (``mcq acl plan``)."""

    sasl_username: str
    sasl_password: SecretStr


class ConsoleUser(_Section):
    """One console login: a password hash (``mcq console --hash-password``; argon2id, never
    the password itself) and a role: ``read`` sees everything, ``admin`` may also act."""

    password_hash: SecretStr
    role: Literal["read", "admin"] = "read"


class ConsoleSettings(_Section):
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
    ``<stack.home>/logs/console-audit.log``."""


class HttpServiceSettings(_Section):
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


class RegistrySettings(HttpServiceSettings):
    """The Confluent-API schema registry (Apicurio's ``ccompat`` API locally)."""

    def client_config(self) -> dict[str, Any]:
        """Configuration for ``confluent_kafka.schema_registry.SchemaRegistryClient``."""
        conf: dict[str, Any] = {"url": self.url}
        auth = self.auth()
        if auth:
            conf["basic.auth.user.info"] = f"{auth[0]}:{auth[1]}"
        return conf


class TopicSettings(_Section):
    """Durability of every topic mcq creates (logical, lanes, dead letters, applied positions,
    heartbeats, the registry store) and, through Connect's topic creation, of the raw CDC
    topics. The local stack has one broker; a production cluster wants 3 and 2."""

    replication_factor: int = -1
    """Replicas of each partition; -1: the cluster's ``default.replication.factor``."""
    min_insync_replicas: int | None = None
    """``min.insync.replicas`` set on each topic (None: the cluster's default). With
    ``acks=all`` (mcq's producers) a write needs this many replicas in sync."""

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


def _yaml_file() -> Path | None:
    explicit = os.environ.get("MCQ_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"MCQ_CONFIG={explicit}: no such file")
        return path
    default = Path("mcq.yaml")
    return default if default.is_file() else None


class LogSettings(_Section):
    """Where mcq's own log goes (:mod:`mcq.logs`). ``MCQ_LOG__FORMAT=json`` writes every
    line as one JSON object on stderr, as a Kubernetes log collector wants it."""

    format: Literal["text", "json"] = "text"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    file: Path | None = None
    """Default ``<stack.home>/logs/mcq.log``; the details of an unexpected error are there."""


class Settings(BaseSettings):
    """All of mcq's settings. Empty addresses default to the local stack's."""

    model_config = SettingsConfigDict(
        env_prefix="MCQ_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    stack: StackSettings = StackSettings()
    kafka: KafkaSettings = KafkaSettings()
    connect: ConnectSettings = ConnectSettings()
    registry: RegistrySettings = RegistrySettings()
    source: DatabaseSettings = DatabaseSettings()
    vendor: DatabaseSettings = DatabaseSettings()
    ldap: LdapSettings = LdapSettings()
    targets: dict[str, TargetConnection] = {}
    """Named connections to targets, for listeners that write to more than one directory or
    database (ADSI to Active Directory beside LDAP to OpenLDAP): a listener's adapter
    settings name one (``target: ad``); ``ldap``, ``vendor`` and ``source`` stay the
    defaults. Passwords may be references (``${env:AD_PASSWORD}``), resolved on connecting."""
    topics: TopicSettings = TopicSettings()
    console: ConsoleSettings = ConsoleSettings()
    log: LogSettings = LogSettings()
    listeners: dict[str, KafkaCredentials] = {}
    """Per-listener Kafka credentials (a listener's name, any case): ``mcq listen NAME`` and
    the commands acting for NAME use them instead of ``kafka.sasl_username/password``."""
    topic_prefix: str = Field(default="mcq", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    """Logical topics are ``<prefix>.<tname>[.<subtype>]``; a prefix per environment or test."""
    state_dir: Path | None = None
    """Where listeners keep a snapshot of their applied positions, and projection listeners
    (``ldap``, ``sql_import``) of their state store, so a scheduled run reads only what the
    topics gained since the last run; unset:
    ``<stack.home>/state``; empty or ``none``: no snapshot, every run reads the topics whole
    (a pod without a volume)."""

    _local_identity: bool = PrivateAttr(default=False)
    """The Kafka identity is the secure local stack's admin, filled in by default (no
    bootstrap servers configured): the processes acting for one principal (the normaliser,
    a listener) then log in as that principal instead (:meth:`as_local_principal`)."""

    def ldap_target(self, name: str | None) -> LdapSettings:
        """The directory a listener's ``target`` names (None: the deployment's ``ldap``)."""
        if name is None:
            return self.ldap
        return find_target(self.targets, name, "ldap")  # type: ignore[return-value]

    def database(self, name: str) -> DatabaseSettings:
        """The database ``vendor``, ``source`` or a named ``postgres`` target stands for."""
        if name in ("vendor", "source"):
            return self.vendor if name == "vendor" else self.source
        return find_target(self.targets, name, "postgres")  # type: ignore[return-value]

    def listener_credentials(self, name: str) -> KafkaCredentials | None:
        """Listener NAME's own Kafka credentials, if ``listeners`` has them (names compared
        without case: environment variables are)."""
        return next((c for n, c in self.listeners.items() if n.lower() == name.lower()), None)

    def for_listener(self, name: str) -> Settings:
        """These settings as listener NAME uses them: its own Kafka credentials when it has any."""
        creds = self.listener_credentials(name)
        if creds is None:
            return self.as_local_principal(f"{self.topic_prefix}-listener-{name.lower()}")
        kafka = self.kafka.model_copy(
            update={"sasl_username": creds.sasl_username, "sasl_password": creds.sasl_password}
        )
        return self.model_copy(update={"kafka": kafka})

    @property
    def local_identities(self) -> bool:
        """True on the secure local stack with no Kafka identity configured: the stack's admin
        is the default identity, and each process logs in as its own local principal."""
        return self._local_identity

    def for_normaliser(self) -> Settings:
        """These settings as the normaliser uses them: on the secure local stack, as
        ``<prefix>-normaliser`` (the principal ``mcq acl apply`` grants its ACLs)."""
        return self.as_local_principal(f"{self.topic_prefix}-normaliser")

    def as_local_principal(self, user: str) -> Settings:
        """On the secure local stack with no Kafka identity configured, these settings as
        USER with its derived password (``stack.local_password``); otherwise unchanged."""
        if not self._local_identity:
            return self
        kafka = self.kafka.model_copy(update={"sasl_username": user, "sasl_password": self.stack.local_password(user)})
        copy = self.model_copy(update={"kafka": kafka})
        copy._local_identity = False
        return copy

    @field_validator("state_dir", mode="before")
    @classmethod
    def _no_state_dir(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip().lower() in ("", "none", "off") else value

    @model_validator(mode="after")
    def _default_to_local_stack(self) -> Settings:
        ports = self.stack.ports
        local = f"http://{LOOPBACK}"
        # the settings are frozen: blanks are filled on copies, set once, here
        fills: dict[str, object] = {
            "kafka": self._local_kafka(),
            "connect": self.connect.model_copy(update={"url": self.connect.url or f"{local}:{ports.connect}"}),
            "registry": self.registry.model_copy(
                update={"url": self.registry.url or f"{local}:{ports.registry}/apis/ccompat/v7"}
            ),
            "source": self.source.model_copy(
                update={"port": self.source.port or ports.postgres, "dbname": self.source.dbname or "mcq_source"}
            ),
            "vendor": self.vendor.model_copy(
                update={"port": self.vendor.port or ports.postgres, "dbname": self.vendor.dbname or "mcq_vendor"}
            ),
            "ldap": self.ldap.model_copy(
                update={
                    "url": self.ldap.url or f"ldap://{LOOPBACK}:{ports.ldap}",
                    "bind_dn": self.ldap.bind_dn or f"cn=admin,{self.ldap.base_dn}",
                }
            ),
        }
        fills["log"] = self.log.model_copy(update={"file": self.log.file or self.stack.home / "logs" / "mcq.log"})
        if "state_dir" not in self.model_fields_set:  # follows the stack's home unless set (or turned off)
            fills["state_dir"] = self.stack.home / "state"
        for name, value in fills.items():
            object.__setattr__(self, name, value)
        return self

    def _local_kafka(self) -> KafkaSettings:
        """The Kafka settings, the local stack's broker filled in when none is configured: its
        plaintext port, or on the secure stack its SASL_SSL port as the admin."""
        kafka, ports = self.kafka, self.stack.ports
        if kafka.bootstrap_servers:
            return kafka
        if not self.stack.secure:
            return kafka.model_copy(update={"bootstrap_servers": f"{LOOPBACK}:{ports.kafka}"})
        if kafka.sasl_username is None:
            self._local_identity = True
        return kafka.model_copy(
            update={
                "bootstrap_servers": f"{LOOPBACK}:{ports.kafka_sasl}",
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": kafka.sasl_mechanism or "SCRAM-SHA-512",
                "sasl_username": kafka.sasl_username or KAFKA_ADMIN,
                "sasl_password": kafka.sasl_password or self.stack.kafka_admin_password,
                "ssl_ca_location": kafka.ssl_ca_location or self.stack.ca_cert,
            }
        )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        yaml_file = _yaml_file()
        if yaml_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)


def load_settings(**overrides: Any) -> Settings:
    """Load settings, turning pydantic's report into one :class:`ConfigError`."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        where = os.environ.get("MCQ_CONFIG") or ("mcq.yaml" if Path("mcq.yaml").is_file() else "environment")
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"invalid configuration ({where}): {problems}") from None
