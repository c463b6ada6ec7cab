"""The services of the local stack: how each is prepared, started and checked.

Every service is a real server: PostgreSQL and OpenLDAP from Debian's packages,
Kafka, Kafka Connect (with Debezium) and Apicurio Registry from the JVM artifacts that
``jvm/pom.xml`` resolves from Maven Central. A health check is a real round trip, not
an open port: a produced-and-consumed record, a plugin listing, a registry answer, a bind.
"""

from __future__ import annotations

import base64
import hashlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from mcq.config import KAFKA_ADMIN, KAFKA_CONNECT, LOOPBACK, Settings, jaas_line
from mcq.stack.exceptions import MissingRuntime, ServiceFailed
from mcq.stack.process import ProcessHandle
from mcq.stack.tls import stack_tls

if TYPE_CHECKING:
    import psycopg

DEBEZIUM_POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
HEALTH_TOPIC = "_mcq.health"
KAFKA_CONTROLLER = "mcq-controller"
"""The secure stack's broker-to-controller identity (SASL PLAIN on the controller port, whose
only user it is: SCRAM credentials live in the metadata the controller serves)."""
__all__ = ["KAFKA_ADMIN", "KAFKA_CONNECT", "KAFKA_CONTROLLER"]


class NotReady(Exception):
    """A health check that did not pass (yet); the message says why."""


class Service(ABC):
    """One server of the stack."""

    name: ClassVar[str]
    depends_on: ClassVar[tuple[str, ...]] = ()
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = settings.stack.home
        self.handle = ProcessHandle(
            name=self.name,
            pid_file=self.home / "run" / f"{self.name}.pid",
            log_file=self.home / "logs" / f"{self.name}.log",
            marker=self.marker,
        )

    @property
    def data_dir(self) -> Path:
        return self.home / "data" / self.name

    @property
    def conf_dir(self) -> Path:
        return self.home / "conf" / self.name

    @property
    @abstractmethod
    def marker(self) -> str:
        """A string of the command line that identifies this service's process."""

    @property
    @abstractmethod
    def ports(self) -> tuple[int, ...]:
        """Ports the service listens on (all on 127.0.0.1)."""

    @property
    @abstractmethod
    def address(self) -> str:
        """Where clients reach the service."""

    def prepare(self) -> None:  # noqa: B027 - a hook: most services need no preparation
        """Create configuration and one-time state; safe to run on every start."""

    @abstractmethod
    def argv(self) -> list[str]:
        """The command that runs the service in the foreground."""

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def run_as(self) -> str | None:
        return None

    @abstractmethod
    def check(self) -> None:
        """Raise :class:`NotReady` unless the service answers a real request."""

    def after_start(self) -> None:  # noqa: B027 - a hook: most services need nothing after start
        """Work that needs the running service (databases, base entries)."""

    def start(self) -> int:
        self.prepare()
        return self.handle.spawn(self.argv(), self.env(), cwd=self.home, user=self.run_as())

    def _require(self, path: Path, what: str) -> Path:
        if not path.exists():
            raise MissingRuntime(self.name, f"{what} not found at {path}; run `make install`", self.handle.log_file)
        return path

    def _run(self, argv: list[str], user: str | None = None, hide: tuple[str, ...] = ()) -> None:
        """Run a preparation command, its output into the service log (the HIDE values masked
        in its logged command line); fail in one line."""
        self.handle.log_file.parent.mkdir(parents=True, exist_ok=True)
        shown = " ".join(argv)
        for secret in hide:
            shown = shown.replace(secret, "**********")
        with self.handle.log_file.open("ab") as log:
            log.write(f"\n=== mcq: {shown}\n".encode())
            log.flush()
            rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, user=user, check=False).returncode
        if rc != 0:
            raise ServiceFailed(self.name, f"`{Path(argv[0]).name}` exited with {rc}", self.handle.log_file)


# ---------------------------------------------------------------- PostgreSQL


class Postgres(Service):
    """One PostgreSQL cluster (wal_level=logical) holding the source, the vendor
    target and the schema registry's storage, each its own database."""

    name = "postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown: roll back clients, checkpoint, exit

    @property
    def marker(self) -> str:
        return str(self.data_dir)

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.postgres,)

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.settings.stack.ports.postgres}"

    @property
    def socket_dir(self) -> Path:
        return self.home / "run" / "postgres"

    @property
    def databases(self) -> list[str]:
        return [self.settings.source.dbname, self.settings.vendor.dbname, "mcq_registry"]

    def run_as(self) -> str | None:
        # PostgreSQL refuses to run as root; as anyone else it runs as that user.
        return self.settings.stack.postgres_os_user if os.geteuid() == 0 else None

    def _own(self, *paths: Path) -> None:
        user = self.run_as()
        if user is None:
            return
        pw = pwd.getpwnam(user)
        for path in paths:
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def _bin(self, prog: str) -> str:
        return str(self._require(self.settings.stack.postgres_bin / prog, f"PostgreSQL's {prog}"))

    def _check_reachable(self) -> None:
        """As root, PostgreSQL runs as another user, who must be able to reach MCQ_HOME."""
        user = self.run_as()
        if user is None:
            return
        probe = subprocess.run(["test", "-x", str(self.home)], user=user, check=False)
        if probe.returncode != 0:
            raise ServiceFailed(
                self.name,
                f"user {user!r} (PostgreSQL refuses to run as root) cannot reach {self.home}; "
                "choose an MCQ_HOME whose parent directories others may traverse (chmod o+x)",
                self.handle.log_file,
            )

    @property
    def tls_key(self) -> Path:
        """The server key, PostgreSQL's own copy (it must belong to the server's user, mode 0600)."""
        return self.data_dir.parent / "postgres-server.key"

    def prepare(self) -> None:
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._check_reachable()
        self._own(self.socket_dir)
        tls = stack_tls(self.settings).ensure()
        self.tls_key.write_bytes(tls.server_key.read_bytes())
        self.tls_key.chmod(0o600)
        self._own(self.tls_key)
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        self._own(self.data_dir)
        pwfile = self.data_dir.parent / ".pg-initial-password"
        pwfile.write_text(self.settings.source.password.get_secret_value() + "\n")
        pwfile.chmod(0o600)
        self._own(pwfile)
        try:
            self._run(
                [
                    self._bin("initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    self.settings.source.user,
                    f"--pwfile={pwfile}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                ],
                user=self.run_as(),
            )
        finally:
            pwfile.unlink(missing_ok=True)
        with (self.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 scram-sha-256\n")

    def argv(self) -> list[str]:
        s = self.settings.stack
        conf = {
            "listen_addresses": LOOPBACK,
            "port": s.ports.postgres,
            "unix_socket_directories": self.socket_dir,
            "wal_level": "logical",
            "max_wal_senders": 20,
            "max_replication_slots": 40,
            "max_connections": 200,
            "shared_buffers": "128MB",
            "logging_collector": "off",
            # TLS offered (clients choose: libpq's default sslmode=prefer takes it, verify-full
            # checks it against the stack's CA, <MCQ_HOME>/tls/ca.crt)
            "ssl": "on",
            "ssl_cert_file": stack_tls(self.settings).server_cert,
            "ssl_key_file": self.tls_key,
        }
        flags = [f"--{k}={v}" for k, v in conf.items()]
        return [self._bin("postgres"), "-D", str(self.data_dir), *flags]

    def _connect(self, dbname: str) -> psycopg.Connection[tuple[Any, ...]]:
        import psycopg

        db = self.settings.source
        return psycopg.connect(
            host=LOOPBACK,
            port=self.settings.stack.ports.postgres,
            dbname=dbname,
            user=db.user,
            password=db.password.get_secret_value(),
            connect_timeout=3,
            autocommit=True,
        )

    def after_start(self) -> None:
        with self._connect("postgres") as conn:
            existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()}
            for db in self.databases:
                if db not in existing:
                    conn.execute(f'CREATE DATABASE "{db}"')
            vendor = self.settings.vendor
            if vendor.user != self.settings.source.user:
                if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (vendor.user,)).fetchone():
                    conn.execute(f"CREATE ROLE \"{vendor.user}\" LOGIN PASSWORD '{vendor.password.get_secret_value()}'")
                conn.execute(f'GRANT ALL ON DATABASE "{vendor.dbname}" TO "{vendor.user}"')

    def check(self) -> None:
        import psycopg

        try:
            with self._connect("postgres") as conn:
                row = conn.execute("SHOW wal_level").fetchone()
        except psycopg.OperationalError as exc:
            raise NotReady(str(exc).strip().splitlines()[0]) from None
        wal = row[0] if row else None
        if wal != "logical":
            raise NotReady(f"wal_level is {wal}, logical decoding needs 'logical'")


# ---------------------------------------------------------------- OpenLDAP


def _ssha(secret: str) -> str:
    salt = secrets.token_bytes(8)
    digest = hashlib.sha1(secret.encode() + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


class Ldap(Service):
    """OpenLDAP's slapd with an mdb database for the base DN, people and groups."""

    name = "ldap"
    stop_signal = signal.SIGINT

    @property
    def marker(self) -> str:
        return str(self.conf_dir)

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.ldap, self.settings.stack.ports.ldaps)

    @property
    def address(self) -> str:
        return f"ldap://{LOOPBACK}:{self.settings.stack.ports.ldap}"

    @property
    def tls_address(self) -> str:
        return f"ldaps://{LOOPBACK}:{self.settings.stack.ports.ldaps}"

    def _tls_ldif(self) -> str:
        """cn=config's TLS attributes: the stack's certificate for ldaps:// and StartTLS."""
        tls = stack_tls(self.settings).ensure()
        return (
            f"olcTLSCACertificateFile: {tls.ca_cert}\n"
            f"olcTLSCertificateFile: {tls.server_cert}\n"
            f"olcTLSCertificateKeyFile: {tls.server_key}\n"
        )

    def _add_tls(self) -> None:
        """A directory made before the stack had TLS: add it to cn=config (offline, slapmodify)."""
        if "olcTLSCertificateFile" in (self.conf_dir / "cn=config.ldif").read_text():
            return
        slapmodify = self._require(self.settings.stack.slapd.parent / "slapmodify", "OpenLDAP's slapmodify")
        ldif = self.conf_dir.parent / "ldap-tls.ldif"
        lines = self._tls_ldif().splitlines()
        changes = "".join(f"add: {line.split(':')[0]}\n{line}\n-\n" for line in lines)
        ldif.write_text(f"dn: cn=config\nchangetype: modify\n{changes}")
        self._run([str(slapmodify), "-n", "0", "-F", str(self.conf_dir), "-l", str(ldif)])

    def prepare(self) -> None:
        slapadd = self._require(self.settings.stack.slapd.parent / "slapadd", "OpenLDAP's slapadd")
        self._require(self.settings.stack.slapd, "OpenLDAP's slapd")
        if (self.conf_dir / "cn=config.ldif").exists():
            self._add_tls()
            return
        ldap = self.settings.ldap
        schema = self.settings.stack.ldap_schema_dir
        run = self.home / "run"
        shutil.rmtree(self.conf_dir, ignore_errors=True)
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.conf_dir.mkdir(parents=True)
        self.data_dir.mkdir(parents=True)
        run.mkdir(parents=True, exist_ok=True)
        includes = "".join(
            f"include: file://{self._require(schema / f'{s}.ldif', f'LDAP schema {s}')}\n\n"
            for s in ("core", "cosine", "nis", "inetorgperson")
        )
        config = f"""\
dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: {run}/slapd.pid
olcArgsFile: {run}/slapd.args
{self._tls_ldif()}
dn: cn=module{{0}},cn=config
objectClass: olcModuleList
cn: module{{0}}
olcModulePath: {self.settings.stack.ldap_module_dir}
olcModuleLoad: back_mdb

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

{includes}dn: olcDatabase={{-1}}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {{-1}}frontend
olcSizeLimit: unlimited

dn: olcDatabase={{0}}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {{0}}config
olcAccess: {{0}}to * by * none

dn: olcDatabase={{1}}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {{1}}mdb
olcSuffix: {ldap.base_dn}
olcRootDN: {ldap.bind_dn}
olcRootPW: {_ssha(ldap.password.get_secret_value())}
olcDbDirectory: {self.data_dir}
olcDbMaxSize: 1073741824
olcDbIndex: objectClass eq
olcDbIndex: uid,cn,mail,memberUid eq
olcAccess: {{0}}to * by anonymous auth by * read
"""
        (self.conf_dir.parent / "ldap-config.ldif").write_text(config)
        first_rdn_value = ldap.base_dn.split(",")[0].split("=", 1)[1]
        base = f"""\
dn: {ldap.base_dn}
objectClass: top
objectClass: dcObject
objectClass: organization
o: {first_rdn_value}
dc: {first_rdn_value}

dn: {ldap.people_dn}
objectClass: organizationalUnit
ou: people

dn: {ldap.groups_dn}
objectClass: organizationalUnit
ou: groups
"""
        (self.conf_dir.parent / "ldap-base.ldif").write_text(base)
        try:
            for db, ldif in (("0", "ldap-config.ldif"), ("1", "ldap-base.ldif")):
                self._run([str(slapadd), "-n", db, "-F", str(self.conf_dir), "-l", str(self.conf_dir.parent / ldif)])
        except ServiceFailed:
            shutil.rmtree(self.conf_dir, ignore_errors=True)  # so the next `up` starts over
            raise

    def argv(self) -> list[str]:
        # -d keeps slapd in the foreground (it would fork otherwise), level 0 = quiet
        urls = f"{self.address}/ {self.tls_address}/"  # StartTLS on the first, TLS from the start on the second
        return [str(self.settings.stack.slapd), "-h", urls, "-F", str(self.conf_dir), "-d", "0"]

    def check(self) -> None:
        import ldap3
        from ldap3.core.exceptions import LDAPException

        ldap = self.settings.ldap
        server = ldap3.Server(self.address, connect_timeout=3)
        try:
            conn = ldap3.Connection(
                server, ldap.bind_dn, ldap.password.get_secret_value(), auto_bind=True, receive_timeout=5
            )
            found = conn.search(ldap.people_dn, "(objectClass=organizationalUnit)", search_scope=ldap3.BASE)
            conn.unbind()
        except LDAPException as exc:
            raise NotReady(f"bind as {ldap.bind_dn}: {exc}") from None
        if not found:
            raise NotReady(f"{ldap.people_dn} is missing")


# ---------------------------------------------------------------- JVM services


LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
logger.debezium.name = io.debezium
logger.debezium.level = INFO
logger.tasks.name = org.apache.kafka.connect.runtime.Worker
logger.tasks.level = INFO
logger.started.name = kafka.server.BrokerServer
logger.started.level = INFO
"""
# WARN and up, but for what an operator reads the log for: Debezium's own lines (snapshot,
# streaming, slot and WAL positions), Connect starting and stopping tasks, the broker
# started. The broker's INFO lines are several per partition created or loaded: 77 MB at
# the start of a broker holding a test run's topics.


class JvmService(Service, ABC):
    """A Java server run from the Maven-resolved cache."""

    heap: ClassVar[str]
    main_class: ClassVar[str]

    @property
    def libs(self) -> Path:
        return self.settings.stack.jvm_cache / "kafka"

    @property
    def marker(self) -> str:
        return f"-Dmcq.service={self.name}"

    def jvm_flags(self) -> list[str]:
        return [
            self.marker,
            *getattr(self.settings.stack, self.heap).split(),
            "-XX:+UseSerialGC",  # two cores: no parallel GC threads fighting the pipeline
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.conf_dir / 'log4j2.properties'}",
        ]

    def prepare(self) -> None:
        self._require(self.libs, "the JVM artifact cache (jvm/pom.xml)")
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "log4j2.properties").write_text(LOG4J2)

    def argv(self) -> list[str]:
        return [self.settings.stack.java, *self.jvm_flags(), "-cp", f"{self.libs}/*", self.main_class, *self.args()]

    def args(self) -> list[str]:
        return [str(self.conf_dir / f"{self.name}.properties")]


def _properties(values: dict[str, object]) -> str:
    """A Java properties file; a backslash in a value is written escaped, as the format wants."""
    escaped = {k: str(v).replace("\\", "\\\\") for k, v in values.items()}
    return "".join(f"{k}={v}\n" for k, v in escaped.items())


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64, never starting with "-" (one in
    64 would, and kafka-storage then reads it as an option: seen as a red CI). Kafka's own
    ``Uuid.randomUuid()`` draws again in that case too."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class Kafka(JvmService):
    """A single Kafka node in KRaft mode, broker and controller in one process."""

    name = "kafka"
    heap = "kafka_heap"
    main_class = "kafka.Kafka"

    @property
    def secure(self) -> bool:
        return self.settings.stack.secure

    @property
    def ports(self) -> tuple[int, ...]:
        p = self.settings.stack.ports
        if self.secure:
            return (p.kafka_controller, p.kafka_sasl)
        return (p.kafka, p.kafka_controller, p.kafka_sasl)

    @property
    def address(self) -> str:
        p = self.settings.stack.ports
        return f"{LOOPBACK}:{p.kafka_sasl if self.secure else p.kafka}"

    def admin_config(self) -> dict[str, Any]:
        """A client configuration for this broker as its super user: the anonymous plaintext
        port, or on the secure stack ``mcq-admin`` over SASL_SSL."""
        if not self.secure:
            return {"bootstrap.servers": self.address}
        return {
            "bootstrap.servers": self.address,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": KAFKA_ADMIN,
            "sasl.password": self.settings.stack.kafka_admin_password.get_secret_value(),
            "ssl.ca.location": str(stack_tls(self.settings).ca_cert),
        }

    @property
    def keystore(self) -> Path:
        """The SASL_SSL listener's key and certificate (PEM), from the stack's CA."""
        return self.conf_dir / "kafka-server.pem"

    def prepare(self) -> None:
        super().prepare()
        tls = stack_tls(self.settings).ensure()
        self.keystore.write_bytes(tls.server_key.read_bytes() + tls.server_cert.read_bytes())
        self.keystore.chmod(0o600)
        props = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@{LOOPBACK}:{self.settings.stack.ports.kafka_controller}",
            "controller.listener.names": "CONTROLLER",
            # The SASL_SSL port: SCRAM-SHA-512 over TLS (the stack's CA), every principal
            # limited to its ACLs (`mcq acl apply`); nothing is allowed without an ACL.
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": self.keystore,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            **(self._secure_listeners() if self.secure else self._plaintext_listeners()),
            "log.dirs": self.data_dir,
            "num.partitions": 3,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "true",
            # compaction should be observable in minutes on a dev stack, not hours
            "log.cleaner.backoff.ms": 5000,
        }
        conf = self.conf_dir / "kafka.properties"
        conf.write_text(_properties(props))
        conf.chmod(0o600)  # the secure stack's admin and controller passwords
        if not (self.data_dir / "meta.properties").exists():
            # the admin's SCRAM credentials are in the first metadata: on the secure stack
            # the broker logs in to its own SASL_SSL port as the admin before anyone could
            # create a user (and on the plaintext stack `after_start` sets them anyway)
            admin = f'SCRAM-SHA-512=[name={KAFKA_ADMIN},password="{self._admin_password()}"]'
            self._run(
                [
                    self.settings.stack.java,
                    "-cp",
                    f"{self.libs}/*",
                    f"-Dlog4j2.configurationFile={self.conf_dir / 'log4j2.properties'}",
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    new_cluster_id(),
                    "-c",
                    str(conf),
                    "--add-scram",
                    admin,
                ],
                hide=(self._admin_password(),),
            )

    def _admin_password(self) -> str:
        return self.settings.stack.kafka_admin_password.get_secret_value()

    def _plaintext_listeners(self) -> dict[str, object]:
        """The quick start's broker: besides SASL_SSL, a plaintext loopback port whose anonymous
        clients are super users, as are the controller's; a process that must be limited
        connects to the SASL_SSL port."""
        p = self.settings.stack.ports
        return {
            "listeners": (
                f"PLAINTEXT://{LOOPBACK}:{p.kafka},SASL_SSL://{LOOPBACK}:{p.kafka_sasl},"
                f"CONTROLLER://{LOOPBACK}:{p.kafka_controller}"
            ),
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{p.kafka},SASL_SSL://{LOOPBACK}:{p.kafka_sasl}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "super.users": f"User:ANONYMOUS;User:{KAFKA_ADMIN}",
        }

    def _secure_listeners(self) -> dict[str, object]:
        """The secure stack's broker (`mcq stack up --secure`): no port without a login. Clients
        and the broker itself (inter-broker, as the admin) use SCRAM-SHA-512 over TLS; the
        broker reaches its controller with SASL PLAIN over TLS as ``mcq-controller``, the
        controller port's only user (a password derived from the stack's secret)."""
        p = self.settings.stack.ports
        tls = stack_tls(self.settings)
        controller_password = self.settings.stack.local_password(KAFKA_CONTROLLER).get_secret_value()
        plain = jaas_line(
            "org.apache.kafka.common.security.plain.PlainLoginModule",
            username=KAFKA_CONTROLLER,
            password=controller_password,
            **{f"user_{KAFKA_CONTROLLER}": controller_password},
        )
        return {
            "listeners": f"SASL_SSL://{LOOPBACK}:{p.kafka_sasl},CONTROLLER://{LOOPBACK}:{p.kafka_controller}",
            "advertised.listeners": f"SASL_SSL://{LOOPBACK}:{p.kafka_sasl}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas_line(
                "org.apache.kafka.common.security.scram.ScramLoginModule",
                username=KAFKA_ADMIN,
                password=self._admin_password(),
            ),
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "listener.name.controller.ssl.keystore.type": "PEM",
            "listener.name.controller.ssl.keystore.location": self.keystore,
            # the broker's side of its TLS connections (to itself, to the controller)
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": tls.ca_cert,
            "super.users": f"User:{KAFKA_ADMIN};User:{KAFKA_CONTROLLER}",
        }

    def after_start(self) -> None:
        """The SCRAM super user and Connect's user exist (made, or their passwords set again,
        every start), and Connect's user holds its ACLs."""
        from confluent_kafka.admin import AdminClient

        from mcq.acl.cluster import AclAdmin
        from mcq.acl.plan import connect_grants
        from mcq.acl.users import set_scram_user

        admin = AdminClient({**self.admin_config(), "log_level": 0})
        stack = self.settings.stack
        set_scram_user(self.settings, KAFKA_ADMIN, stack.kafka_admin_password.get_secret_value(), admin)
        set_scram_user(self.settings, KAFKA_CONNECT, stack.kafka_connect_password.get_secret_value(), admin)
        AclAdmin(self.settings, admin).grant(connect_grants(f"User:{KAFKA_CONNECT}"))

    def check(self) -> None:
        """Produce a record and read it back: the broker, its log and its fetch path work."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

        # log_level 0: a broker still starting would flood the terminal with connect errors
        conf = {**self.admin_config(), "log_level": 0}
        token = uuid.uuid4().hex.encode()
        delivered: list[TopicPartition] = []
        errors: list[str] = []

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered.append(TopicPartition(msg.topic() or HEALTH_TOPIC, msg.partition() or 0, msg.offset() or 0))

        try:
            producer = Producer({**conf, "message.timeout.ms": 5000, "partitioner": "murmur2_random"})
            producer.produce(HEALTH_TOPIC, key=b"health", value=token, on_delivery=on_delivery)
            producer.flush(8)
        except KafkaException as exc:
            raise NotReady(f"produce: {exc}") from None
        if not delivered:
            raise NotReady(f"produce to {HEALTH_TOPIC}: {errors[0] if errors else 'no delivery report'}")
        consumer = Consumer({**conf, "group.id": f"_mcq-health-{uuid.uuid4().hex}", "enable.auto.commit": False})
        try:
            consumer.assign(delivered)
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None and msg.value() == token:
                    return
            raise NotReady(f"consume from {HEALTH_TOPIC}: the record produced was not read back")
        finally:
            consumer.close()


class Connect(JvmService):
    """A Kafka Connect worker in distributed mode, Debezium on its plugin path."""

    name = "connect"
    depends_on = ("kafka", "postgres")
    heap = "connect_heap"
    main_class = "org.apache.kafka.connect.cli.ConnectDistributed"

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.connect,)

    @property
    def address(self) -> str:
        return f"http://{LOOPBACK}:{self.settings.stack.ports.connect}"

    @property
    def plugin_path(self) -> Path:
        return self.settings.stack.jvm_cache / "connect-plugins"

    def prepare(self) -> None:
        super().prepare()
        self._require(self.plugin_path / "debezium-connector-postgres", "the Debezium connector plugin")
        self._require(self.plugin_path / "mcq-connect-transforms", "mcq's NaturalText transform plugin")
        port = self.settings.stack.ports.connect
        # the worker, its connectors' producers and its admin (topic creation) on the broker's
        # SASL_SSL port as mcq-connect: capture runs under the ACLs a campus would give it
        password = self.settings.stack.kafka_connect_password.get_secret_value()
        sasl = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas_line(
                "org.apache.kafka.common.security.scram.ScramLoginModule", username=KAFKA_CONNECT, password=password
            ),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": stack_tls(self.settings).ca_cert,
        }
        props = {
            "bootstrap.servers": f"{LOOPBACK}:{self.settings.stack.ports.kafka_sasl}",
            **sasl,
            **{f"{client}.{k}": v for client in ("producer", "consumer", "admin") for k, v in sasl.items()},
            "group.id": "mcq-connect",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "false",
            "config.storage.topic": "_mcq-connect-configs",
            "offset.storage.topic": "_mcq-connect-offsets",
            "status.storage.topic": "_mcq-connect-status",
            "config.storage.replication.factor": 1,
            "offset.storage.replication.factor": 1,
            "status.storage.replication.factor": 1,
            "offset.flush.interval.ms": 1000,
            # a worker that lost its group membership (a broker restart) gets its connectors
            # and tasks back only after this delay (default 5 min: Debezium captured nothing
            # for 5 min after every broker restart, tests/soak); one worker: no one to wait for
            "scheduled.rebalance.max.delay.ms": 10_000,
            "listeners": f"http://{LOOPBACK}:{port}",
            "rest.advertised.host.name": LOOPBACK,
            "rest.advertised.port": port,
            "plugin.path": self.plugin_path,
            # connector JSON names secrets (${env:MCQ_SOURCE__PASSWORD}); the worker resolves them
            "config.providers": "env,file",
            "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
            "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
            "topic.creation.enable": "true",
        }
        conf = self.conf_dir / "connect.properties"
        conf.write_text(_properties(props))
        conf.chmod(0o600)  # the local stack's Connect password

    def env(self) -> dict[str, str]:
        env = super().env()
        env["MCQ_SOURCE__PASSWORD"] = self.settings.source.password.get_secret_value()
        return env

    def check(self) -> None:
        try:
            resp = httpx.get(f"{self.address}/connector-plugins", timeout=5)
        except httpx.HTTPError as exc:
            raise NotReady(f"GET /connector-plugins: {exc}") from None
        if resp.status_code != 200:
            raise NotReady(f"GET /connector-plugins answered {resp.status_code}")
        classes = {p.get("class") for p in resp.json()}
        if DEBEZIUM_POSTGRES_CONNECTOR not in classes:
            raise NotReady(f"{DEBEZIUM_POSTGRES_CONNECTOR} is not among the worker's plugins")


class Registry(JvmService):
    """Apicurio Registry 3 (Confluent-compatible ``ccompat`` API), stored in PostgreSQL."""

    name = "registry"
    depends_on = ("postgres",)
    heap = "registry_heap"
    main_class = ""

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.registry,)

    @property
    def address(self) -> str:
        return f"http://{LOOPBACK}:{self.settings.stack.ports.registry}/apis/ccompat/v7"

    @property
    def libs(self) -> Path:
        return self.settings.stack.jvm_cache / "apicurio"

    def runner(self) -> Path:
        jars = [*sorted(self.libs.glob("apicurio-registry-app-*-runner.jar")), *self.libs.glob("quarkus-run.jar")]
        if not jars:
            raise MissingRuntime(
                self.name, f"no Apicurio runner jar in {self.libs}; run `make install`", self.handle.log_file
            )
        return jars[0]

    def argv(self) -> list[str]:
        return [self.settings.stack.java, *self.jvm_flags(), "-jar", str(self.runner())]

    def env(self) -> dict[str, str]:
        env = super().env()
        db = self.settings.source
        env.update(
            {
                "QUARKUS_HTTP_HOST": LOOPBACK,
                "QUARKUS_HTTP_PORT": str(self.settings.stack.ports.registry),
                "QUARKUS_LOG_CONSOLE_COLOR": "false",
                "APICURIO_STORAGE_KIND": "sql",
                "APICURIO_STORAGE_SQL_KIND": "postgresql",
                "APICURIO_DATASOURCE_URL": f"jdbc:postgresql://{LOOPBACK}:{self.settings.stack.ports.postgres}/mcq_registry",
                "APICURIO_DATASOURCE_USERNAME": db.user,
                "APICURIO_DATASOURCE_PASSWORD": db.password.get_secret_value(),
            }
        )
        return env

    def check(self) -> None:
        try:
            resp = httpx.get(f"{self.address}/subjects", timeout=5)
        except httpx.HTTPError as exc:
            raise NotReady(f"GET /subjects: {exc}") from None
        if resp.status_code != 200:
            raise NotReady(f"GET /subjects answered {resp.status_code}")


SERVICES: tuple[type[Service], ...] = (Postgres, Ldap, Kafka, Registry, Connect)
