"""Configuration: defaults point at the local stack, everything can be overridden,
secrets never print."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from mcq.config import ConfigError, Settings, load_settings
from tests import PROJECT_ROOT

SECRET = "s3cr3t-Pa55word"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("MCQ_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no stray mcq.yaml


def test_defaults_point_at_the_local_stack() -> None:
    s = load_settings()
    assert s.kafka.bootstrap_servers == "127.0.0.1:29092"
    assert s.connect.url == "http://127.0.0.1:28083"
    assert s.registry.url == "http://127.0.0.1:28081/apis/ccompat/v7"
    assert s.source.port == 25432 and s.source.dbname == "mcq_source"
    assert s.vendor.dbname == "mcq_vendor"
    assert s.ldap.url == "ldap://127.0.0.1:23389"
    assert s.ldap.bind_dn == "cn=admin,dc=mcq,dc=example"


def test_local_addresses_follow_the_stack_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCQ_STACK__PORTS__KAFKA", "61000")
    monkeypatch.setenv("MCQ_STACK__PORTS__REGISTRY", "61001")
    s = load_settings()
    assert s.kafka.bootstrap_servers == "127.0.0.1:61000"
    assert s.registry.url.startswith("http://127.0.0.1:61001/")


def test_every_address_and_kafka_security_setting_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {
        "MCQ_KAFKA__BOOTSTRAP_SERVERS": "broker-1.corp:9093,broker-2.corp:9093",
        "MCQ_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "MCQ_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "MCQ_KAFKA__SASL_USERNAME": "mcq",
        "MCQ_KAFKA__SASL_PASSWORD": SECRET,
        "MCQ_KAFKA__SSL_CA_LOCATION": "/etc/ssl/corp-ca.pem",
        "MCQ_CONNECT__URL": "https://connect.corp:8083",
        "MCQ_REGISTRY__URL": "https://registry.corp/apis/ccompat/v7",
        "MCQ_REGISTRY__USERNAME": "reg",
        "MCQ_REGISTRY__PASSWORD": SECRET,
        "MCQ_SOURCE__HOST": "db.corp",
        "MCQ_SOURCE__PORT": "5432",
        "MCQ_SOURCE__PASSWORD": SECRET,
        "MCQ_LDAP__URL": "ldaps://ldap.corp",
        "MCQ_LDAP__BASE_DN": "dc=corp,dc=example",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s = load_settings()
    conf = s.kafka.client_config()
    assert conf["bootstrap.servers"] == "broker-1.corp:9093,broker-2.corp:9093"
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.password"] == SECRET
    assert conf["ssl.ca.location"] == "/etc/ssl/corp-ca.pem"
    spark = s.kafka.spark_options()
    assert "ScramLoginModule" in spark["kafka.sasl.jaas.config"]
    assert spark["kafka.security.protocol"] == "SASL_SSL"
    assert s.connect.url == "https://connect.corp:8083"
    assert s.registry.client_config()["basic.auth.user.info"] == f"reg:{SECRET}"
    assert s.source.dsn() == f"postgresql://mcq:{SECRET}@db.corp:5432/mcq_source"
    assert s.ldap.url == "ldaps://ldap.corp"
    assert s.ldap.bind_dn == "cn=admin,dc=corp,dc=example"
    assert s.ldap.people_dn == "ou=people,dc=corp,dc=example"


def test_a_yaml_file_named_by_mcq_config_is_read_and_env_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text("kafka:\n  bootstrap_servers: from-file:9092\nconnect:\n  url: http://from-file:8083\n")
    monkeypatch.setenv("MCQ_CONFIG", str(cfg))
    monkeypatch.setenv("MCQ_CONNECT__URL", "http://from-env:8083")
    s = load_settings()
    assert s.kafka.bootstrap_servers == "from-file:9092"
    assert s.connect.url == "http://from-env:8083"


def test_invalid_configuration_is_one_error_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCQ_KAFKA__SECURITY_PROTOCOL", "CARRIER_PIGEON")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "kafka.security_protocol" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_missing_config_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MCQ_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file"):
        load_settings()


def test_secrets_never_print(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCQ_KAFKA__SASL_USERNAME", "mcq")
    monkeypatch.setenv("MCQ_KAFKA__SASL_PASSWORD", SECRET)
    monkeypatch.setenv("MCQ_SOURCE__PASSWORD", SECRET)
    monkeypatch.setenv("MCQ_LDAP__PASSWORD", SECRET)
    monkeypatch.setenv("MCQ_KAFKA__EXTRA", f'{{"sasl.oauthbearer.client.secret": "{SECRET}", "linger.ms": "7"}}')
    s = load_settings()
    assert s.kafka.client_config()["sasl.oauthbearer.client.secret"] == SECRET  # given to the client, never shown
    assert '"linger.ms":"7"' in s.model_dump_json()
    assert isinstance(s.source.password, SecretStr)
    for text in (repr(s), str(s), s.model_dump_json(), str(s.model_dump()), str(s.source), repr(s.kafka)):
        assert SECRET not in text
    out = subprocess.run([sys.executable, "-m", "mcq.cli", "config"], capture_output=True, text=True, check=True).stdout
    assert SECRET not in out
    assert "**********" in out


@pytest.mark.parametrize(
    ("variable", "value"),
    [("MCQ_KAFKA__EXTRA", f'{{"ssl.key.pem": "-----BEGIN PRIVATE KEY-----{SECRET}"}}'),
     ("MCQ_KAFKA__EXTRA", f'{{"sasl.oauthbearer.config": "clientId=mcq clientSecret={SECRET}"}}'),
     ("MCQ_KAFKA__EXTRA", f'{{"sasl.jaas.config": "password=\\"{SECRET}\\""}}'),
     ("MCQ_KAFKA__EXTRA", f'{{"ssl.keystore.pem": "{SECRET}"}}'),
     ("MCQ_REGISTRY__URL", f"https://mcq:{SECRET}@registry.example/apis/ccompat/v7")],
)  # fmt: skip
def test_mcq_config_masks_every_setting_that_carries_a_secret(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    out = subprocess.run([sys.executable, "-m", "mcq.cli", "config"], capture_output=True, text=True, check=True).stdout
    assert SECRET not in out and "**********" in out


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError for frozen models
        s.kafka.bootstrap_servers = "elsewhere:9092"  # type: ignore[misc]


def test_the_state_snapshot_directory_follows_the_stack_home_and_none_turns_it_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert load_settings().state_dir == load_settings().stack.home / "state"
    monkeypatch.setenv("MCQ_STACK__HOME", str(tmp_path / "stack"))
    assert load_settings().state_dir == tmp_path / "stack" / "state"
    monkeypatch.setenv("MCQ_STATE_DIR", "/var/lib/mcq")
    assert load_settings().state_dir == Path("/var/lib/mcq")
    for off in ("none", "", "off"):
        monkeypatch.setenv("MCQ_STATE_DIR", off)
        assert load_settings().state_dir is None


@pytest.mark.parametrize(
    ("env", "message"),
    [({"MCQ_TOPICS__REPLICATION_FACTOR": "0"}, "must be -1 (the cluster's default) or >= 1"),
     ({"MCQ_TOPICS__MIN_INSYNC_REPLICAS": "0"}, "min_insync_replicas must be >= 1"),
     ({"MCQ_TOPICS__REPLICATION_FACTOR": "2", "MCQ_TOPICS__MIN_INSYNC_REPLICAS": "3"}, "no write could ever succeed")],
)  # fmt: skip
def test_topic_durability_settings_that_cannot_work_are_refused(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings()


def test_raw_topics_get_the_topic_durability_settings_through_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcq.capture.connector import render
    from mcq.registry import load_registry

    campus = load_registry(PROJECT_ROOT / "examples" / "campus.yaml")
    default = render(campus, load_settings())["mcq-source-campus"]
    assert default["topic.creation.default.replication.factor"] == "-1"  # the cluster's default
    assert "topic.creation.default.min.insync.replicas" not in default
    monkeypatch.setenv("MCQ_TOPICS__REPLICATION_FACTOR", "3")
    monkeypatch.setenv("MCQ_TOPICS__MIN_INSYNC_REPLICAS", "2")
    production = render(campus, load_settings())["mcq-source-campus"]
    assert production["topic.creation.default.replication.factor"] == "3"
    assert production["topic.creation.default.min.insync.replicas"] == "2"


def test_postgres_tls_settings_reach_libpq_jdbc_and_debezium(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCQ_SOURCE__SSLMODE", "verify-full")
    monkeypatch.setenv("MCQ_SOURCE__SSLROOTCERT", "/etc/ssl/campus ca.pem")
    source = load_settings().source
    assert source.dsn().endswith("?sslmode=verify-full&sslrootcert=%2Fetc%2Fssl%2Fcampus%20ca.pem")
    assert source.jdbc_url().endswith("?sslmode=verify-full&sslrootcert=%2Fetc%2Fssl%2Fcampus%20ca.pem")
    assert source.debezium_config() == {
        "database.sslmode": "verify-full",
        "database.sslrootcert": "/etc/ssl/campus ca.pem",
    }
    assert "?" not in load_settings().vendor.dsn()  # unset: libpq's own default
    monkeypatch.setenv("MCQ_SOURCE__SSLMODE", "verify")
    with pytest.raises(ConfigError, match="sslmode"):
        load_settings()


def test_starttls_on_an_ldaps_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCQ_LDAP__URL", "ldaps://ldap.campus.example")
    monkeypatch.setenv("MCQ_LDAP__START_TLS", "true")
    with pytest.raises(ConfigError, match="start_tls is for ldap:// URLs"):
        load_settings()


def test_on_the_secure_local_stack_clients_default_to_scram_over_tls_as_the_admin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MCQ_STACK__HOME", str(tmp_path / "home"))
    assert load_settings().kafka.security_protocol == "PLAINTEXT"
    load_settings().stack.set_secure(True)
    s = load_settings()
    assert s.stack.secure and s.local_identities
    assert s.kafka.bootstrap_servers == "127.0.0.1:29094"  # the SASL_SSL port: no plaintext one
    conf = s.kafka.client_config()
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.username"] == "mcq-admin" and conf["ssl.ca.location"] == str(tmp_path / "home/tls/ca.crt")
    assert (s.stack.secret_file.stat().st_mode & 0o777) == 0o600


def test_the_normaliser_and_each_listener_log_in_as_their_own_principal_on_the_secure_stack(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MCQ_STACK__HOME", str(tmp_path / "home"))
    load_settings().stack.set_secure(True)
    s = load_settings()
    normaliser, ldap = s.for_normaliser().kafka, s.for_listener("LDAP").kafka
    assert (normaliser.sasl_username, ldap.sasl_username) == ("mcq-normaliser", "mcq-listener-ldap")
    passwords = {k.sasl_password.get_secret_value() for k in (normaliser, ldap, s.kafka) if k.sasl_password}
    assert len(passwords) == 3  # one each, none the admin's
    assert s.for_listener("LDAP").for_normaliser().kafka.sasl_username == "mcq-listener-ldap"  # no second switch
    # another stack's secret gives other passwords
    monkeypatch.setenv("MCQ_STACK__HOME", str(tmp_path / "other"))
    load_settings().stack.set_secure(True)
    other = load_settings().for_normaliser().kafka.sasl_password
    assert other is not None and other.get_secret_value() not in passwords


def test_configured_kafka_identities_win_over_the_secure_stacks_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MCQ_STACK__HOME", str(tmp_path / "home"))
    load_settings().stack.set_secure(True)
    monkeypatch.setenv("MCQ_LISTENERS__LDAP__SASL_USERNAME", "ldap-svc")
    monkeypatch.setenv("MCQ_LISTENERS__LDAP__SASL_PASSWORD", SECRET)
    s = load_settings()
    assert s.for_listener("ldap").kafka.sasl_username == "ldap-svc"
    monkeypatch.setenv("MCQ_KAFKA__SASL_USERNAME", "ops")
    monkeypatch.setenv("MCQ_KAFKA__SASL_PASSWORD", SECRET)
    s = load_settings()
    assert not s.local_identities
    assert s.for_normaliser().kafka.sasl_username == "ops"
    # back to plaintext: the marker goes, the secret stays for the users made under it
    s.stack.set_secure(False)
    assert not load_settings().stack.secure and s.stack.secret_file.is_file()


def test_the_local_stacks_admin_and_connect_passwords_are_its_own_unless_configured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mcq.config import KAFKA_ADMIN, KAFKA_CONNECT
    from mcq.config.stack import FIXED_PASSWORDS
    from mcq.stack.services.kafka import Kafka

    monkeypatch.setenv("MCQ_STACK__HOME", str(tmp_path))
    stack = load_settings().stack
    assert stack.local_password(KAFKA_ADMIN).get_secret_value() == FIXED_PASSWORDS[KAFKA_ADMIN]  # nothing made yet
    kafka = Kafka(load_settings())
    kafka._stack_passwords()  # a broker not formatted yet: random, private
    made = {u: stack.local_password(u).get_secret_value() for u in (KAFKA_ADMIN, KAFKA_CONNECT)}
    assert all(len(p) >= 24 and p not in FIXED_PASSWORDS.values() for p in made.values()), made
    assert stat.S_IMODE(stack.password_file(KAFKA_ADMIN).stat().st_mode) == 0o600
    kafka._stack_passwords()  # made once
    assert {u: stack.local_password(u).get_secret_value() for u in made} == made
    monkeypatch.setenv("MCQ_STACK__KAFKA_ADMIN_PASSWORD", "configured")
    assert load_settings().stack.local_password(KAFKA_ADMIN).get_secret_value() == "configured"


def test_a_stack_formatted_with_the_fixed_passwords_keeps_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mcq.config import KAFKA_ADMIN
    from mcq.config.stack import FIXED_PASSWORDS
    from mcq.stack.services.kafka import Kafka

    monkeypatch.setenv("MCQ_STACK__HOME", str(tmp_path))
    kafka = Kafka(load_settings())
    kafka.data_dir.mkdir(parents=True)
    (kafka.data_dir / "meta.properties").write_text("node.id=1\n")
    kafka._stack_passwords()
    assert load_settings().stack.local_password(KAFKA_ADMIN).get_secret_value() == FIXED_PASSWORDS[KAFKA_ADMIN]


def test_the_kube_apiserver_the_stack_runs_is_the_one_make_kube_builds() -> None:
    import re
    from pathlib import Path

    from mcq.config.stack import KUBE_VERSION, StackSettings

    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    found = re.search(r"^KUBE_VERSION := (\S+)$", makefile, re.MULTILINE)
    assert found and found.group(1) == KUBE_VERSION
    assert f"kube-{KUBE_VERSION}" in str(StackSettings().kube_apiserver)
