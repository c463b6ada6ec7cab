"""Settings of the local stack of real services (``stack.*``): where it lives, its ports, its
binaries and whether it is the secure one."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from pydantic import (
    Field,
    SecretStr,
)

from mcq.config.section import CHECKOUT, KAFKA_ADMIN, KAFKA_CONNECT, ConfigError, Section

FIXED_PASSWORDS = {KAFKA_ADMIN: "mcq-admin-local", KAFKA_CONNECT: "mcq-connect-local"}
"""The passwords every local stack had before it made its own: what a stack formatted with
them keeps (its broker's metadata holds them)."""


def _default_home() -> Path:
    if CHECKOUT is not None:
        return CHECKOUT / ".mcq"
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "mcq"


KUBE_VERSION = "v1.34.4"
"""The kube-apiserver ``make kube`` builds (the Makefile's KUBE_VERSION says the same)."""


def _default_kube_apiserver() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "mcq" / f"kube-{KUBE_VERSION}" / "kube-apiserver"


def _default_jvm_cache() -> Path:
    if CHECKOUT is not None:
        return CHECKOUT / ".cache" / "jvm"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcq" / "jvm"


class StackPorts(Section):
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
    spark_master: int = 27077
    """The Spark standalone master (``mcq stack up --with spark``): ``spark://127.0.0.1:27077``."""
    spark_master_ui: int = 28480
    """The master's web UI and its ``/json/`` status (the health check reads the workers there)."""
    spark_worker: int = 27078
    """The first worker's port; worker N listens on this + N - 1, its web UI on the master UI's + N."""
    etcd: int = 22379
    """etcd for the Kubernetes API server (``mcq stack up --with kubernetes``); its peer port is this + 1."""
    kube_apiserver: int = 26443
    """The Kubernetes API server (HTTPS, the stack's CA), ``mcq stack up --with kubernetes``."""


class StackSettings(Section):
    """Where the local stack keeps its state and how big its JVMs may grow."""

    home: Path = Field(default_factory=lambda: Path(os.environ.get("MCQ_HOME") or _default_home()))
    """Where the local stack and mcq's own state live: ``$MCQ_HOME``; by default ``.mcq/``
    of the checkout mcq runs from, or ``$XDG_STATE_HOME/mcq`` (``~/.local/state/mcq``) when
    it is installed."""
    jvm_cache: Path = Field(default_factory=lambda: _default_jvm_cache())
    """The Maven-resolved jars (Spark's Kafka and Avro connectors, the stack's services):
    ``.cache/jvm/`` of the checkout (``make jvm``), or ``$XDG_CACHE_HOME/mcq/jvm`` when
    installed; the image sets ``MCQ_STACK__JVM_CACHE``."""
    ports: StackPorts = StackPorts()
    java: str = "java"
    postgres_bin: Path = Path("/usr/lib/postgresql/15/bin")
    postgres_os_user: str = "postgres"
    """Unix user that runs PostgreSQL when mcq runs as root (PostgreSQL refuses root)."""
    slapd: Path = Path("/usr/sbin/slapd")
    ldap_schema_dir: Path = Path("/etc/ldap/schema")
    ldap_module_dir: Path = Path("/usr/lib/ldap")
    kafka_heap: str = "-Xms512m -Xmx2g"
    """A broker's heap grows with its topics and partitions (0.5 GB live at 6,000 topics)."""
    connect_heap: str = "-Xms256m -Xmx768m"
    registry_heap: str = "-Xms128m -Xmx512m"
    start_timeout_s: float = 150.0
    etcd: Path = Path("/usr/bin/etcd")
    """Debian's etcd (``--with kubernetes``)."""
    kube_apiserver: Path = Field(default_factory=lambda: _default_kube_apiserver())
    """The API server ``make kube`` builds from the Kubernetes Go module, kept outside the
    checkout (``$XDG_CACHE_HOME/mcq/kube-VERSION/``): a clean clone links it, not rebuilds it."""
    spark_worker_cores: int = 16
    """Cores each worker offers: real-time tasks mostly wait on Kafka, so a worker may offer
    more than the machine has (as ``local[N]`` runs N threads); the normaliser's real-time
    queries need one slot per raw topic partition (``streams.realtime.slots_needed``)."""
    spark_worker_memory: str = "3g"
    """Memory each worker gives its executors (an executor takes Spark's ``spark.executor.memory``, 1g)."""
    spark_daemon_heap: str = "512m"
    """The heap of the master's and each worker's own JVM (not the executors')."""
    kafka_admin_password: SecretStr | None = None
    """The SCRAM password of the local broker's ``mcq-admin`` user (a super user, like the
    plaintext loopback port's anonymous clients); unset: the stack's own, made at random
    when its broker is first formatted (:meth:`password_file`)."""
    kafka_connect_password: SecretStr | None = None
    """The SCRAM password of ``mcq-connect``, the identity the local Connect worker uses on
    the broker's SASL_SSL port, limited to what its ACLs allow (``mcq acl plan``); unset:
    the stack's own, made at random likewise."""

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

    def password_file(self, user: str) -> Path:
        """Where the stack keeps the password of ``mcq-admin`` or ``mcq-connect`` when no
        setting gives it: written (0600, whole) when the broker is first formatted, random;
        a stack formatted before these files existed keeps its fixed passwords in them."""
        return self.home / "conf" / f"{user}.password"

    def local_password(self, user: str) -> SecretStr:
        """The SCRAM password of local principal USER on this stack: the admin's and Connect's
        are settings, else the stack's own (:meth:`password_file`); every other one is
        derived from the stack's secret (HMAC-SHA-256), so any mcq process of this ``home``
        can log in as the identity it runs as, and no one without the secret file can."""
        if user in (KAFKA_ADMIN, KAFKA_CONNECT):
            configured = self.kafka_admin_password if user == KAFKA_ADMIN else self.kafka_connect_password
            if configured is not None:
                return configured
            try:
                return SecretStr(self.password_file(user).read_text().strip())
            except OSError:
                return SecretStr(FIXED_PASSWORDS[user])  # no stack formatted here (yet)
        try:
            key = self.secret_file.read_bytes().strip()
        except OSError as exc:
            raise ConfigError(f"{self.secret_file}: the secure stack's secret is unreadable ({exc.strerror})") from None
        return SecretStr(hmac.new(key, user.encode(), hashlib.sha256).hexdigest())
