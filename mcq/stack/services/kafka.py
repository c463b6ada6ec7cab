"""Kafka in KRaft mode (one broker that is its own controller): plaintext for the quick start,
SASL_SSL with SCRAM for the secure stack; healthy once a record went round."""

from __future__ import annotations

import base64
import resource
import secrets
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcq.config import KAFKA_ADMIN, KAFKA_CONNECT, LOOPBACK, jaas_line
from mcq.config.stack import FIXED_PASSWORDS
from mcq.stack.files import write_private
from mcq.stack.services.base import JvmService, NotReady, _properties
from mcq.stack.tls import stack_tls

if TYPE_CHECKING:
    pass

HEALTH_TOPIC = "_mcq.health"
KAFKA_CONTROLLER = "mcq-controller"
"""The secure stack's broker-to-controller identity (SASL PLAIN on the controller port, whose
only user it is: SCRAM credentials live in the metadata the controller serves)."""


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64, never starting with "-" (one in
    64 would, and kafka-storage then reads it as an option: seen as a red CI). Kafka's own
    ``Uuid.randomUuid()`` draws again in that case too."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


OPEN_FILES_WARN = 0.6
"""Share of the open-files limit the partitions may take before ``stack up`` warns."""


def partition_dirs(data_dir: Path) -> int:
    """The partitions a broker's log directory holds (``<topic>-<n>`` directories)."""
    if not data_dir.is_dir():
        return 0
    return sum(1 for p in data_dir.iterdir() if p.is_dir() and p.name.rpartition("-")[2].isdigit())


class Kafka(JvmService):
    """A single Kafka node in KRaft mode, broker and controller in one process."""

    name = "kafka"
    heap = "kafka_heap"
    main_class = "kafka.Kafka"
    # Kafka's own choice (kafka-run-class.sh). With the serial collector and 768 MB a broker
    # holding a few thousand topics (a test run's) kept its old generation full: 65 full
    # collections of 0.9 s each in 40 minutes (jstat -gcutil), every client waiting meanwhile.
    gc = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35")

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
            "sasl.password": self._admin_password(),
            "ssl.ca.location": str(stack_tls(self.settings).ca_cert),
        }

    @property
    def keystore(self) -> Path:
        """The SASL_SSL listener's key and certificate (PEM), from the stack's CA."""
        return self.conf_dir / "kafka-server.pem"

    def prepare(self) -> None:
        super().prepare()
        self._stack_passwords()
        tls = stack_tls(self.settings).ensure()
        write_private(self.keystore, tls.server_key.read_bytes() + tls.server_cert.read_bytes())
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
        write_private(conf, _properties(props))  # the secure stack's admin and controller passwords
        if not (self.data_dir / "meta.properties").exists():
            # the admin's SCRAM credentials are in the first metadata: on the secure stack
            # the broker logs in to its own SASL_SSL port as the admin before anyone could
            # create a user (and on the plaintext stack `after_start` sets them anyway)
            admin = f'SCRAM-SHA-512=[name={KAFKA_ADMIN},password="{self._admin_password()}"]'
            # the password goes to kafka-storage in a private argument file (java expands
            # @file), never on a command line another user could read in /proc
            args = self.conf_dir / "format.args"
            tool = ["kafka.tools.StorageTool", "format", "-t", new_cluster_id(), "-c", str(conf), "--add-scram", admin]
            write_private(args, "".join(f"{_argfile_quoted(arg)}\n" for arg in tool))
            try:
                self._run(
                    [
                        self.settings.stack.java,
                        "-cp",
                        f"{self.libs}/*",
                        f"-Dlog4j2.configurationFile={self.conf_dir / 'log4j2.properties'}",
                        f"@{args}",
                    ]
                )
            finally:
                args.unlink(missing_ok=True)

    def _stack_passwords(self) -> None:
        """The stack's own passwords of mcq-admin and mcq-connect, made once: random for a
        broker not formatted yet, the fixed ones of old for one formatted with them."""
        formatted = (self.data_dir / "meta.properties").exists()
        for user in (KAFKA_ADMIN, KAFKA_CONNECT):
            path = self.settings.stack.password_file(user)
            if not path.exists():
                write_private(path, FIXED_PASSWORDS[user] if formatted else secrets.token_urlsafe(24))

    def _admin_password(self) -> str:
        return self.settings.stack.local_password(KAFKA_ADMIN).get_secret_value()

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

    def warnings(self) -> list[str]:
        """A broker keeps a file open per partition: at the process's open-files limit it
        stops serving every partition and shuts down ("Too many open files"). Test runs and
        benchmarks each leave topics of their own behind, so a long-used local stack gets
        there; say so while there is room."""
        held = partition_dirs(self.data_dir)
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY or held < OPEN_FILES_WARN * limit:
            return []
        return [
            f"it holds {held:,} partitions against an open-files limit of {limit:,} (ulimit -n), a file "
            "each: at the limit the broker shuts down. Remove the topics of deployments and test runs "
            "you no longer need (`mcq topics remove` under their prefix), or forget the local stack's "
            "data: `make clean-stack`"
        ]

    def after_start(self) -> None:
        """The SCRAM super user and Connect's user exist (made, or their passwords set again,
        every start), and Connect's user holds its ACLs."""
        from confluent_kafka.admin import AdminClient

        from mcq.acl.cluster import AclAdmin
        from mcq.acl.plan import connect_grants
        from mcq.acl.users import set_scram_user

        admin = AdminClient({**self.admin_config(), "log_level": 0})
        stack = self.settings.stack
        set_scram_user(self.settings, KAFKA_ADMIN, stack.local_password(KAFKA_ADMIN).get_secret_value(), admin)
        set_scram_user(self.settings, KAFKA_CONNECT, stack.local_password(KAFKA_CONNECT).get_secret_value(), admin)
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
            for topic in {tp.topic for tp in delivered}:  # its leader known first: an assignment without
                consumer.list_topics(topic, timeout=8)  # defers the offset query 500 ms (mcq.topics.read.assign_now)
            consumer.assign(delivered)
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None and msg.value() == token:
                    return
            raise NotReady(f"consume from {HEALTH_TOPIC}: the record produced was not read back")
        finally:
            consumer.close()


def _argfile_quoted(arg: str) -> str:
    """One argument as a line of a java launcher argument file: single-quoted, its
    backslashes and single quotes escaped."""
    return "'" + arg.replace("\\", "\\\\").replace("'", "\\'") + "'"
