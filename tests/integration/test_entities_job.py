"""``mcq entities run`` on the real stack, fed records as the normaliser writes them: it
follows the shared registry (a join added to a running entity is written into every
entity, without a restart), writes nothing again for an entity that did not change, and
a second run started on the first one's snapshot writes only what changed meanwhile: a
deleted root as a DELETE and its tombstone, in the entity topic read back here."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Message

from mcq.change import Change, ChangeCodec, ChangeKey, Position
from mcq.config import Settings
from mcq.contract import register_topic, registry_client
from mcq.registry import parse_registry
from mcq.registry.store import RegistryReader, RegistryStore
from mcq.stack import Stack
from mcq.testing.listeners import produce, wait_for
from mcq.testing.logs import log_lines
from mcq.topics.follow import TopicFollower
from streams.entities.job import EntityJob

REGISTRY = """
sources:
  - {name: shop, schemas: [shop]}
tables:
  - tname: CUSTOMER
    feeds: [{source: shop, table: shop.customers, keys: {pkey_number: id}, columns: [id, name, country]}]
  - tname: ORDERS
    feeds: [{source: shop, table: shop.orders, keys: {pkey_number: id}, columns: [id, customer_id, total]}]
  - tname: ORDER_VIEW
    entity:
      root: ORDERS
      joins: [JOINS]
"""
CUSTOMER_JOIN = "{name: customer, table: CUSTOMER, kind: many-to-one, match: {pkey_number: customer_id}}"
_at = [100]


def _change(tname: str, pk: int, row: dict[str, str | None] | None) -> Change:
    _at[0] += 1
    kind = "DELETE" if row is None else "UPDATE"
    return Change(ChangeKey(tname, pkey_number=pk), kind, Position(_at[0], _at[0]), datetime.now(UTC),  # type: ignore[arg-type]
                  f"shop.{tname.lower()}", after=row)  # fmt: skip


def _records(settings: Settings, topic: str) -> list[Change | ChangeKey]:
    """Every record of the entity topic in order: a change, or the key of a tombstone."""
    codec = ChangeCodec(registry_client(settings))
    out: list[Change | ChangeKey] = []

    def fold(msg: Message) -> None:
        args = (msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key())
        change = codec.decode(*args, msg.value())
        out.append(change if change is not None else codec.decode_key(*args))

    follower = TopicFollower(settings, [topic], fold, "test-entities")
    follower.start()
    follower.catch_up(60)
    follower.close()
    return out


def _pk(record: Change | ChangeKey) -> int | None:
    return record.key.pkey_number if isinstance(record, Change) else record.pkey_number


def _per_key(records: list[Change | ChangeKey]) -> dict[int | None, list[Change | ChangeKey]]:
    """Each key's records in order (a key lives in one partition; partitions interleave)."""
    out: dict[int | None, list[Change | ChangeKey]] = {}
    for r in records:
        out.setdefault(_pk(r), []).append(r)
    return out


def _lasts(settings: Settings, topic: str) -> dict[int | None, Change | ChangeKey]:
    return {k: v[-1] for k, v in _per_key(_records(settings, topic)).items()}


def test_the_job_follows_the_registry_and_writes_only_what_changed(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    s = settings.model_copy(update={"topic_prefix": f"tj{token}", "state_dir": tmp_path / "state"})
    prefix = s.topic_prefix
    without_join = parse_registry(REGISTRY.replace("[JOINS]", "[]"), "shop.yaml")
    with_join = parse_registry(REGISTRY.replace("[JOINS]", f"[{CUSTOMER_JOIN}]"), "shop.yaml")
    store = RegistryStore(s)
    store.apply(without_join)
    client = registry_client(s)
    for name in ("customer", "orders"):
        register_topic(client, f"{prefix}.{name}")
    produce(s, f"{prefix}.customer", [_change("CUSTOMER", 1, {"id": "1", "name": "Ada", "country": "UK"})])
    produce(s, f"{prefix}.orders", [
        _change("ORDERS", o, {"id": str(o), "customer_id": "1", "total": str(o)}) for o in range(5)
    ])  # fmt: skip
    topic = f"{prefix}.order_view"

    reader = RegistryReader(s)
    reader.catch_up()
    job = EntityJob(s, reader.registry(), reader=reader)
    thread = threading.Thread(target=job.run, daemon=True)
    thread.start()
    try:
        wait_for("5 orders written", lambda: len(_records(s, topic)) == 5, timeout=60)
        assert all(isinstance(r, Change) and "customer.country" not in (r.after or {}) for r in _records(s, topic))
        store.apply(with_join)  # a join added while it runs
        wait_for("every order written again with its customer", lambda: len(_records(s, topic)) == 10, timeout=60)
        lasts = _lasts(s, topic)
        assert {r.after.get("customer.country") for r in lasts.values() if isinstance(r, Change) and r.after} == {"UK"}
        # the same state again: nothing written
        produce(s, f"{prefix}.customer", [_change("CUSTOMER", 1, {"id": "1", "name": "Ada", "country": "UK"})])
        produce(s, f"{prefix}.customer", [_change("CUSTOMER", 1, {"id": "1", "name": "Ada", "country": "NO"})])
        wait_for("the country change in every order", lambda: len(_records(s, topic)) == 15, timeout=60)
        # measured: the customer's records put its 5 orders dirty (once, or once each if read apart)
        fanout = job.metrics.registry.get_sample_value("mcq_entity_fanout_sum", {"entity": "ORDER_VIEW"})
        assert fanout in (5, 10)
    finally:
        job.stop()
        thread.join(60)
    assert not thread.is_alive()

    # while it is stopped: an order deleted, another changed; the next run starts from its snapshot
    produce(s, f"{prefix}.orders", [_change("ORDERS", 3, None), _change("ORDERS", 4, {"id": "4", "customer_id": "1",
                                                                                       "total": "400"})])  # fmt: skip
    with log_lines() as said:
        second = EntityJob(s, with_join)
        assert second.run(until_caught_up=True) == 0
    assert any("restored" in line for line in said), said
    tail = [r for rs in _per_key(_records(s, topic)).values() for r in rs[3:]]  # after each key's first three
    kinds = sorted((r.key.pkey_number, r.change_type) if isinstance(r, Change) else (r.pkey_number, "tombstone")
                   for r in tail)  # fmt: skip
    assert kinds == [(3, "DELETE"), (3, "tombstone"), (4, "UPDATE")]
    last4 = next(r for r in tail if isinstance(r, Change) and r.key.pkey_number == 4)
    assert last4.after is not None and last4.after["total"] == "400" and last4.after["customer.country"] == "NO"
    # positions only grow per key, so a listener never skips a record as old
    positions = [r.position for r in _records(s, topic) if isinstance(r, Change) and r.key.pkey_number == 4]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
