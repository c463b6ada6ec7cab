"""Entities: the fan-out of one related row's change, end to end, and the entity store's
memory.

Fan-out: a registry of its own (CUSTOMER, ORDERS and ITEM, the ORDER_VIEW entity) and one
``table`` listener with AQ's East rule over the order's customer's country. One customer
with ``--orders`` RUSH orders (two items each) is written to the logical topics as the
normaliser writes them; ``mcq entities run`` and the listener run in this process, in real
time. Then the customer's country changes, ``--rounds`` times, USA -> UK -> USA ...: every
order leaves East, then enters it again. The figure is the time from the customer's record
being written to the target table holding the last of its orders' new state (all rows
there, or none), read by polling the table every 10 ms.

Memory: ``--entities`` orders, each with two items and one of 10,000 customers, put into an
entity index in this process (the state ``mcq entities run`` keeps per entity); traced
with tracemalloc, and the time to assemble every entity once (a start's comparison).

    .venv/bin/python -m bench.entities --orders 1000 --rounds 5 --entities 100000

Needs the local stack up (``mcq stack up``). Prints Markdown tables for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
import tracemalloc
import uuid
from datetime import UTC, datetime

import psycopg

from consumers.projection import Row
from consumers.runtime.listener import ListenerRuntime
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings
from mcq.contract import register_topic, registry_client
from mcq.registry import parse_registry
from mcq.testing.listeners import produce
from streams.entities.index import EntityIndex
from streams.entities.job import EntityJob

from .table import print_table

REGISTRY = """
sources:
  - {{name: bench, schemas: [shop]}}
tables:
  - tname: CUSTOMER
    feeds: [{{source: bench, table: shop.customers, keys: {{pkey_number: id}}, columns: [id, name, country]}}]
  - tname: ORDERS
    feeds:
      - {{source: bench, table: shop.orders, keys: {{pkey_number: id}},
         columns: [id, customer_id, orderregion, ordertype, total]}}
  - tname: ITEM
    feeds: [{{source: bench, table: shop.items, keys: {{pkey_number: id}}, columns: [id, order_id, sku, qty]}}]
  - tname: ORDER_VIEW
    entity:
      root: ORDERS
      joins:
        - {{name: customer, table: CUSTOMER, kind: many-to-one, match: {{pkey_number: customer_id}}}}
        - {{name: items, table: ITEM, kind: one-to-many, match: {{order_id: pkey_number}}, columns: [sku, qty]}}
listeners:
  - {{name: East, owner: bench@localhost, adapter: {{type: table, settings: {{table: {target}}}}}}}
interests:
  - listener: East
    tname: ORDER_VIEW
    rule: "orderregion = 'EASTERN' OR (ordertype = 'RUSH' AND customer.country = 'USA')"
"""

_lsn = [1000]


def _change(tname: str, pk: int, row: dict[str, str | None]) -> Change:
    _lsn[0] += 1
    return Change(ChangeKey(tname, pkey_number=pk), "UPDATE", Position(_lsn[0], _lsn[0]), datetime.now(UTC),
                  f"shop.{tname.lower()}", after=row)  # fmt: skip


def _customer(country: str) -> Change:
    return _change("CUSTOMER", 1, {"id": "1", "name": "Big Customer", "country": country})


def _count(settings: Settings, table: str) -> int:
    with psycopg.connect(settings.vendor.dsn()) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
        if not found or found[0] is None:
            return 0
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0


def _wait(settings: Settings, table: str, want: int, timeout_s: float = 300.0) -> float:
    started = time.monotonic()
    while _count(settings, table) != want:
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"bench.entities: {table} did not reach {want} rows in {timeout_s:.0f} s")
        time.sleep(0.01)
    return time.monotonic() - started


def fanout(orders: int, rounds: int) -> list[list[str]]:
    token = uuid.uuid4().hex[:8]
    settings = Settings().model_copy(update={"topic_prefix": f"be{token}", "state_dir": None})
    target = f"bench_entities_{token}.east"
    registry = parse_registry(REGISTRY.format(target=target), "bench-entities.yaml")
    prefix = settings.topic_prefix
    customers, orders_topic, items_topic = (f"{prefix}.customer", f"{prefix}.orders", f"{prefix}.item")
    job = EntityJob(settings, registry)
    job.open()  # the topics and schemas
    job.close(save=False)
    client = registry_client(settings)
    for topic in (customers, orders_topic, items_topic):  # as `mcq schemas apply` registers them
        register_topic(client, topic)
    produce(settings, customers, [_customer("USA")])
    produce(settings, orders_topic, [
        _change("ORDERS", o, {"id": str(o), "customer_id": "1", "orderregion": "WESTERN", "ordertype": "RUSH",
                              "total": "10"})
        for o in range(orders)
    ])  # fmt: skip
    produce(settings, items_topic, [
        _change("ITEM", i, {"id": str(i), "order_id": str(i // 2), "sku": f"sku{i % 7}", "qty": "1"})
        for i in range(2 * orders)
    ])  # fmt: skip
    job = EntityJob(settings, registry)
    runtime = ListenerRuntime(settings, "East", registry=registry, http_port=None)
    threads = [threading.Thread(target=job.run, daemon=True), threading.Thread(target=runtime.run, daemon=True)]
    for t in threads:
        t.start()
    rows = []
    try:
        load = _wait(settings, target, orders)
        print(f"bench.entities: {orders} orders in East after the initial load ({load:.1f} s)", flush=True)
        country = "USA"
        for r in range(rounds):
            country = "UK" if country == "USA" else "USA"
            produce(settings, customers, [_customer(country)])
            took = _wait(settings, target, orders if country == "USA" else 0)
            what = "enter" if country == "USA" else "leave"
            print(f"bench.entities: round {r + 1}: {orders} orders {what} East in {took:.2f} s", flush=True)
            rows.append([str(r + 1), f"{orders:,} orders {what} East (country -> {country})", f"{took:.2f}"])
    finally:
        job.stop()
        runtime.stop()
        for t in threads:
            t.join(60)
        with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS bench_entities_{token} CASCADE")
    return rows


def memory(entities: int) -> list[list[str]]:
    registry = parse_registry(REGISTRY.format(target="x.east"), "bench-entities.yaml")
    table = registry.table("ORDER_VIEW", None)
    assert table is not None
    gc.collect()
    tracemalloc.start()
    index = EntityIndex(registry, table)
    at = 0
    for c in range(10_000):
        at += 1
        customer: Row = {"id": str(c), "name": f"c{c}", "country": "USA"}
        index.put("CUSTOMER", ChangeKey("CUSTOMER", pkey_number=c), customer, Position(at, at))
    for o in range(entities):
        at += 1
        row: Row = {"id": str(o), "customer_id": str(o % 10_000), "orderregion": "EASTERN", "ordertype": "RUSH",
               "total": str(o % 997)}  # fmt: skip
        index.put("ORDERS", ChangeKey("ORDERS", pkey_number=o), row, Position(at, at))
        for i in (2 * o, 2 * o + 1):
            at += 1
            item: Row = {"id": str(i), "order_id": str(o), "sku": f"sku{i % 50}", "qty": "1"}
            index.put("ITEM", ChangeKey("ITEM", pkey_number=i), item, Position(at, at))
    index.dirty.clear()
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    started = time.monotonic()
    for text in index.roots():
        found = index.document(text)
        assert found is not None
        index.flat(found[0])
    assembled = time.monotonic() - started
    rows = index.size()
    per = used / entities * 100_000
    print(f"bench.entities: {entities:,} entities ({rows:,} member rows): {used / 2**20:.0f} MiB; "
          f"assembled all in {assembled:.1f} s", flush=True)  # fmt: skip
    return [[f"{entities:,}", f"{rows:,}", f"{used / 2**20:.0f}", f"{per / 2**20:.0f}",
             f"{entities / assembled:,.0f}"]]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--entities", type=int, default=100_000)
    args = parser.parse_args()
    mem = memory(args.entities)
    rows = fanout(args.orders, args.rounds)
    print_table(
        "Entity fan-out: one customer's country changes; its orders enter or leave East",
        ["round", "change", "until the target reflects all of it (s)"],
        ["| " + " | ".join(r) + " |" for r in rows],
    )
    print_table(
        "Entity store: memory and assembly",
        ["entities", "member rows", "index (MiB)", "MiB per 100,000 entities", "entities assembled per s"],
        ["| " + " | ".join(r) + " |" for r in mem],
    )


if __name__ == "__main__":
    main()
