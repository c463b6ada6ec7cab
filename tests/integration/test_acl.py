"""Least privilege on the stack's real broker: ACLs derived from the registry (`mcq acl`),
SCRAM users, and clients on the SASL_SSL port refused, each with an authentication or
authorization error (never a hang), when they reach past what their ACLs allow; a
listener does its whole job under its own identity."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from mcq.acl.cluster import AclAdmin, _grant
from mcq.acl.plan import Principals, plan_acls
from mcq.acl.users import set_scram_user
from mcq.capture.apply import apply_capture
from mcq.capture.connector import OUTBOX_TABLE, raw_topic
from mcq.change import ChangeKey
from mcq.cli import main
from mcq.config import KafkaSettings, Settings
from mcq.contract import register_topic, registry_client
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from mcq.stack.tls import stack_tls
from mcq.testing.listeners import target_state
from mcq.testing.worlds import uncapture, wait_raw_records, wait_slot_active
from mcq.topics.listener import ListenerTopics
from mcq.topics.plan import apply_topics, plan_topics, refresh_topic, registry_topic
from streams.runner import run_normalize
from tests.integration.pgtext import rows_as_text
from tests.support.logical import decode_topic
from tests.support.refusals import consume_error, produce_error, refusal_of

REGISTRY = """
sources:
  - {{name: acl{token}, schemas: [acl_{token}], publication: mcq_acl{token}, slot: mcq_acl{token}}}
tables:
  - tname: PHONE
    partitions: 2
    feeds:
      - source: acl{token}
        table: acl_{token}.phone
        keys: {{person_id: person_id, aux_string: tele_type}}
        columns: [person_id, tele_type, phone]
  - tname: ROOM
    partitions: 1
listeners:
  - name: A
    owner: tests@example
    adapter: {{type: table, settings: {{table: acl_{token}_t.a}}}}
  - name: B
    owner: tests@example
    adapter: {{type: table, settings: {{table: acl_{token}_t.b}}}}
interests:
  - {{listener: A, tname: PHONE}}
  - {{listener: B, tname: ROOM}}
"""


@dataclass
class Secured:
    settings: Settings  # the test's prefix, plaintext (an admin: the loopback port's anonymous super user)
    registry: Registry
    registry_file: Path
    schema: str
    env: dict[str, str]
    passwords: dict[str, str]  # user -> password

    @property
    def prefix(self) -> str:
        return self.settings.topic_prefix

    def user(self, listener: str) -> str:
        return f"{self.prefix}-listener-{listener.lower()}"

    def topic(self, tname: str) -> str:
        table = self.registry.table(tname, None)
        assert table is not None
        return table.topic(self.prefix)

    def sasl(self, user: str | None, password: str | None = None, protocol: str = "SASL_SSL") -> dict[str, Any]:
        """A client configuration for the SASL_SSL port as USER (None: no credentials)."""
        return self.sasl_settings(user, password, protocol).client_config()

    def sasl_settings(self, user: str | None, password: str | None = None, protocol: str = "SASL_SSL") -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=f"127.0.0.1:{self.settings.stack.ports.kafka_sasl}",
            security_protocol=protocol,  # type: ignore[arg-type]
            sasl_mechanism="SCRAM-SHA-512" if user else None,
            sasl_username=user,
            sasl_password=None if user is None else (password or self.passwords[user]),  # type: ignore[arg-type]
            ssl_ca_location=stack_tls(self.settings).ca_cert if "SSL" in protocol else None,
        )

    def mcq(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(main, list(args), env={**self.env, **(env or {})})


@pytest.fixture(scope="module")
def secured(stack: Stack, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """A user's table captured by Debezium, a registry with listeners A (PHONE) and B (ROOM)
    under a prefix of the test's own, their topics made by the admin, and SCRAM users for
    A, B and the normaliser."""
    token = uuid.uuid4().hex[:8]
    prefix = f"acl{token}"
    s = settings.model_copy(update={"topic_prefix": prefix})
    text = REGISTRY.format(token=token)
    path = tmp_path_factory.mktemp("acl") / "registry.yaml"
    path.write_text(text)
    registry = parse_registry(text, str(path))
    schema = f"acl_{token}"
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.phone (person_id integer, tele_type text, phone text,"
            " PRIMARY KEY (person_id, tele_type))"
        )
        conn.execute(f"INSERT INTO {schema}.phone SELECT i, 'office', '+47 ' || i FROM generate_series(1, 30) i")
    apply_capture(registry, settings)
    wait_slot_active(settings, registry.sources[0].slot_name)
    # the admin makes the topics and subjects (no mcq identity may create a logical topic)
    apply_topics(s, [*plan_topics(registry, prefix), *ListenerTopics(prefix, "A").specs()])
    client = registry_client(s)
    for t in registry.tables:
        register_topic(client, t.topic(prefix))
    env = {"MCQ_TOPIC_PREFIX": prefix, "MCQ_HOME": str(settings.stack.home)}
    passwords = {f"{prefix}-{who}": f"{who}-{token}-secret" for who in ("listener-a", "listener-b", "normaliser")}
    for user, password in passwords.items():
        set_scram_user(s, user, password)
    sec = Secured(s, registry, path, schema, env, passwords)
    try:
        yield sec
    finally:
        # the test's principals leave no ACL behind on the shared broker
        empty = path.parent / "empty.yaml"
        empty.write_text("sources: []\ntables: []\nlisteners: []\ninterests: []\n")
        sec.mcq("acl", "apply", "--registry", str(empty))
        uncapture(settings, registry, schema)


def test_the_plan_follows_the_registry_and_apply_leaves_no_drift(secured: Secured) -> None:
    f = str(secured.registry_file)
    plan = secured.mcq("acl", "plan", "--registry", f)
    assert plan.exit_code == 0, plan.output
    assert f"User:{secured.user('A')}" in plan.output and secured.topic("PHONE") in plan.output
    before = secured.mcq("acl", "diff", "--registry", f)
    assert before.exit_code == 1 and "missing: " in before.output, before.output
    applied = secured.mcq("acl", "apply", "--registry", f)
    assert applied.exit_code == 0, applied.output
    grants = plan_acls(secured.registry, Principals.of(secured.settings, secured.registry))
    assert applied.output.count("created: ") == len(grants)
    again = secured.mcq("acl", "apply", "--registry", f)
    assert again.exit_code == 0 and f"no drift: the broker holds exactly the {len(grants)} ACLs" in again.output
    # ACLs of a principal mcq manages that apply did not make (one given by hand, a DENY
    # rule) are foreign: reported, never deleted, not drift
    a, room = f"User:{secured.user('A')}", secured.topic("ROOM")
    strays = [
        AclBinding(ResourceType.TOPIC, room, ResourcePatternType.LITERAL, a, "*", op, permission)
        for op, permission in (
            (AclOperation.READ, AclPermissionType.ALLOW),
            (AclOperation.WRITE, AclPermissionType.DENY),
        )
    ]
    admin = AdminClient(secured.settings.kafka.client_config())
    for future in admin.create_acls(strays).values():
        future.result()
    foreign = [
        f"foreign: {a}: READ on topic {room} (not made by mcq acl apply: left alone)",
        f"foreign: {a}: WRITE (DENY from *) on topic {room} (not made by mcq acl apply: left alone)",
    ]
    drift = secured.mcq("acl", "diff", "--registry", f)
    assert drift.exit_code == 0 and drift.output.splitlines()[:2] == foreign, drift.output
    kept = secured.mcq("acl", "apply", "--registry", f)
    assert kept.exit_code == 0 and kept.output.splitlines()[:2] == foreign, kept.output
    assert "ACLs of the plan (and 2 foreign, left alone)" in kept.output
    # a registry without the listeners: apply deletes every binding it made that the new
    # plan lacks, and no other
    empty = secured.registry_file.parent / "none.yaml"
    empty.write_text("sources: []\ntables: []\nlisteners: []\ninterests: []\n")
    still = plan_acls(parse_registry(empty.read_text()), Principals.of(secured.settings, secured.registry))
    gone = secured.mcq("acl", "apply", "--registry", str(empty))
    assert gone.exit_code == 0 and gone.output.count("deleted: ") == len(set(grants) - set(still)), gone.output
    held = AclAdmin(secured.settings).current(Principals.of(secured.settings, secured.registry))
    assert {g for g, _ in held} - set(still) == {_grant(b) for b in strays}
    unmade = [
        AclBindingFilter(
            b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type
        )
        for b in strays
    ]
    for future in admin.delete_acls(unmade).values():
        future.result()
    again = secured.mcq("acl", "apply", "--registry", f)
    assert again.exit_code == 0 and again.output.count("created: ") == len(set(grants) - set(still)), again.output
    assert secured.mcq("acl", "diff", "--registry", f).exit_code == 0
    user = secured.user("A")
    made = secured.mcq("acl", "user", user, "--password-env", "PW", env={"PW": secured.passwords[user]})
    assert made.exit_code == 0 and made.output.strip() == f"{user}: SCRAM-SHA-512 credentials set", made.output
    unset = secured.mcq("acl", "user", user, "--password-env", "NO_SUCH_VARIABLE")
    assert unset.exit_code == 2 and "NO_SUCH_VARIABLE is not set" in unset.output, unset.output


def test_clients_without_their_rights_are_refused_with_the_reason(secured: Secured) -> None:
    a = secured.user("A")
    assert secured.mcq("acl", "apply", "--registry", str(secured.registry_file)).exit_code == 0
    # no credentials: TLS without SASL, and plaintext, to the SASL_SSL port
    assert refusal_of(secured.sasl(None, protocol="SSL"))
    assert refusal_of(secured.sasl(None, protocol="PLAINTEXT"))
    # a wrong password: the broker names the failed authentication
    wrong = refusal_of(secured.sasl(a, "not-the-password"))
    assert "Authentication failed" in wrong or "SASL authentication error" in wrong, wrong
    conf = secured.sasl(a)
    topics_b = ListenerTopics(secured.prefix, "B")
    # A reading B's logical topic; A joining B's consumer group (on A's own topic)
    err = consume_error(conf, ListenerTopics(secured.prefix, "A").group, secured.topic("ROOM"))
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    err = consume_error(conf, topics_b.group, secured.topic("PHONE"))
    assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    # A writing a logical topic (even one it may read), a raw CDC topic, B's lane, B's
    # heartbeats (to make a dead B look alive) or the registry store
    raw = raw_topic(secured.registry.sources[0], f"{secured.schema}.phone")
    for topic in (secured.topic("PHONE"), raw, topics_b.bulk, topics_b.heartbeats, registry_topic(secured.prefix)):
        refused = produce_error(conf, topic)
        assert "TOPIC_AUTHORIZATION_FAILED" in refused or "Topic authorization failed" in refused, (topic, refused)
    # the normaliser may read the registry store, not write it (its provenance has a topic of its own)
    normaliser = f"{secured.prefix}-normaliser"
    refused = produce_error(secured.sasl(normaliser, secured.passwords[normaliser]), registry_topic(secured.prefix))
    assert "TOPIC_AUTHORIZATION_FAILED" in refused or "Topic authorization failed" in refused, refused


def test_the_pipeline_runs_with_each_process_under_its_own_identity(
    secured: Secured, settings: Settings, tmp_path: Path
) -> None:
    """Debezium's raw records -> the normaliser as ``<prefix>-normaliser`` -> listener A as
    its own user (its credentials by its name): A's target equals the source's table."""
    assert secured.mcq("acl", "apply", "--registry", str(secured.registry_file)).exit_code == 0
    table = f"{secured.schema}.phone"
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        conn.execute(f"UPDATE {table} SET phone = phone || '-0' WHERE person_id % 3 = 0")
        conn.execute(f"DELETE FROM {table} WHERE person_id IN (7, 8)")
        conn.execute(f"INSERT INTO {table} VALUES (8, 'mobile', '+47 900'), (31, 'office', '+47 31')")
        # an explicit refresh request (the outbox): the normaliser routes it to the refresh topic
        source = secured.registry.sources[0].name
        conn.execute("SELECT mcq_log_update('PHONE', NULL, 8, NULL, NULL, 'mobile', %s)", (source,))
        outbox_rows = conn.execute("SELECT count(*) FROM mcq.change_log").fetchone()[0]  # type: ignore[index]
        rows = rows_as_text(conn, table)
    wait_raw_records(settings, raw_topic(secured.registry.sources[0], table), 30 + 10 + 2 + 2)
    wait_raw_records(settings, raw_topic(secured.registry.sources[0], OUTBOX_TABLE), outbox_rows)
    normaliser = f"{secured.prefix}-normaliser"
    as_normaliser = secured.settings.model_copy(
        update={"kafka": secured.sasl_settings(normaliser, secured.passwords[normaliser])}
    )
    run_normalize(as_normaliser, secured.registry, once=True, checkpoint=tmp_path / "checkpoint")
    requests = [key for key, _ in decode_topic(secured.settings, refresh_topic(secured.prefix))]
    wanted = {"tname": "PHONE", "person_id": 8, "aux_string": "mobile"}.items()
    assert any(wanted <= key.items() for key in requests), requests  # written as the normaliser's user

    a = secured.user("A")
    env = {
        "MCQ_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{settings.stack.ports.kafka_sasl}",
        "MCQ_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "MCQ_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "MCQ_KAFKA__SSL_CA_LOCATION": str(stack_tls(settings).ca_cert),
        # the listener's own credentials, by its name (no shared kafka.sasl_username)
        "MCQ_LISTENERS__A__SASL_USERNAME": a,
        "MCQ_LISTENERS__A__SASL_PASSWORD": secured.passwords[a],
    }
    run = secured.mcq(
        "listen", "A", "--registry", str(secured.registry_file), "--until-caught-up", "--no-http", env=env
    )
    assert run.exit_code == 0, (run.output, run.stderr)
    assert secured.passwords[a] not in run.output + run.stderr
    expected = {ChangeKey("PHONE", person_id=int(r["person_id"]), aux_string=r["tele_type"]).text(): r for r in rows}
    assert target_state(secured.settings, f"{secured.schema}_t.a") == expected
