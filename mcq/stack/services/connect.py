"""Kafka Connect with Debezium's PostgreSQL connector and mcq's transforms; healthy once the
connector plugin is listed. Its REST API (loopback only) asks for a login: who may post a
connector config may make the worker read the source's password and write any topic it
may, so the stack's own password guards it (``mcq-connect-rest``, made at random once,
0600; mcq's clients read it through ``ConnectSettings.auth``)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from mcq.config import CONNECT_REST, KAFKA_CONNECT, LOOPBACK, jaas_line
from mcq.stack.files import write_private
from mcq.stack.services.base import JvmService, NotReady, _properties
from mcq.stack.tls import stack_tls

if TYPE_CHECKING:
    pass

DEBEZIUM_POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
CONNECTOR_SECRETS = r"^MCQ_SOURCE__PASSWORD$"
"""The worker's environment variables a connector config may name (``${env:…}``): the
source database's password, which ``mcq connect apply`` renders as a reference."""
BASIC_AUTH = "org.apache.kafka.connect.rest.basic.auth.extension"


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

    @property
    def jaas_file(self) -> Path:
        return self.conf_dir / "connect-jaas.conf"

    def jvm_flags(self) -> list[str]:
        return [*super().jvm_flags(), f"-Djava.security.auth.login.config={self.jaas_file}"]

    def _rest_login(self) -> tuple[str, str]:
        """The REST API's login: the stack's own password, made at random the first time."""
        path = self.settings.stack.password_file(CONNECT_REST)
        if not path.exists():
            write_private(path, secrets.token_urlsafe(24))
        return (CONNECT_REST, path.read_text().strip())

    def prepare(self) -> None:
        super().prepare()
        user, rest_password = self._rest_login()
        users = self.conf_dir / "connect-rest.users"
        write_private(users, _properties({user: rest_password}))
        write_private(
            self.jaas_file,
            f'KafkaConnect {{\n  {BASIC_AUTH}.PropertyFileLoginModule required\n  file="{users}";\n}};\n',
        )
        self._require(self.plugin_path / "debezium-connector-postgres", "the Debezium connector plugin")
        self._require(self.plugin_path / "mcq-connect-transforms", "mcq's NaturalText transform plugin")
        port = self.settings.stack.ports.connect
        # the worker, its connectors' producers and its admin (topic creation) on the broker's
        # SASL_SSL port as mcq-connect: capture runs under the ACLs a campus would give it
        password = self.settings.stack.local_password(KAFKA_CONNECT).get_secret_value()
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
            # connector JSON names secrets (${env:MCQ_SOURCE__PASSWORD}); the worker resolves
            # them, and nothing else: whoever may post a connector config cannot make it read
            # another variable of the worker (its own Kafka password) or any file
            "config.providers": "env",
            "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
            "config.providers.env.param.allowlist.pattern": CONNECTOR_SECRETS,
            "topic.creation.enable": "true",
            # every REST request logs in (the users of connect-rest.users, JAAS KafkaConnect)
            "rest.extension.classes": f"{BASIC_AUTH}.BasicAuthSecurityRestExtension",
        }
        write_private(self.conf_dir / "connect.properties", _properties(props))  # Connect's password

    def env(self) -> dict[str, str]:
        env = super().env()
        env["MCQ_SOURCE__PASSWORD"] = self.settings.source.password.get_secret_value()
        return env

    def check(self) -> None:
        try:
            resp = httpx.get(f"{self.address}/connector-plugins", auth=self._rest_login(), timeout=5)
        except httpx.HTTPError as exc:
            raise NotReady(f"GET /connector-plugins: {exc}") from None
        if resp.status_code != 200:
            raise NotReady(f"GET /connector-plugins answered {resp.status_code}")
        classes = {p.get("class") for p in resp.json()}
        if DEBEZIUM_POSTGRES_CONNECTOR not in classes:
            raise NotReady(f"{DEBEZIUM_POSTGRES_CONNECTOR} is not among the worker's plugins")
