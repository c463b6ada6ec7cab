"""``kafka.extra`` reaches Spark's Kafka source and sink as ``kafka.*`` options, as the
README says: under the Java client's name, and never when only librdkafka understands it."""

from __future__ import annotations

from mcq.config import KafkaSettings


def spark_options(**extra: str) -> dict[str, str]:
    return KafkaSettings(bootstrap_servers="b:9092", extra=extra).spark_options()


def test_an_extra_property_the_java_client_shares_is_passed_as_a_kafka_option() -> None:
    opts = spark_options(**{"client.id": "mcq-normalize", "request.timeout.ms": "45000", "sasl.mechanism": "PLAIN"})
    assert opts["kafka.client.id"] == "mcq-normalize"
    assert opts["kafka.request.timeout.ms"] == "45000"
    assert opts["kafka.sasl.mechanism"] == "PLAIN"
    assert opts["kafka.bootstrap.servers"] == "b:9092"


def test_an_extra_property_the_java_client_names_otherwise_is_renamed() -> None:
    opts = spark_options(**{"topic.metadata.refresh.interval.ms": "1000", "queue.buffering.max.ms": "5"})
    assert opts["kafka.metadata.max.age.ms"] == "1000" and opts["kafka.linger.ms"] == "5"
    assert "kafka.topic.metadata.refresh.interval.ms" not in opts


def test_a_ca_file_in_extra_becomes_a_pem_truststore_and_no_host_check_is_the_empty_algorithm() -> None:
    opts = spark_options(**{"ssl.ca.location": "/etc/ca.pem", "ssl.endpoint.identification.algorithm": "none"})
    assert opts["kafka.ssl.truststore.type"] == "PEM"
    assert opts["kafka.ssl.truststore.location"] == "/etc/ca.pem"
    assert opts["kafka.ssl.endpoint.identification.algorithm"] == ""


def test_librdkafka_only_and_spark_managed_properties_are_not_passed() -> None:
    opts = spark_options(
        **{
            "debug": "all",
            "enable.partition.eof": "true",
            "ssl.key.location": "/k.pem",
            "sasl.kerberos.keytab": "/kt",
            "sasl.password": "secret",
            "group.id": "g",
            "auto.offset.reset": "earliest",
        }
    )
    assert set(opts) == {"kafka.bootstrap.servers", "kafka.security.protocol"}


def test_a_password_with_quotes_and_backslashes_is_escaped_in_the_jaas_line() -> None:
    opts = KafkaSettings(
        bootstrap_servers="b:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="mcq",
        sasl_password='pa"ss\\word',  # type: ignore[arg-type]
    ).spark_options()
    assert opts["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="mcq" password="pa\\"ss\\\\word";'
    )


def test_oauthbearer_with_oidc_client_credentials_reaches_spark_as_jaas_and_the_token_endpoint() -> None:
    opts = KafkaSettings(
        bootstrap_servers="b:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        extra={
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": "mcq-normaliser",
            "sasl.oauthbearer.client.secret": "s3cret",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
            "sasl.oauthbearer.scope": "kafka",
        },
    ).spark_options()
    assert opts["kafka.sasl.mechanism"] == "OAUTHBEARER"
    assert opts["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
        ' clientId="mcq-normaliser" clientSecret="s3cret" scope="kafka";'
    )
    assert opts["kafka.sasl.oauthbearer.token.endpoint.url"] == "https://idp.example/token"
    assert opts["kafka.sasl.login.callback.handler.class"].endswith("oauthbearer.OAuthBearerLoginCallbackHandler")
    assert not [k for k in opts if k.startswith("kafka.sasl.oauthbearer.client")]  # librdkafka's names stay out


def test_a_bounded_read_has_its_fetches_answered_within_10_ms_and_extra_can_say_otherwise() -> None:
    # Spark asks for a partition's offsets after each poll, behind the fetch the poll sent;
    # at a partition's end the broker would hold that fetch for its default 500 ms
    read = KafkaSettings(bootstrap_servers="b:9092").spark_read_options()
    assert read["kafka.fetch.max.wait.ms"] == "10"
    assert read["kafka.bootstrap.servers"] == "b:9092"
    assert "kafka.fetch.max.wait.ms" not in KafkaSettings(bootstrap_servers="b:9092").spark_options()
    chosen = KafkaSettings(bootstrap_servers="b:9092", extra={"fetch.max.wait.ms": "100"}).spark_read_options()
    assert chosen["kafka.fetch.max.wait.ms"] == "100"
