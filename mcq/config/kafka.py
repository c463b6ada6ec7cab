"""Settings of mcq's Kafka clients (``kafka.*``, ``listeners.<name>``): librdkafka's for the
Python clients, and the same settings translated for Spark's Java client."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    SecretStr,
    field_serializer,
)

from mcq.config.section import Section
from mcq.secrets import MASK, SHOWN_SECRET_KEY

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


class KafkaSettings(Section):
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
    says it is secret or carries one (``sasl.oauthbearer.client.secret``, ``ssl.key.pem``,
    ``sasl.oauthbearer.config``…: mcq.secrets.SHOWN_SECRET_KEY) is masked
    wherever the settings are shown (``mcq config``)."""

    @field_serializer("extra")
    def _mask_extra(self, extra: dict[str, str]) -> dict[str, str]:
        return {k: MASK if SHOWN_SECRET_KEY.search(k) else v for k, v in extra.items()}

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

    def spark_read_options(self) -> dict[str, str]:
        """``spark_options`` for a bounded read by Spark's Kafka source (a batch read, or a
        micro-batch query's batches): ``SPARK_BOUNDED_READ`` first, so ``extra`` can override."""
        return {**SPARK_BOUNDED_READ, **self.spark_options()}

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


SPARK_BOUNDED_READ = {"kafka.fetch.max.wait.ms": "10"}
"""A bounded read's fetches are answered after 10 ms at most, not the broker's 500 ms
default. Spark's Kafka reader asks for the partition's earliest and latest offsets after
every poll (``InternalKafkaConsumer.fetch``), while the poll has already sent the next
fetch; the broker answers one connection's requests in order, and at the end of a
partition it holds that fetch for ``fetch.max.wait.ms``. So every partition a batch read
to its end cost 500 ms of waiting: 17 raw topics, 8,873 rows, 1,000 people, one
``--once`` batch 21-23 s, about 6 s of it with the machine idle (JFR, Spark's consumer
debug log: 502 ms between "Seeking to earliest offset" and its answer); 15.6 s with
this. A bounded read never waits for records that are not there yet, so nothing is lost.
Real-time queries keep the default: their tasks poll for new records all the time."""

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


class KafkaCredentials(Section):
    """One process's own Kafka identity (SASL), laid over ``kafka``'s settings: a listener's
    (``MCQ_LISTENERS__<NAME>__SASL_USERNAME`` / ``__SASL_PASSWORD``), so each listener reads and
    writes only what its ACLs allow (``mcq acl plan``)."""

    sasl_username: str
    sasl_password: SecretStr
