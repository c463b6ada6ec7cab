"""Named target connections (``targets``): a listener's adapter settings name one, the
configuration must have it with the right type, and its password may be a reference
resolved only when a connection is made."""

from __future__ import annotations

import pytest

from consumers.adapter import make_adapter
from consumers.exceptions import ListenerConfigError
from mcq.config import Settings, load_settings
from mcq.registry import parse_registry
from mcq.secrets import SecretUnresolved
from mcq.targets import jdbc_options_from_dsn

REGISTRY = """
tables:
  - {tname: PERSON, subtype: PEOPLE}
listeners:
  - {name: ADSI, owner: w@x, adapter: {type: ldap, settings: {target: AD, entries: {"PERSON/PEOPLE": {
      dn: "CN=p{person_id},OU=people,{base}", object_classes: [user],
      attributes: {sAMAccountName: "'p' || person_id"}}}}}}
  - {name: Plain, owner: w@x, adapter: {type: ldap, settings: {entries: {"PERSON/PEOPLE": {
      dn: "uid=u{person_id},ou=people,{base}", object_classes: [account], attributes: {host: "'x'"}}}}}}
  - {name: HR, owner: w@x, adapter: {type: table, settings: {table: hr.people, database: hr}}}
interests:
  - {listener: ADSI, tname: PERSON, subtype: PEOPLE}
  - {listener: Plain, tname: PERSON, subtype: PEOPLE}
  - {listener: HR, tname: PERSON, subtype: PEOPLE}
"""


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Targets as a deployment gives them: environment variables, a password by reference."""
    for name, value in {
        "MCQ_TARGETS__AD__TYPE": "ldap",
        "MCQ_TARGETS__AD__URL": "ldaps://ad.campus.example:636",
        "MCQ_TARGETS__AD__BASE_DN": "dc=ad,dc=example",
        "MCQ_TARGETS__AD__BIND_DN": "cn=mcq,dc=ad,dc=example",
        "MCQ_TARGETS__AD__PASSWORD": "${env:MCQ_SECRET_AD_PASSWORD}",
        "MCQ_TARGETS__HR__TYPE": "postgres",
        "MCQ_TARGETS__HR__HOST": "hr-db.campus.example",
        "MCQ_TARGETS__HR__PORT": "5433",
        "MCQ_TARGETS__HR__DBNAME": "hr",
        "MCQ_TARGETS__HR__PASSWORD": "${env:MCQ_SECRET_HR_PASSWORD}",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MCQ_SECRET_AD_PASSWORD", raising=False)
    return load_settings()


def test_a_listener_writes_through_the_connection_its_settings_name(configured: Settings) -> None:
    registry = parse_registry(REGISTRY, "r.yaml")
    adsi = make_adapter(registry.listener("ADSI"), configured)  # type: ignore[arg-type]
    plain = make_adapter(registry.listener("Plain"), configured)  # type: ignore[arg-type]
    assert adsi.directory.url == "ldaps://ad.campus.example:636"  # type: ignore[attr-defined]
    assert adsi.directory.bind_dn == "cn=mcq,dc=ad,dc=example"  # type: ignore[attr-defined]
    assert plain.directory == configured.ldap  # type: ignore[attr-defined]  # no target: the deployment's ldap


def test_a_password_reference_is_resolved_on_connecting_not_on_loading(
    configured: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    ad = configured.ldap_target("ad")
    with pytest.raises(SecretUnresolved, match=r"ldaps://ad.campus.example:636: password: .*AD_PASSWORD is not set"):
        ad.bind_password()
    monkeypatch.setenv("MCQ_SECRET_AD_PASSWORD", "s3cret")
    assert ad.bind_password().get_secret_value() == "s3cret"
    assert "s3cret" not in configured.model_dump_json() and "s3cret" not in repr(configured)


def test_a_named_database_is_a_table_targets_connection(configured: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCQ_SECRET_HR_PASSWORD", "pw")
    hr = configured.database("hr")
    assert hr.dsn() == "postgresql://mcq:pw@hr-db.campus.example:5433/hr"
    assert str(hr) == "postgresql://mcq@hr-db.campus.example:5433/hr"  # what logs may show


def test_a_target_the_configuration_lacks_is_the_listeners_configuration_error(configured: Settings) -> None:
    text = REGISTRY.replace("target: AD", "target: nope")
    registry = parse_registry(text, "r.yaml")
    with pytest.raises(ListenerConfigError, match=r"listener ADSI: adapter ldap: no target named 'nope'.*ad \(ldap\)"):
        make_adapter(registry.listener("ADSI"), configured)  # type: ignore[arg-type]


def test_a_target_of_another_type_is_refused_by_name(configured: Settings) -> None:
    registry = parse_registry(REGISTRY.replace("target: AD", "target: hr"), "r.yaml")
    with pytest.raises(ListenerConfigError, match=r"target 'hr' is a connection of type postgres, not ldap"):
        make_adapter(registry.listener("ADSI"), configured)  # type: ignore[arg-type]
    registry = parse_registry(REGISTRY.replace("database: hr", "database: ad"), "r.yaml")
    with pytest.raises(
        ListenerConfigError, match=r"listener HR: adapter table: target 'ad' is a connection of type ldap"
    ):
        make_adapter(registry.listener("HR"), configured)  # type: ignore[arg-type]


def test_spark_reads_a_named_database_through_jdbc_with_its_password_reference_resolved(
    configured: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCQ_SECRET_HR_PASSWORD", "pw")
    registry = parse_registry(REGISTRY, "r.yaml")
    hr = make_adapter(registry.listener("HR"), configured)  # type: ignore[arg-type]
    assert hr.jdbc_options() == {  # type: ignore[attr-defined]
        "url": "jdbc:postgresql://hr-db.campus.example:5433/hr",
        "user": "mcq",
        "password": "pw",
        "driver": "org.postgresql.Driver",
    }


@pytest.mark.parametrize(
    ("dsn", "url", "user", "password"),
    [
        ("host=db.example port=5433 dbname=hr user=u password=p", "jdbc:postgresql://db.example:5433/hr", "u", "p"),
        ("postgresql://u:p%40ss@db.example/hr?sslmode=verify-full&sslrootcert=/ca.crt",
         "jdbc:postgresql://db.example:5432/hr?sslmode=verify-full&sslrootcert=%2Fca.crt", "u", "p@ss"),
        ("postgresql://u@db.example:6000/hr?connect_timeout=5", "jdbc:postgresql://db.example:6000/hr", "u", None),
    ],
)  # fmt: skip
def test_a_libpq_connection_string_is_read_as_the_same_jdbc_connection(
    dsn: str, url: str, user: str, password: str | None
) -> None:
    options = jdbc_options_from_dsn(dsn)
    assert options is not None
    assert (options["url"], options["user"], options.get("password")) == (url, user, password)


@pytest.mark.parametrize(
    "dsn",
    [
        "host=/var/run/postgresql dbname=hr",  # a Unix socket
        "postgresql://a.example,b.example/hr",  # several hosts
        "service=hr",
        "host=db.example dbname=hr sslcert=/c.crt sslkey=/c.key",  # JDBC wants the key in another format
        "not a connection string",
    ],
)
def test_a_connection_string_jdbc_cannot_reach_the_same_way_is_none(dsn: str) -> None:
    assert jdbc_options_from_dsn(dsn) is None
