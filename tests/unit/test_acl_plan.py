"""The ACL plan is derived from the registry alone: each listener gets its interests'
topics and its own lanes and groups, nothing of another listener's."""

from __future__ import annotations

from mcq.acl.plan import Grant, Principals, plan_acls
from mcq.config import KafkaCredentials, Settings
from mcq.registry import parse_registry

REGISTRY = """
sources:
  - {name: campus, schemas: [campus]}
tables:
  - tname: PERSON
    feeds:
      - {source: campus, table: campus.person, keys: {person_id: id}, columns: [id, name]}
  - tname: ROOM
    feeds:
      - {source: campus, table: campus.room, keys: {pkey_string: code}, columns: [code]}
listeners:
  - {name: LDAP, owner: a@example, adapter: {type: file, settings: {directory: /tmp/x}}}
  - {name: Insite, owner: b@example, adapter: {type: file, settings: {directory: /tmp/y}}}
interests:
  - {listener: LDAP, tname: PERSON}
  - {listener: Insite, tname: ROOM}
"""


def _plan(**settings: object) -> tuple[list[Grant], Principals]:
    registry = parse_registry(REGISTRY, "registry.yaml")
    principals = Principals.of(Settings(topic_prefix="mcq", **settings), registry)  # type: ignore[arg-type]
    return plan_acls(registry, principals), principals


def _of(grants: list[Grant], principal: str) -> list[Grant]:
    return [g for g in grants if g.principal == principal]


def test_a_listener_reads_only_its_interests_and_writes_only_its_own_lanes() -> None:
    grants, _ = _plan()
    ldap = _of(grants, "User:mcq-listener-ldap")
    read = {g.name for g in ldap if g.resource == "TOPIC" and g.operation == "READ"}
    assert "mcq.person" in read and "mcq.room" not in read
    written = {g.name for g in ldap if g.operation == "WRITE"}
    assert written == {
        "mcq.listener.LDAP.retry",
        "mcq.listener.LDAP.waiting",
        "mcq.listener.LDAP.bulk",
        "mcq.listener.LDAP.dlq",
        "mcq.listener.LDAP.dlq-resolved",
        "mcq.listener.LDAP.applied",
        "mcq.listener.LDAP.heartbeats",
        "mcq.listener.LDAP.history",
    }
    groups = {(g.name, g.pattern) for g in ldap if g.resource == "GROUP"}
    assert groups == {("mcq.LDAP", "LITERAL"), ("mcq.LDAP.bulk", "LITERAL"), ("_mcq-", "PREFIXED")}
    assert not [g for g in ldap if "Insite" in g.name or (g.pattern == "PREFIXED" and g.resource == "TOPIC")]


def test_the_normaliser_reads_raw_topics_and_writes_logical_ones_connect_writes_raw() -> None:
    grants, p = _plan()
    normaliser = _of(grants, p.normaliser)
    assert Grant(p.normaliser, "TOPIC", "PREFIXED", "mcq.raw.campus.", "READ") in normaliser
    assert {g.name for g in normaliser if g.operation == "WRITE"} == {
        "mcq.person",
        "mcq.room",
        "mcq._withheld",
        "mcq._provenance",  # first-seen origins; the registry it may only read
        "mcq._refresh",  # the outbox's refresh requests (mcq_log_refresh) are routed there
        "mcq._history",  # each change's capture, for mcq trace (each listener writes its own steps)
    }
    connect = _of(grants, p.connect)
    assert Grant(p.connect, "TOPIC", "PREFIXED", "mcq.raw.", "WRITE") in connect  # it runs every source
    assert not [g for g in connect if g.name.startswith("mcq.") and not g.name.startswith("mcq.raw.")]


def test_a_listener_with_credentials_of_its_own_is_granted_under_that_name() -> None:
    creds = {"ldap": KafkaCredentials(sasl_username="svc-ldap", sasl_password="x")}  # type: ignore[arg-type]
    grants, p = _plan(listeners=creds)
    assert p.listeners["LDAP"] == "User:svc-ldap"
    assert _of(grants, "User:svc-ldap") and not _of(grants, "User:mcq-listener-ldap")
    assert p.manages("User:svc-ldap") and p.manages("User:mcq-gone") and not p.manages("User:someone")


def test_the_listener_settings_carry_only_that_listeners_credentials() -> None:
    creds = {"ldap": KafkaCredentials(sasl_username="svc-ldap", sasl_password="s3cret")}  # type: ignore[arg-type]
    settings = Settings(listeners=creds)  # type: ignore[arg-type]
    assert settings.for_listener("LDAP").kafka.client_config()["sasl.username"] == "svc-ldap"
    assert "sasl.username" not in settings.for_listener("Insite").kafka.client_config()
    assert "s3cret" not in repr(settings) and "s3cret" not in settings.model_dump_json()


def test_mcq_config_shows_a_listeners_username_and_never_its_password() -> None:
    from click.testing import CliRunner

    from mcq.cli import main

    env = {"MCQ_LISTENERS__LDAP__SASL_USERNAME": "svc-ldap", "MCQ_LISTENERS__LDAP__SASL_PASSWORD": "s3cret-pw"}
    result = CliRunner().invoke(main, ["config"], env=env)
    assert result.exit_code == 0, result.output
    assert "svc-ldap" in result.output and "s3cret-pw" not in result.output
