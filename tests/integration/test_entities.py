"""Entities end to end on the real stack, with a new user's own schema (not the campus):
orders with their customer and items, persons with a status, accounts with their owner
and e-mail addresses, created by the test with PostgreSQL's defaults and captured by
``apply_capture``. The normaliser (Spark) writes the logical topics; ``mcq entities run``
writes the entity topics; listeners with entity rules apply them: AQ's East, West and
Overseas shipping over the order's customer's country, "active only" over a person's
status row, a webhook that receives whole mailboxes (owner's name, every address) of
accounts whose owner is an employee, and a file listener offline for the first half.

A random workload moves related rows: customers change country (one with 200 orders),
statuses flip, addresses come and go, items move between orders, rows are deleted and
inserted. Every target is compared with what SQL joins over the source say, written
apart from the entity code; then a target emptied by hand is replayed, ``mcq reconcile``
finds it in sync, and ``mcq refresh`` by entity key repairs an entity lost and one changed."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from consumers.runtime.dlq import DeadLetters
from consumers.runtime.listener import ListenerRuntime
from mcq.capture.apply import apply_capture
from mcq.capture.connector import raw_topic
from mcq.change import ChangeCodec, ChangeKey
from mcq.cli import main
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.worlds import uncapture, wait_raw_records, wait_slot_active
from streams.entities.job import EntityJob
from streams.runner import run_normalize
from tests.integration.webhook_server import receiving_webhook, replay
from tests.unit.entity_registry import ACTIVE, EAST, OVERSEAS, SHOP, WEST

MAILBOX_TEMPLATE = (
    '{% if entity is none %}{"uname": {{ key.pkey_string | tojson }}, "deleted": true}{% else %}'
    '{"uname": {{ entity.uname | tojson }}, "owner": {{ entity.owner.name | tojson }}, '
    # an account without an address has no primary: the template fails for it, and it alone is dead-lettered
    "\"primary\": {{ (entity.addresses | map(attribute='address') | sort | list)[0] | tojson }}, "
    '"addresses": {{ entity.addresses | map(attribute=\'address\') | sort | list | tojson }}, "deleted": false}'
    "{% endif %}"
)
LISTENERS = """listeners:
  - {name: East, owner: e@example, adapter: {type: table, settings: {table: "@S.east"}}}
  - {name: West, owner: e@example, adapter: {type: table, settings: {table: "@S.west"}}}
  - {name: Overseas, owner: e@example, adapter: {type: table, settings: {table: "@S.overseas"}}}
  - {name: Active, owner: e@example, adapter: {type: table, settings: {table: "@S.active"}}}
  - name: Mail
    owner: e@example
    adapter:
      type: webhook
      settings:
        url: "@URL"
        timeout_s: 5
        template: |
          @TEMPLATE
  - {name: Files, owner: e@example, adapter: {type: file, settings: {format: jsonl, directory: "@FILES"}}}
interests:
  - {listener: East, tname: ORDER_VIEW, rule: "@EAST"}
  - {listener: West, tname: ORDER_VIEW, rule: "@WEST"}
  - {listener: Overseas, tname: ORDER_VIEW, rule: "@OVERSEAS"}
  - {listener: Active, tname: PERSON_VIEW, rule: "@ACTIVE"}
  - {listener: Mail, tname: MAILBOX, rule: "owner.kind = 'employee'"}
  - {listener: Files, tname: ORDER_VIEW, columns: [id, customer.country, items]}
"""
COUNTRIES = ("USA", "UK", "Canada", "Mexico")
REGIONS = ("EASTERN", "WESTERN", "INTERNATIONAL")
TYPES = ("RUSH", "NORMAL")
DDL = [
    "CREATE TABLE {s}.customers (id int PRIMARY KEY, name text, country text)",
    "CREATE TABLE {s}.orders (id int PRIMARY KEY, customer_id int, orderregion text, ordertype text, total int)",
    "CREATE TABLE {s}.items (id int PRIMARY KEY, order_id int, sku text, qty int)",
    "CREATE TABLE {s}.persons (id int PRIMARY KEY, name text, kind text)",
    "CREATE TABLE {s}.person_status (person_id int PRIMARY KEY, status text)",
    "CREATE TABLE {s}.accounts (uname text PRIMARY KEY, owner_id int, quota int)",
    "CREATE TABLE {s}.emails (address text PRIMARY KEY, uname text, kind text)",
]


class Workload:
    """Random changes of related rows, counting the raw records each table's capture writes
    (one per insert or update, two per delete: the record and its tombstone)."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str, rnd: random.Random) -> None:
        self.conn, self.s, self.rnd = conn, schema, rnd
        self.events: Counter[str] = Counter()
        self.next_id = 10_000

    def run(self, sql: str, args: tuple[Any, ...], table: str, per_row: int = 1) -> None:
        cur = self.conn.execute(sql.format(s=self.s), args)
        self.events[table] += per_row * max(cur.rowcount, 0)

    def ids(self, table: str, column: str = "id") -> list[Any]:
        return [r[0] for r in self.conn.execute(f"SELECT {column} FROM {self.s}.{table} ORDER BY 1").fetchall()]

    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def load(self) -> None:
        r = self.rnd
        for c in range(40):
            self.run("INSERT INTO {s}.customers VALUES (%s, %s, %s)", (c, f"cust{c}", r.choice(COUNTRIES)), "customers")
        for o in range(400):
            customer = 0 if o < 200 else r.randrange(40)  # customer 0 has 200 orders: the fan-out
            self.run("INSERT INTO {s}.orders VALUES (%s, %s, %s, %s, %s)",
                     (o, customer, r.choice(REGIONS), r.choice(TYPES), r.randrange(1000)), "orders")  # fmt: skip
        for i in range(600):
            self.run("INSERT INTO {s}.items VALUES (%s, %s, %s, %s)",
                     (i, r.randrange(400), f"sku{r.randrange(50)}", r.randrange(1, 9)), "items")  # fmt: skip
        for p in range(80):
            self.run("INSERT INTO {s}.persons VALUES (%s, %s, %s)",
                     (p, f"Person {p}", r.choice(("employee", "student"))), "persons")  # fmt: skip
            if r.random() < 0.8:
                self.run("INSERT INTO {s}.person_status VALUES (%s, %s)",
                         (p, r.choice(("active", "inactive"))), "person_status")  # fmt: skip
        for a in range(100):
            uname = f"u{a}"
            self.run("INSERT INTO {s}.accounts VALUES (%s, %s, %s)", (uname, r.randrange(80), 100), "accounts")
            for n in range(r.randrange(0, 3)):
                self.run("INSERT INTO {s}.emails VALUES (%s, %s, %s)",
                         (f"{uname}.{n}@example.org", uname, "main" if n == 0 else "alias"), "emails")  # fmt: skip

    def step(self) -> None:
        r = self.rnd
        roll = r.random()
        if roll < 0.12:  # a customer moves: its orders enter and leave East and Overseas
            self.run("UPDATE {s}.customers SET country = %s WHERE id = %s",
                     (r.choice(COUNTRIES), r.choice(self.ids("customers"))), "customers")  # fmt: skip
        elif roll < 0.22:
            self.run("UPDATE {s}.orders SET orderregion = %s, ordertype = %s WHERE id = %s",
                     (r.choice(REGIONS), r.choice(TYPES), r.choice(self.ids("orders"))), "orders")  # fmt: skip
        elif roll < 0.30:  # an item moves to another order
            self.run("UPDATE {s}.items SET order_id = %s WHERE id = %s",
                     (r.choice(self.ids("orders")), r.choice(self.ids("items"))), "items")  # fmt: skip
        elif roll < 0.36:
            self.run("INSERT INTO {s}.items VALUES (%s, %s, %s, %s)",
                     (self.fresh(), r.choice(self.ids("orders")), f"sku{r.randrange(50)}", 1), "items")  # fmt: skip
        elif roll < 0.41:
            self.run("DELETE FROM {s}.items WHERE id = %s", (r.choice(self.ids("items")),), "items", 2)
        elif roll < 0.45:
            self.run("INSERT INTO {s}.orders VALUES (%s, %s, %s, %s, %s)",
                     (self.fresh(), r.choice(self.ids("customers")), r.choice(REGIONS), r.choice(TYPES), 5),
                     "orders")  # fmt: skip
        elif roll < 0.48:
            self.run("DELETE FROM {s}.orders WHERE id = %s", (r.choice(self.ids("orders")),), "orders", 2)
        elif roll < 0.50:  # a customer goes: its orders keep pointing at it, and join nothing
            self.run("DELETE FROM {s}.customers WHERE id = %s", (r.choice(self.ids("customers")),), "customers", 2)
        elif roll < 0.62:  # a status flips
            self.run("UPDATE {s}.person_status SET status = %s WHERE person_id = %s",
                     (r.choice(("active", "inactive")), r.choice(self.ids("person_status", "person_id"))),
                     "person_status")  # fmt: skip
        elif roll < 0.66:
            pid = r.choice(self.ids("persons"))
            if pid in self.ids("person_status", "person_id"):
                self.run("DELETE FROM {s}.person_status WHERE person_id = %s", (pid,), "person_status", 2)
            else:
                self.run("INSERT INTO {s}.person_status VALUES (%s, 'active')", (pid,), "person_status")
        elif roll < 0.72:  # employee or not: mailboxes enter and leave the view
            self.run("UPDATE {s}.persons SET kind = %s, name = %s WHERE id = %s",
                     (r.choice(("employee", "student")), f"Renamed {r.randrange(99)}", r.choice(self.ids("persons"))),
                     "persons")  # fmt: skip
        elif roll < 0.82:  # an address added
            uname = r.choice(self.ids("accounts", "uname"))
            self.run("INSERT INTO {s}.emails VALUES (%s, %s, 'alias')",
                     (f"{uname}.{self.fresh()}@example.org", uname), "emails")  # fmt: skip
        elif roll < 0.90:  # an address removed
            addresses = self.ids("emails", "address")
            if addresses:
                self.run("DELETE FROM {s}.emails WHERE address = %s", (r.choice(addresses),), "emails", 2)
        elif roll < 0.95:  # an account changes owner
            self.run("UPDATE {s}.accounts SET owner_id = %s WHERE uname = %s",
                     (r.choice(self.ids("persons")), r.choice(self.ids("accounts", "uname"))), "accounts")  # fmt: skip
        elif roll < 0.97:
            self.run("DELETE FROM {s}.accounts WHERE uname = %s",
                     (r.choice(self.ids("accounts", "uname")),), "accounts", 2)  # fmt: skip
        else:
            self.run("INSERT INTO {s}.accounts VALUES (%s, %s, 1)",
                     (f"n{self.fresh()}", r.choice(self.ids("persons"))), "accounts")  # fmt: skip


# ---------------------------------------------------------------------- what SQL says


def _orders(conn: psycopg.Connection[Any], s: str) -> dict[str, dict[str, Any]]:
    """Every order as the ORDER_VIEW entity should show it, joined in SQL; items as a sorted list."""
    rows = conn.execute(f"""
        SELECT o.id, o.customer_id::text, o.orderregion, o.ordertype, o.total::text,
               c.id::text, c.name, c.country,
               (SELECT coalesce(json_agg(json_build_object('sku', i.sku, 'qty', i.qty::text)), '[]'::json)
                  FROM {s}.items i WHERE i.order_id = o.id)
          FROM {s}.orders o LEFT JOIN {s}.customers c ON c.id = o.customer_id""").fetchall()
    out = {}
    for oid, cust, region, otype, total, cid, cname, country, items in rows:
        row: dict[str, Any] = {"id": str(oid), "customer_id": cust, "orderregion": region, "ordertype": otype,
                               "total": total, "items": _sorted(items)}  # fmt: skip
        if cid is not None:
            row |= {"customer.id": cid, "customer.name": cname, "customer.country": country}
        out[ChangeKey("ORDER_VIEW", pkey_number=oid).text()] = row
    return out


def _where(conn: psycopg.Connection[Any], s: str, condition: str) -> set[str]:
    ids = conn.execute(
        f"SELECT o.id FROM {s}.orders o LEFT JOIN {s}.customers c ON c.id = o.customer_id WHERE {condition}"
    ).fetchall()
    return {ChangeKey("ORDER_VIEW", pkey_number=r[0]).text() for r in ids}


def _sorted(items: Any) -> list[Any]:
    return sorted(json.loads(items) if isinstance(items, str) else items, key=lambda x: json.dumps(x, sort_keys=True))


def _held(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A target's rows with their JSON arrays parsed and sorted (the order is not the point)."""
    return {k: {c: _sorted(v) if c == "items" else v for c, v in row.items()} for k, row in state.items()}


def _active_persons(conn: psycopg.Connection[Any], s: str) -> dict[str, dict[str, Any]]:
    rows = conn.execute(f"""
        SELECT p.id, p.name, p.kind, st.status FROM {s}.persons p
          JOIN {s}.person_status st ON st.person_id = p.id WHERE st.status = 'active'""").fetchall()
    return {
        ChangeKey("PERSON_VIEW", person_id=pid).text(): {
            "id": str(pid), "name": name, "kind": kind, "status.person_id": str(pid), "status.status": status,
        }
        for pid, name, kind, status in rows
    }  # fmt: skip


def _mailboxes(conn: psycopg.Connection[Any], s: str) -> dict[str, dict[str, Any]]:
    """Accounts whose owner is an employee, with the owner's name and every address."""
    rows = conn.execute(f"""
        SELECT a.uname, p.name,
               array(SELECT e.address FROM {s}.emails e WHERE e.uname = a.uname ORDER BY e.address COLLATE "C")
          FROM {s}.accounts a JOIN {s}.persons p ON p.id = a.owner_id WHERE p.kind = 'employee'""").fetchall()
    return {uname: {"uname": uname, "owner": name, "addresses": list(addresses)} for uname, name, addresses in rows}


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with receiving_webhook() as hook:
        yield hook


# a scenario of a minute and more on two cores: in make long, so make test stays under 25 minutes
@pytest.mark.long
def test_entity_listeners_mirror_sql_joins_over_the_source_as_related_rows_move(
    stack: Stack, settings: Settings, tmp_path: Path, webhook: tuple[str, list[dict[str, Any]]]
) -> None:
    url, bodies = webhook
    token = uuid.uuid4().hex[:8]
    schema, src, slot = f"ent_{token}", f"n{token}", f"mcq_n{token}"
    s = settings.model_copy(update={"topic_prefix": f"tn{token}", "state_dir": tmp_path / "state"})
    listeners = LISTENERS
    for name, value in {"@S": schema, "@URL": url, "@FILES": str(tmp_path / "files"), "@EAST": EAST, "@WEST": WEST,
                        "@OVERSEAS": OVERSEAS, "@ACTIVE": ACTIVE, "@TEMPLATE": MAILBOX_TEMPLATE}.items():  # fmt: skip
        listeners = listeners.replace(name, value)
    text = SHOP.format(src=src, schema=schema, slot=slot, listeners=listeners)
    registry_file = tmp_path / "shop.yaml"
    registry_file.write_text(text)
    registry = parse_registry(text, str(registry_file))
    rnd = random.Random(54)
    with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        for ddl in DDL:
            conn.execute(ddl.format(s=schema))
        work = Workload(conn, schema, rnd)
        work.load()
    checkpoint = tmp_path / "checkpoint"

    def normalise() -> None:
        for table, n in work.events.items():
            wait_raw_records(s, raw_topic(registry.sources[0], f"{schema}.{table}"), n)
        run_normalize(s, registry, once=True, checkpoint=checkpoint)
        job = EntityJob(s, registry)
        assert job.run(until_caught_up=True) == 0

    def listen(*names: str) -> dict[str, ListenerRuntime]:
        done = {}
        for name in names:
            done[name] = ListenerRuntime(s, name, registry=registry, http_port=None)
            assert done[name].run(until_caught_up=True) == 0
        return done

    try:
        apply_capture(registry, s)
        wait_slot_active(s, slot)
        with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
            work.conn = conn
            for _ in range(300):
                work.step()
        normalise()
        listen("East", "West", "Overseas", "Active", "Mail")  # Files is offline for now
        with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
            work.conn = conn
            # the big fan-out: customer 0's 200 orders move in and out of East and Overseas together
            work.run("UPDATE {s}.orders SET customer_id = 0, ordertype = 'RUSH' WHERE id < 200", (), "orders")
            for country in ("UK", "USA", "Canada", "USA"):
                work.run("UPDATE {s}.customers SET country = %s WHERE id = 0", (country,), "customers")
            for _ in range(600):
                work.step()
        normalise()  # a second entity job: restored from the first one's snapshot
        listen("East", "West", "Overseas", "Active", "Mail", "Files")

        with psycopg.connect(s.source.dsn()) as conn:
            orders = _orders(conn, schema)
            east = _where(conn, schema, "o.orderregion = 'EASTERN' OR (o.ordertype = 'RUSH' AND c.country = 'USA')")
            west = _where(conn, schema, "o.orderregion = 'WESTERN' AND o.ordertype != 'RUSH'")
            overseas = _where(conn, schema, "c.country != 'USA'")
            active = _active_persons(conn, schema)
            mailboxes = _mailboxes(conn, schema)
        assert east and west and overseas and active and mailboxes  # the workload reaches every view
        for name, keys in (("East", east), ("West", west), ("Overseas", overseas)):
            assert _held(target_state(s, f"{schema}.{name.lower()}")) == {k: orders[k] for k in keys}, name
        assert target_state(s, f"{schema}.active") == active

        # the offline file listener: every order, only the columns it may see
        lines = [
            json.loads(x) for f in sorted((tmp_path / "files").glob("*.jsonl")) for x in f.read_text().splitlines()
        ]
        files = replay(lines)
        want = {
            k: {c: v for c, v in row.items() if c in ("id", "customer.country", "items")} for k, row in orders.items()
        }
        assert _held(files) == want

        # the webhook: whole mailboxes; one without an address fails its template and is dead-lettered alone
        received: dict[str, dict[str, Any]] = {}
        for body in bodies:
            if body["deleted"]:
                received.pop(body["uname"], None)
            else:
                received[body["uname"]] = body
        with_address = {u: m for u, m in mailboxes.items() if m["addresses"]}
        assert {u: received.get(u) for u in with_address} == {
            u: {**m, "primary": m["addresses"][0], "deleted": False} for u, m in with_address.items()
        }
        assert set(received) <= set(mailboxes)  # none outside the view
        dead = DeadLetters(s, "Mail").entries()
        assert all("payload template" in d.error for d in dead), [d.error for d in dead]
        codec = ChangeCodec(registry_client(s))
        dead_keys = {codec.decode_key("dlq", d.partition, d.offset, d.key).pkey_string for d in dead}
        without = {u for u, m in mailboxes.items() if not m["addresses"]}
        assert without and without <= dead_keys  # the workload leaves some mailboxes without an address

        env = {"MCQ_TOPIC_PREFIX": s.topic_prefix, "MCQ_HOME": str(s.stack.home)}
        cli = CliRunner()
        # the preview: what Mail's webhook would be given for one mailbox
        uname = next(iter(with_address))
        shown = cli.invoke(main, ["map", "preview", "Mail", f"pkey_string={uname}", "--registry", str(registry_file)],
                           env=env)  # fmt: skip
        assert shown.exit_code == 0, shown.output
        assert f'"primary": "{with_address[uname]["addresses"][0]}"' in shown.output
        out_of_east = next(iter(set(orders) - east))
        pk = ChangeKey.from_text(out_of_east).pkey_number
        shown = cli.invoke(main, ["map", "preview", "East", f"pkey_number={pk}", "--registry", str(registry_file)],
                           env=env)  # fmt: skip
        assert shown.exit_code == 1 and "is not in East's view" in shown.output, shown.output

        # a target restored from an empty backup: replayed by entity key, and reconcile finds it in sync
        with psycopg.connect(s.vendor.dsn(), autocommit=True) as conn:
            conn.execute(f"DELETE FROM {schema}.east")
        replayed = cli.invoke(main, ["replay", "East", "--from", "earliest", "--registry", str(registry_file)], env=env)
        assert replayed.exit_code == 0, replayed.output
        listen("East")
        assert _held(target_state(s, f"{schema}.east")) == {k: orders[k] for k in east}
        clean = cli.invoke(main, ["reconcile", "East", "--registry", str(registry_file)], env=env)
        assert clean.exit_code == 0 and "0 missing, 0 extra, 0 different" in clean.output, clean.output
        # one entity lost and one changed by hand: a refresh by entity key (a rule over its fields) repairs both
        lost, changed = sorted(east)[:2]
        with psycopg.connect(s.vendor.dsn(), autocommit=True) as conn:
            conn.execute(f"DELETE FROM {schema}.east WHERE change_key = %s", (lost,))
            conn.execute(f"UPDATE {schema}.east SET state = '{{}}' WHERE change_key = %s", (changed,))
        keys = " OR ".join(f"pkey_number = {ChangeKey.from_text(k).pkey_number}" for k in (lost, changed))
        refreshed = cli.invoke(
            main,
            ["refresh", "East", "--tname", "ORDER_VIEW", "--where", keys, "--registry", str(registry_file)],
            env=env,
        )
        assert refreshed.exit_code == 0, refreshed.output
        assert listen("East")["East"].counters.bulk_applied == 2
        assert _held(target_state(s, f"{schema}.east")) == {k: orders[k] for k in east}
    finally:
        uncapture(s, registry, schema)
