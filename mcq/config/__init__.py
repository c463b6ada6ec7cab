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

import os
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from mcq.config.kafka import (
    JAVA_NAMES,
    KAFKA_CLIENT_LOGGER,
    SPARK_UNPASSED,
    KafkaCredentials,
    KafkaSettings,
    jaas_line,
    kafka_client_logger,
)
from mcq.config.section import CHECKOUT, CONNECT_REST, KAFKA_ADMIN, KAFKA_CONNECT, ConfigError
from mcq.config.services import (
    ConnectSettings,
    ConsoleSettings,
    ConsoleUser,
    HttpServiceSettings,
    LogSettings,
    OutboxSettings,
    RegistrySettings,
    TopicSettings,
)
from mcq.config.stack import StackPorts, StackSettings
from mcq.targets import LOOPBACK, DatabaseSettings, LdapSettings, TargetConnection, find_target

__all__ = [
    "CHECKOUT",
    "CONNECT_REST",
    "JAVA_NAMES",
    "KAFKA_ADMIN",
    "KAFKA_CLIENT_LOGGER",
    "KAFKA_CONNECT",
    "LOOPBACK",
    "SPARK_UNPASSED",
    "ConfigError",
    "ConnectSettings",
    "ConsoleSettings",
    "ConsoleUser",
    "DatabaseSettings",
    "HttpServiceSettings",
    "KafkaCredentials",
    "KafkaSettings",
    "LdapSettings",
    "LogSettings",
    "OutboxSettings",
    "RegistrySettings",
    "Settings",
    "StackPorts",
    "StackSettings",
    "TopicSettings",
    "jaas_line",
    "kafka_client_logger",
    "load_settings",
]


def _yaml_file() -> Path | None:
    explicit = os.environ.get("MCQ_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"MCQ_CONFIG={explicit}: no such file")
        return path
    default = Path("mcq.yaml")
    return default if default.is_file() else None


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
    defaults. Passwords may be references (``${env:MCQ_SECRET_AD_PASSWORD}``), resolved on connecting."""
    topics: TopicSettings = TopicSettings()
    console: ConsoleSettings = ConsoleSettings()
    log: LogSettings = LogSettings()
    outbox: OutboxSettings = OutboxSettings()
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
            "connect": self.connect
            if self.connect.url
            else self.connect.model_copy(update={"url": f"{local}:{ports.connect}"}).for_local_stack(
                self.stack.password_file(CONNECT_REST)
            ),
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
                "sasl_password": kafka.sasl_password or self.stack.local_password(KAFKA_ADMIN),
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
