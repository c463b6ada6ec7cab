"""The whole pipeline on the real stack: source -> Debezium -> Spark -> Kafka -> listener ->
LDAP and -> the vendor's import table, for a generated world of 10,000 people and a
random stream of changes, verified key by key against the source."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from ldap3 import Connection, Server

from mcq.config import Settings
from mcq.demo.checks import Check, check_insite, check_ldap
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from mcq.testing.worlds import Captured, captured_world
from mcq.topics.listener import ListenerTopics
from mcq.topics.read import watermarks

PEOPLE = 10_000

# The test's own deadlines, measured on two cores, and pytest's timeout made from them:
# pytest-timeout counts the module fixture's setup (loading and capturing the world) and
# the teardown too, so the limit is their sum plus a margin, and it fires only when the
# test hangs past every deadline of its own (pyproject's 600 s is for everything else).
WORLD_SETUP_S = 300  # 10,000 people loaded and captured (big_world)
FIRST_BATCH_S = 600  # the normaliser's first micro-batch (Spark's start included)
CHANGES_S = 120  # random_changes: 2,000 changes
CONVERGE_S = 1500  # LDAP and the import table equal to the source
LAST_CHECK_S = 180  # a check started just before CONVERGE_S runs to its end
TEARDOWN_S = 240  # three processes stopped (60 s each at most), LDAP and schemas removed
TIMEOUT_S = WORLD_SETUP_S + FIRST_BATCH_S + CHANGES_S + CONVERGE_S + LAST_CHECK_S + TEARDOWN_S + 300


@pytest.fixture(scope="module")
def big_world(stack: Stack, settings: Settings) -> Iterator[Captured]:
    with captured_world(settings, people=PEOPLE, seed=11) as cap:
        yield cap


def random_changes(settings: Settings, schema: str, n: int, seed: int) -> None:
    """n random changes: numbers, statuses, names, hires, memberships, housekeeping-only
    touches and deletions, some several to a transaction."""
    rnd = random.Random(seed)
    s = schema
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        people = [r[0] for r in conn.execute(f"SELECT person_id FROM {s}.people ORDER BY 1")]
        phones = conn.execute(f"SELECT person_id, tele_type FROM {s}.directory_telephone").fetchall()
        groups = [r[0] for r in conn.execute(f"SELECT group_name FROM {s}.unix_groups")]
        logins = [r[0] for r in conn.execute(f"SELECT username FROM {s}.logins")]
        next_id = max(people) + 1
        done = 0
        while done < n:
            with conn.transaction():
                for _ in range(rnd.choice((1, 1, 1, 3))):  # mostly one change per transaction
                    kind = rnd.random()
                    if kind < 0.35:
                        p, t = rnd.choice(phones)
                        conn.execute(
                            f"UPDATE {s}.directory_telephone SET phone_number = %s "
                            "WHERE person_id = %s AND tele_type = %s",
                            (f"+1 518 {done:07d}", p, t),
                        )
                    elif kind < 0.55:
                        conn.execute(
                            f"UPDATE {s}.person_status SET status = %s WHERE person_id = %s",
                            (rnd.choice(["Student", "Staff", "Faculty", "Alumni"]), rnd.choice(people)),
                        )
                    elif kind < 0.70:
                        conn.execute(
                            f"UPDATE {s}.people SET last_name = %s WHERE person_id = %s",
                            (f"Renamed{done}", rnd.choice(people)),
                        )
                    elif kind < 0.80:
                        conn.execute(
                            f"INSERT INTO {s}.people (person_id, first_name, last_name) VALUES (%s, 'New', %s)",
                            (next_id, f"Hire{next_id}"),
                        )
                        conn.execute(
                            f"INSERT INTO {s}.person_status (person_id, status) VALUES (%s, 'Staff')", (next_id,)
                        )
                        people.append(next_id)
                        next_id += 1
                    elif kind < 0.88:
                        conn.execute(
                            f"INSERT INTO {s}.group_members (group_name, username) VALUES (%s, %s) "
                            "ON CONFLICT DO NOTHING",
                            (rnd.choice(groups), rnd.choice(logins)),
                        )
                    elif kind < 0.95:
                        conn.execute(
                            f"UPDATE {s}.people SET updated_at = now() WHERE person_id = %s", (rnd.choice(people),)
                        )  # housekeeping only
                    else:
                        gone = people.pop(rnd.randrange(len(people)))
                        conn.execute(f"DELETE FROM {s}.people WHERE person_id = %s", (gone,))
                        phones = [x for x in phones if x[0] != gone]
                        logins = [r[0] for r in conn.execute(f"SELECT username FROM {s}.logins")]
                    done += 1


def pending(settings: Settings, registry: Registry, listeners: tuple[str, ...]) -> int:
    """Records of the listeners' logical topics their real-time groups have not committed yet."""
    total = 0
    for name in listeners:
        group = ListenerTopics(settings.topic_prefix, name).group
        consumer = Consumer({**settings.kafka.client_config(), "group.id": group, "enable.auto.commit": False})
        try:
            topics = consumer.list_topics(timeout=10).topics
            tps = [
                TopicPartition(t, p)
                for t in {x.topic(settings.topic_prefix) for x in registry.tables_of(name)}
                if t in topics
                for p in topics[t].partitions
            ]
            for tp in consumer.committed(tps, timeout=10):
                low, high = watermarks(consumer, tp)
                total += high - max(tp.offset, low)
        finally:
            consumer.close()
    return total


@pytest.mark.scale
# about 5 minutes; make run's demo checks the same pipeline at 3,000 people in every CI
@pytest.mark.extended(minutes=8)
@pytest.mark.timeout(TIMEOUT_S)
def test_a_world_of_ten_thousand_people_converges_in_ldap_and_the_import_table(
    big_world: Captured, settings: Settings, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex[:8]
    prefix = f"tp{token}"
    s = settings.model_copy(update={"topic_prefix": prefix})
    base = f"ou=p{token},{settings.ldap.base_dn}"
    conn = Connection(
        Server(settings.ldap.url),
        user=settings.ldap.bind_dn,
        password=settings.ldap.password.get_secret_value(),
        auto_bind=True,
    )
    conn.add(base, ["organizationalUnit"], {"ou": f"p{token}"})
    for ou in ("people", "groups"):
        conn.add(f"ou={ou},{base}", ["organizationalUnit"], {"ou": ou})
    vendor = f"v_{token}"
    text = (
        big_world.registry_yaml.replace("ou=people,{base}", f"ou=people,{base}")
        .replace("ou=groups,{base}", f"ou=groups,{base}")
        .replace("        vendor_schema: insite\n", f"        vendor_schema: {vendor}\n")
    )
    assert f"ou=people,{base}" in text and f"vendor_schema: {vendor}" in text
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(text)
    registry = parse_registry(text, str(registry_file))
    env = {**os.environ, "MCQ_TOPIC_PREFIX": prefix}
    commands = {
        "normalize": ["streams", "normalize", "--http-port", "0",
                      "--registry", str(registry_file), "--checkpoint-interval", "10 seconds",
                      "--checkpoint", str(tmp_path / "ckpt")],
        "entities": ["entities", "run", "--registry", str(registry_file), "--http-port", "0"],
        "LDAP": ["listen", "LDAP", "--registry", str(registry_file), "--http-port", "0"],
        "Insite": ["listen", "Insite", "--registry", str(registry_file), "--http-port", "0"],
    }  # fmt: skip
    logs = {name: tmp_path / f"{name}.log" for name in commands}
    outputs = {name: path.open("ab") for name, path in logs.items()}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "mcq.cli", *args],
            env=env,
            stdout=outputs[name],
            stderr=subprocess.STDOUT,
            start_new_session=name == "normalize",
        )
        for name, args in commands.items()
    }

    def assert_running() -> None:
        """Each process is still up; one that ended is named, with the end of its own log."""
        for name, proc in procs.items():
            assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{logs[name].read_text()[-4000:]}"

    try:
        # the changes come while the initial load is on its way: after the first micro-batch
        deadline = time.monotonic() + FIRST_BATCH_S
        while "batch 0 of " not in logs["normalize"].read_text() and time.monotonic() < deadline:
            assert_running()
            time.sleep(1)
        random_changes(settings, big_world.schema, 2_000, seed=5)
        ldap = insite = Check("none", problems=["not checked yet"])
        deadline = time.monotonic() + CONVERGE_S
        while time.monotonic() < deadline:
            assert_running()
            # a whole comparison reads 10,000 entries: only when both listeners have nothing pending
            if pending(s, registry, ("LDAP", "Insite")):
                time.sleep(5)
                continue
            ldap = check_ldap(s, registry, f"ou=people,{base}", f"ou=groups,{base}")
            insite = check_insite(s, registry, vendor, set()) if ldap.ok else insite
            if ldap.ok and insite.ok:
                break
            time.sleep(10)
        assert ldap.ok, ldap.problems[:10]
        assert insite.ok, insite.problems[:10]
        assert ldap.checked > PEOPLE and insite.checked >= PEOPLE * 0.9
        # the normaliser's own health and metrics, as a probe and Prometheus read them
        health = re.search(r"normalize: health (http://[0-9.]+:\d+)", logs["normalize"].read_text())
        assert health, logs["normalize"].read_text()[-2000:]
        for probe in ("livez", "readyz"):
            assert urllib.request.urlopen(f"{health.group(1)}/{probe}", timeout=10).status == 200
        metrics = urllib.request.urlopen(f"{health.group(1)}/metrics", timeout=10).read().decode()
        rows_in = re.findall(r'^mcq_normalize_rows_total{[^}]*direction="in"[^}]*} (\S+)$', metrics, re.M)
        assert sum(float(v) for v in rows_in) >= 2_000, metrics
        assert "mcq_normalize_last_batch_timestamp_seconds" in metrics
    finally:
        os.killpg(procs["normalize"].pid, signal.SIGTERM)
        for name in ("entities", "LDAP", "Insite"):
            procs[name].send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        for out in outputs.values():
            out.close()
        conn.search(base, "(objectClass=*)", attributes=["1.1"], paged_size=0)
        for dn in sorted((e.entry_dn for e in conn.entries), key=lambda d: -d.count(",")):
            conn.delete(dn)
        conn.unbind()
        with psycopg.connect(settings.vendor.dsn(), autocommit=True) as db:
            db.execute(f"DROP SCHEMA IF EXISTS {vendor} CASCADE")
