"""``mcq entities run`` killed (SIGKILL) in the middle of a fan-out, as its pod would be:
the command is run as its own process, started from a snapshot a clean run left, killed
while thousands of orders are being written again after their customers moved, and run
again. Nothing is lost: the entity topic's last state of every order, and a listener's
target with a rule over the customer's country, equal what the records written to the
member topics say (computed here, apart from the entity code)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers.runtime.listener import ListenerRuntime
from mcq.change import Change, ChangeCodec, ChangeKey, Position
from mcq.config import Settings
from mcq.contract import register_topic, registry_client
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import produce, target_state
from mcq.topics.follow import TopicFollower
from mcq.topics.read import all_watermarks

pytestmark = pytest.mark.faults

REGISTRY = """
sources:
  - {{name: shop, schemas: [shop]}}
tables:
  - tname: CUSTOMER
    feeds: [{{source: shop, table: shop.customers, keys: {{pkey_number: id}}, columns: [id, name, country]}}]
  - tname: ORDERS
    feeds: [{{source: shop, table: shop.orders, keys: {{pkey_number: id}}, columns: [id, customer_id, total]}}]
  - tname: ORDER_VIEW
    entity:
      root: ORDERS
      joins: [{{name: customer, table: CUSTOMER, kind: many-to-one, match: {{pkey_number: customer_id}}}}]
listeners:
  - {{name: Domestic, owner: t@example, adapter: {{type: table, settings: {{table: {target}}}}}}}
interests:
  - {{listener: Domestic, tname: ORDER_VIEW, rule: "customer.country = 'USA'"}}
"""
ORDERS, CUSTOMERS = 20_000, 20
_at = [1000]


def _change(tname: str, pk: int, row: dict[str, str | None] | None) -> Change:
    _at[0] += 1
    return Change(ChangeKey(tname, pkey_number=pk), "DELETE" if row is None else "UPDATE",  # type: ignore[arg-type]
                  Position(_at[0], _at[0]), datetime.now(UTC), f"shop.{tname.lower()}", after=row)  # fmt: skip


def _written(admin: AdminClient, topic: str) -> int:
    """Records in a topic (the sum of its partitions' high watermarks)."""
    meta = admin.list_topics(timeout=10).topics.get(topic)
    if meta is None or not meta.partitions:
        return 0
    return sum(high for _, high in all_watermarks(admin, [TopicPartition(topic, p) for p in meta.partitions]).values())


def _last_states(settings: Settings, topic: str) -> dict[int | None, dict[str, Any] | None]:
    codec = ChangeCodec(registry_client(settings))
    out: dict[int | None, dict[str, Any] | None] = {}

    def fold(msg: Message) -> None:
        args = (msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key())
        change = codec.decode(*args, msg.value())
        key = change.key if change is not None else codec.decode_key(*args)
        out[key.pkey_number] = change.state if change is not None else None

    follower = TopicFollower(settings, [topic], fold, "test-entities-kill")
    follower.start()
    follower.catch_up(120)
    follower.close()
    return {k: v for k, v in out.items() if v is not None}


def test_a_killed_entities_job_loses_nothing_when_run_again(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    s = settings.model_copy(update={"topic_prefix": f"tk{token}", "state_dir": tmp_path / "state"})
    prefix = s.topic_prefix
    target = f"ent_kill_{token}.domestic"
    registry_file = tmp_path / "shop.yaml"
    registry_file.write_text(REGISTRY.format(target=target))
    registry = parse_registry(registry_file.read_text(), str(registry_file))
    client = registry_client(s)
    for name in ("customer", "orders"):
        register_topic(client, f"{prefix}.{name}")
    countries: dict[int, str] = {c: "USA" if c % 2 else "UK" for c in range(CUSTOMERS)}
    orders: dict[int, dict[str, str | None]] = {
        o: {"id": str(o), "customer_id": str(o % CUSTOMERS), "total": str(o)} for o in range(ORDERS)
    }
    customers = [_change("CUSTOMER", c, {"id": str(c), "name": f"c{c}", "country": k}) for c, k in countries.items()]
    produce(s, f"{prefix}.customer", customers)
    produce(s, f"{prefix}.orders", [_change("ORDERS", o, row) for o, row in orders.items()])
    env = {**os.environ, "MCQ_TOPIC_PREFIX": prefix, "MCQ_HOME": str(s.stack.home), "MCQ_STATE_DIR": str(s.state_dir)}
    command = [sys.executable, "-m", "mcq.cli", "entities", "run", "--registry", str(registry_file), "--no-http"]
    log = tmp_path / "entities.log"

    first = subprocess.run([*command, "--until-caught-up"], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    topic = f"{prefix}.order_view"
    admin = AdminClient(s.kafka.client_config())
    assert _written(admin, topic) == ORDERS

    with log.open("wb") as out:
        running = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            time.sleep(5)  # started from the first run's snapshot, nothing to write
            assert running.poll() is None, log.read_text()
            before = _written(admin, topic)
            # every customer moves: all 20,000 orders are written again, twice; killed on the way
            flips = []
            for _ in range(2):
                for c in countries:
                    countries[c] = "USA" if countries[c] != "USA" else "Mexico"
                    flips.append(_change("CUSTOMER", c, {"id": str(c), "name": f"c{c}", "country": countries[c]}))
            produce(s, f"{prefix}.customer", flips)
            while _written(admin, topic) == before and running.poll() is None:  # killed once it has begun
                time.sleep(0.01)
            running.send_signal(signal.SIGKILL)
            running.wait(30)
        finally:
            if running.poll() is None:
                running.kill()
    killed_at = _written(admin, topic) - before
    assert "restored" in log.read_text(), log.read_text()  # the killed run had started from the snapshot
    # meanwhile: some orders deleted, some moved to another customer
    changes = []
    for o in range(0, ORDERS, 97):
        changes.append(_change("ORDERS", o, None))
        del orders[o]
    for o in range(1, ORDERS, 89):
        if o in orders:
            orders[o] = {**orders[o], "customer_id": str((o + 1) % CUSTOMERS)}
            changes.append(_change("ORDERS", o, orders[o]))
    produce(s, f"{prefix}.orders", changes)

    again = subprocess.run([*command, "--until-caught-up"], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert 0 < killed_at < ORDERS, f"{killed_at} written before the kill: not a kill in the middle of the fan-out"

    def entity(row: dict[str, str | None]) -> dict[str, str | None]:
        c = int(row["customer_id"] or 0)
        return {**row, "customer.id": str(c), "customer.name": f"c{c}", "customer.country": countries[c]}

    expected = {o: entity(row) for o, row in orders.items()}
    assert _last_states(s, topic) == expected
    runtime = ListenerRuntime(s, "Domestic", registry=registry, http_port=None)
    assert runtime.run(until_caught_up=True) == 0
    assert target_state(s, target) == {
        ChangeKey("ORDER_VIEW", pkey_number=o).text(): row
        for o, row in expected.items()
        if row["customer.country"] == "USA"
    }
