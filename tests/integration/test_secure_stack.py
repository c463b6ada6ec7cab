"""`mcq stack up --secure`: a stack of its own (PostgreSQL, Kafka, the schema registry and
Connect, on ports and a home of its own) whose broker has no port without a login. A user's
table goes through the whole pipeline on it, every command run as a user would run it, with
no Kafka identity configured: the operator's commands log in as the stack's admin, the
normaliser and each listener as their own principal, which `mcq acl apply` made and granted
only what the registry says. Clients without a login, or reaching past their ACLs, are
refused; no secret value appears in any command's output, the registry topic or the
stack's logs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import psycopg
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from mcq.capture.connector import raw_topic
from mcq.change import ChangeKey
from mcq.config import Settings, load_settings
from mcq.registry import Registry, parse_registry
from mcq.stack.services import KAFKA_CONTROLLER
from mcq.testing.listeners import target_state
from mcq.testing.worlds import wait_raw_records
from mcq.topics.listener import ListenerTopics
from mcq.topics.plan import registry_topic
from tests.integration.net import free_port
from tests.integration.pgtext import rows_as_text
from tests.integration.webhook_server import receiving_webhook, replay
from tests.support.refusals import consume_error, produce_error, refusal_of

# a stack of its own: minutes on two cores, in make long; CI runs it when its time budget allows
pytestmark = [pytest.mark.long, pytest.mark.extended(minutes=4)]

MCQ = [sys.executable, "-m", "mcq.cli"]
SERVICES = "postgres,kafka,registry,connect"
PORTS = ("postgres", "kafka", "kafka_controller", "kafka_sasl", "connect", "registry", "ldap", "ldaps")
STACK_UP_S = 300  # four services started one after another on two cores (JVMs included)

REGISTRY = """
sources:
  - {{name: sec, schemas: [sec], publication: mcq_sec, slot: mcq_sec}}
tables:
  - tname: PHONE
    partitions: 2
    feeds:
      - source: sec
        table: sec.phone
        keys: {{person_id: person_id, aux_string: tele_type}}
        columns: [person_id, tele_type, phone]
  - tname: ROOM
    partitions: 1
listeners:
  - name: A
    owner: tests@example
    adapter: {{type: table, settings: {{table: sec_t.a}}}}
  - name: B
    owner: tests@example
    adapter: {{type: webhook, settings: {{url: "{url}", timeout_s: 5, bearer_token: "${{env:MCQ_SECRET_HOOK_TOKEN}}"}}}}
interests:
  - {{listener: A, tname: PHONE}}
  - {{listener: B, tname: PHONE}}
  - {{listener: B, tname: ROOM}}
"""


@dataclass
class SecureStack:
    home: Path
    env: dict[str, str]
    settings: Settings  # as the stack's admin: no Kafka identity configured
    secrets: dict[str, str]  # what -> value: none may appear in any output or log
    outputs: list[str] = field(default_factory=list)

    def mcq(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300, exit_code: int = 0) -> str:
        """Run an mcq command as a user would (EXIT_CODE expected); its whole output is kept
        for the secrets check."""
        run = subprocess.run(
            [*MCQ, *args], capture_output=True, text=True, env={**self.env, **(env or {})}, timeout=timeout
        )
        output = run.stdout + run.stderr
        self.outputs.append(f"$ mcq {' '.join(args)}\n{output}")
        assert run.returncode == exit_code, f"mcq {' '.join(args)} exited {run.returncode}:\n{output[-4000:]}"
        return output

    def as_principal(self, user: str) -> dict[str, Any]:
        """A client configuration as local principal USER (its password derived by the stack)."""
        return self.settings.as_local_principal(user).kafka.client_config()


@pytest.fixture(scope="module")
def secure_stack() -> Iterator[SecureStack]:
    home = Path(tempfile.mkdtemp(prefix="mcq-secure-home-", dir="/tmp"))
    home.chmod(0o755)  # PostgreSQL's own user must reach its data directory when tests run as root
    token = uuid.uuid4().hex[:10]
    secrets = {
        "admin password": f"adm-{token}-Pw",
        "connect password": f"con-{token}-Pw",
        "database password": f"db-{token}-Pw",
        "webhook token": f"hook-{token}-Tk",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCQ_")}
    env.update({f"MCQ_STACK__PORTS__{name.upper()}": str(free_port()) for name in PORTS})
    env.update(
        {
            "MCQ_HOME": str(home),
            "MCQ_STACK__KAFKA_ADMIN_PASSWORD": secrets["admin password"],
            "MCQ_STACK__KAFKA_CONNECT_PASSWORD": secrets["connect password"],
            "MCQ_SOURCE__PASSWORD": secrets["database password"],
            "MCQ_VENDOR__PASSWORD": secrets["database password"],
        }
    )
    sec = SecureStack(home, env, Settings(), secrets)
    try:
        sec.mcq("stack", "up", "--secure", "--only", SERVICES, timeout=STACK_UP_S)
        with mock.patch.dict(os.environ, env, clear=True):
            sec.settings = load_settings()
        assert sec.settings.local_identities
        stack = sec.settings.stack
        for user in ("mcq-normaliser", "mcq-listener-a", "mcq-listener-b", KAFKA_CONTROLLER):
            secrets[f"{user} password"] = stack.local_password(user).get_secret_value()
        secrets["stack secret"] = stack.secret_file.read_text().strip()
        yield sec
    finally:
        subprocess.run([*MCQ, "stack", "down", "--only", SERVICES], env=env, capture_output=True, timeout=180)
        shutil.rmtree(home, ignore_errors=True)


def test_the_secure_stack_has_no_port_without_a_login(secure_stack: SecureStack) -> None:
    s = secure_stack.settings
    ports = s.stack.ports
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", ports.kafka))  # the quick start's plaintext port is not there
    tls_only = {"bootstrap.servers": s.kafka.bootstrap_servers, "security.protocol": "SSL"}
    tls_only["ssl.ca.location"] = str(s.stack.ca_cert)
    assert refusal_of(tls_only, 4)  # TLS without a login
    assert refusal_of({"bootstrap.servers": s.kafka.bootstrap_servers}, 4)  # plaintext to SASL_SSL
    assert refusal_of({"bootstrap.servers": f"127.0.0.1:{ports.kafka_controller}"}, 4)  # the controller's
    wrong = {**s.kafka.client_config(), "sasl.password": "not-the-admin-password"}
    assert "Authentication failed" in refusal_of(wrong)
    connectors = f"http://127.0.0.1:{ports.connect}/connectors"
    assert httpx.get(connectors, timeout=10).status_code == 401  # Connect's REST API asks for its login
    assert httpx.get(connectors, auth=s.connect.auth(), timeout=10).status_code == 200
    status = secure_stack.mcq("stack", "status", "--only", SERVICES)
    assert "down" not in status


def test_the_pipeline_runs_with_each_process_as_its_own_principal(secure_stack: SecureStack, tmp_path: Path) -> None:
    sec = secure_stack
    s = sec.settings
    with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA sec")
        conn.execute(
            "CREATE TABLE sec.phone (person_id integer, tele_type text, phone text, PRIMARY KEY (person_id, tele_type))"
        )
        conn.execute("INSERT INTO sec.phone SELECT i, 'office', '+47 ' || i FROM generate_series(1, 40) i")
    with receiving_webhook(bearer=sec.secrets["webhook token"]) as (url, bodies):
        registry_file = tmp_path / "registry.yaml"
        registry_file.write_text(REGISTRY.format(url=url))
        registry: Registry = parse_registry(registry_file.read_text(), str(registry_file))
        # the operator's commands, as the stack's admin
        sec.mcq("registry", "apply", str(registry_file))
        sec.mcq("topics", "apply")
        sec.mcq("schemas", "apply")
        sec.mcq("connect", "apply")
        # a listener logs in as its own principal, not as the admin: none exists before `acl apply`
        refused = sec.mcq("listen", "A", "--until-caught-up", "--no-http", exit_code=2, timeout=120)
        assert len(refused.splitlines()) == 1 and "refused the login of 'mcq-listener-a'" in refused, refused
        assert "Authentication failed" in refused and "mcq acl apply" in refused, refused
        applied = sec.mcq("acl", "apply")
        for user in ("mcq-normaliser", "mcq-listener-a", "mcq-listener-b"):
            assert f"{user}: SCRAM-SHA-512 user made" in applied
        assert "no drift" in sec.mcq("acl", "diff")
        sec.mcq("config")
        sec.mcq("registry", "show")
        with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
            conn.execute("UPDATE sec.phone SET phone = phone || '-0' WHERE person_id % 4 = 0")
            conn.execute("DELETE FROM sec.phone WHERE person_id IN (5, 6)")
            conn.execute("INSERT INTO sec.phone VALUES (6, 'mobile', '+47 906'), (41, 'office', '+47 41')")
            rows = rows_as_text(conn, "sec.phone")
        wait_raw_records(s, raw_topic(registry.sources[0], "sec.phone"), 40 + 10 + 2 + 2)
        # the normaliser and the listeners, each as its own principal (nothing configured)
        sec.mcq("streams", "normalize", "--once", "--no-http", "--checkpoint", str(tmp_path / "ckpt"), timeout=600)
        sec.mcq("listen", "A", "--until-caught-up", "--no-http")
        token = {"MCQ_SECRET_HOOK_TOKEN": sec.secrets["webhook token"]}
        sec.mcq("listen", "B", "--until-caught-up", "--no-http", env=token)
        expected = {
            ChangeKey("PHONE", person_id=int(r["person_id"]), aux_string=r["tele_type"]).text(): r for r in rows
        }
        assert target_state(s, "sec_t.a") == expected
        assert replay(bodies) == expected

    # each principal is held to its ACLs on this stack too
    a = sec.as_principal("mcq-listener-a")
    room = registry.table("ROOM", None)
    assert room is not None
    refused = consume_error(a, "mcq.A", room.topic("mcq"))
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
    refused = consume_error(a, "mcq.B", ListenerTopics("mcq", "B").bulk)
    assert refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, refused
    phone = registry.table("PHONE", None)
    assert phone is not None
    for who, topic in (("mcq-listener-a", phone.topic("mcq")), ("mcq-normaliser", ListenerTopics("mcq", "A").bulk)):
        assert "TOPIC_AUTHORIZATION_FAILED" in produce_error(sec.as_principal(who), topic)


def test_no_secret_value_appears_in_any_output_the_registry_topic_or_the_logs(secure_stack: SecureStack) -> None:
    sec = secure_stack
    assert sec.outputs, "the commands ran"
    where: dict[str, str] = {f"output of {out.splitlines()[0]}": out for out in sec.outputs}
    where["the registry topic"] = _topic_bytes(sec.settings, registry_topic("mcq")).decode(errors="replace")
    for log in sorted((sec.home / "logs").glob("*")):
        where[str(log)] = log.read_text(errors="replace")
    assert len(where) > len(sec.outputs) + 3  # the registry topic and the services' logs
    found = [
        f"{what} in {place}" for place, text in where.items() for what, value in sec.secrets.items() if value in text
    ]
    assert found == []


def _topic_bytes(settings: Settings, topic: str) -> bytes:
    """Every key and value TOPIC holds, concatenated (read as the admin, nothing committed)."""
    conf = {**settings.kafka.client_config(), "group.id": f"_mcq-test-{uuid.uuid4().hex}", "enable.auto.commit": False}
    consumer = Consumer(conf)
    try:
        meta = consumer.list_topics(topic, timeout=20).topics[topic]
        assert meta.error is None, meta.error
        parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
        ends = {p.partition: consumer.get_watermark_offsets(p, timeout=20)[1] for p in parts}
        consumer.assign(parts)
        chunks: list[bytes] = []
        done: set[int] = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + 60
        while len(done) < len(ends) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None:
                continue
            chunks += [msg.key() or b"", msg.value() or b""]
            if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                done.add(msg.partition() or 0)
        assert len(done) == len(ends), f"{topic} was not read to its end"
        return b"".join(chunks)
    finally:
        consumer.close()
