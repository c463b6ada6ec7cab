"""Each adapter against its real target: insert, update, delete and a repeated delivery,
read back from the target itself (SQL, the HTTP requests a real server received, files).
Change records are produced into logical topics; listeners run in-process."""

from __future__ import annotations

import json
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from consumers.adapter import make_adapter
from consumers.runtime.dlq import DeadLetters
from mcq.change import POSITION_HEADER, Change, ChangeCodec
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.stack import Stack
from mcq.testing.listeners import World, caught_up, mcq, registry_world, running, wait_for
from tests.support.changes import ch, entity_records, listener, send_changes

REGISTRY = """
sources:
  - {{name: campus, schemas: [campus]}}
tables:
  - tname: PERSON
    subtype: PEOPLE
    feeds: [{{source: campus, table: campus.people, keys: {{person_id: person_id}},
             columns: [person_id, first_name, last_name]}}]
  - tname: PERSON
    subtype: Status
    feeds: [{{source: campus, table: campus.person_status, keys: {{person_id: person_id}},
             columns: [person_id, status]}}]
  - tname: PERSON
    subtype: Dir_Orgn
    feeds: [{{source: campus, table: campus.directory_orgn, keys: {{person_id: person_id, pkey_number: dept_id}},
             columns: [person_id, dept_id, title]}}]
  - tname: DEPARTMENT
    feeds: [{{source: campus, table: campus.departments, keys: {{pkey_number: dept_id}}, columns: [dept_id, name]}}]
  - tname: INSITE_PERSON
    entity:
      root: PERSON/PEOPLE
      joins:
        - {{name: status, table: PERSON/Status, kind: one-to-one, match: {{person_id: person_id}}}}
        - {{name: orgns, table: PERSON/Dir_Orgn, kind: one-to-many, match: {{person_id: person_id}}}}
        - {{name: dept, table: DEPARTMENT, kind: many-to-one, match: {{pkey_number: dept_id}}, via: orgns}}
listeners:
  - name: Insite
    owner: space@example
    adapter:
      type: sql_import
      settings:
        vendor_schema: {vendor}
        table: simon_person_import
        install: examples/insite_import.sql
        read_back: examples/insite_read_back.sql
        statement_timeout_ms: 3000
        rows:
          INSITE_PERSON:
            columns:
              spriden_id: person_id
              lastname: last_name
              firstname: first_name
              status: "left(status.status, 24)"
              orgn: {{each: orgns, value: dept.name, order_by: dept_id, first: true}}
              title: {{each: orgns, value: title, order_by: dept_id, first: true}}
            on_delete: {{status: "NULL"}}
            key_column: spriden_id
    delivery: {{retries_in_place: 1, backoff_initial_s: 0.05, park_initial_s: 0.3, max_attempts: 2}}
  - name: Hook
    owner: tickets@example
    adapter: {{type: webhook, settings: {{url: "{url}", timeout_s: 2}}}}
    delivery: {{retries_in_place: 1, backoff_initial_s: 0.05, park_initial_s: 0.3, max_attempts: 2}}
  - name: Files
    owner: cards@example
    adapter: {{type: file, settings: {{directory: "{out}/jsonl"}}}}
  - name: Xml
    owner: plant@example
    adapter: {{type: file, settings: {{directory: "{out}/xml", format: xml}}}}
interests:
  - {{listener: Insite, tname: INSITE_PERSON}}
  - {{listener: Hook, tname: PERSON, subtype: PEOPLE}}
  - {{listener: Files, tname: PERSON, subtype: PEOPLE}}
  - {{listener: Xml, tname: PERSON, subtype: PEOPLE}}
"""


class Receiver:
    """A real HTTP server that records what it receives and answers as told."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answer: dict[str, int] = {}  # last_name -> status code to answer with
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                code = outer.answer.get((body.get("after") or {}).get("last_name", ""), 200)
                outer.requests.append({"key": self.headers["Idempotency-Key"], "body": body, "code": code})
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"refused: no such cost centre" if code == 422 else b"ok")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/mcq"

    def accepted(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["code"] == 200]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture
def world(stack: Stack, settings: Settings, token: str, tmp_path: Path, receiver: Receiver) -> Iterator[World]:
    prefix = f"ta{token}"
    s = settings.model_copy(update={"topic_prefix": prefix})
    vendor = f"v_{token}"
    text = REGISTRY.format(vendor=vendor, url=receiver.url, out=tmp_path)
    yield registry_world(s, text, tmp_path / "registry.yaml", "Insite", f"{vendor}.sa_person")
    with psycopg.connect(settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {vendor} CASCADE")


def sa_person(w: World) -> dict[str, tuple[Any, ...]]:
    with psycopg.connect(w.settings.vendor.dsn()) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (w.table,)).fetchone()
        if found is None or found[0] is None:
            return {}  # not installed yet
        rows = conn.execute(
            f"SELECT person_number, person_last_name, person_first_name, person_location, person_text1, person_memo "
            f"FROM {w.table}"
        ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


ADA = {"person_id": "1", "first_name": "Ada", "last_name": "Lovelace"}
ALAN = {"person_id": "2", "first_name": "Alan", "last_name": "Turing"}


def test_import_table_trigger_applies_inserts_updates_and_deletes_idempotently(world: World) -> None:
    sent: list[Change] = []

    def send(w: World, *changes: Change) -> None:
        sent.extend(changes)
        send_changes(w, *changes)

    send(
        world,
        ch("DEPARTMENT", "INSERT", {"dept_id": "7", "name": "Mathematics"}, pkey_number=7),
        ch("PERSON/PEOPLE", "INSERT", ADA, person_id=1),
        ch("PERSON/Status", "INSERT", {"person_id": "1", "status": "Faculty"}, person_id=1),
        ch(
            "PERSON/Dir_Orgn",
            "INSERT",
            {"person_id": "1", "dept_id": "7", "title": "Professor"},
            person_id=1,
            pkey_number=7,
        ),
        ch("PERSON/PEOPLE", "INSERT", ALAN, person_id=2),
    )
    insite = listener(world, "Insite")
    with running(insite) as rt:
        wait_for(
            "both people",
            lambda: (
                sa_person(world).get("1") == ("Lovelace", "Ada", "Faculty", "Mathematics", "Professor")
                and "2" in sa_person(world)
            ),
        )
        assert sa_person(world)["2"] == ("Turing", "Alan", "No Status", None, None)
        # update: a department rename reaches every person in it; a status change
        send(world, ch("DEPARTMENT", "UPDATE", {"dept_id": "7", "name": "Applied Mathematics"}, pkey_number=7),
             ch("PERSON/Status", "UPDATE", {"person_id": "2", "status": "Staff"}, person_id=2))  # fmt: skip
        wait_for("the updates", lambda: sa_person(world)["1"][3] == "Applied Mathematics"
                 and sa_person(world)["2"][2] == "Staff")  # fmt: skip
        # delete: a person without a status becomes Former-<status>
        send(world, ch("PERSON/Status", "DELETE", None, {"person_id": "2", "status": "Staff"}, person_id=2))
        wait_for("Former-Staff", lambda: sa_person(world)["2"][2] == "Former-Staff")
        send(world, ch("PERSON/PEOPLE", "DELETE", None, ALAN, person_id=2))
        # the entity's records: Ada and Alan, both updated, Alan's status gone, Alan gone
        wait_for("the delete", lambda: rt.counters.applied == 6)
        assert sa_person(world)["2"][2] == "Former-Staff"  # not Former-Former-Staff
    # a repeated delivery of every record, straight through the adapter, leaves the vendor table as it was
    before = sa_person(world)
    records = entity_records(world, "INSITE_PERSON")
    assert len(records) == 6
    adapter = make_adapter(world.registry.listener("Insite"), world.settings)  # type: ignore[arg-type]
    adapter.bind(world.registry)
    adapter.open()
    try:
        assert adapter.apply_batch(records) == [None] * len(records)
    finally:
        adapter.close()
    assert sa_person(world) == before


# a scenario of a minute and more on two cores: in make long, so make test stays under 25 minutes
@pytest.mark.long
def test_drift_in_the_vendor_table_is_reported_exactly_and_repaired(world: World) -> None:
    """``mcq reconcile`` on an import-table target: what the vendor holds (read back with
    the listener's query) against each person's record; a person the vendor keeps as
    Former- for someone gone is no drift; ``--repair`` pushes the drifted people again and
    marks a stray one as gone (the vendor has no delete)."""

    insite = listener(world, "Insite")
    for pid in range(1, 6):
        send_changes(world, ch("PERSON/PEOPLE", "INSERT", {"person_id": str(pid), "first_name": f"F{pid}",
                                                          "last_name": f"L{pid}"}, person_id=pid))  # fmt: skip
        if pid < 5:
            status = {"person_id": str(pid), "status": "Staff"}
            send_changes(world, ch("PERSON/Status", "INSERT", status, person_id=pid))
    caught_up(insite)
    send_changes(world, ch("PERSON/PEOPLE", "DELETE", None, {"person_id": "4", "first_name": "F4", "last_name": "L4"},
                           person_id=4))  # fmt: skip
    caught_up(insite)
    assert sa_person(world)["4"][2] == "Former-Staff" and sa_person(world)["5"][2] == "No Status"
    clean = mcq(insite, "reconcile")
    assert clean.exit_code == 0 and "4 object(s) expected, 5 at the target: 0 missing, 0 extra, 0 different" in (
        clean.output
    ), clean.output

    with psycopg.connect(world.settings.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {world.table} WHERE person_number = '2'")
        conn.execute(f"UPDATE {world.table} SET person_last_name = 'Wrong' WHERE person_number = '3'")
        conn.execute(
            f"INSERT INTO {world.table} (person_number, person_last_name, person_first_name, person_location)"
            " VALUES ('99', 'Stray', 'S', 'Staff')"
        )
    found = mcq(insite, "reconcile")
    assert found.exit_code == 1, found.output
    assert "1 missing, 1 extra, 1 different" in found.output
    assert "missing: INSITE_PERSON 2" in found.output and "extra: INSITE_PERSON 99" in found.output
    assert "different: INSITE_PERSON 3: lastname: expected 'L3', found 'Wrong'" in found.output

    repaired = mcq(insite, "reconcile", "--repair")
    assert repaired.exit_code == 0, repaired.output
    caught_up(insite)
    held = sa_person(world)
    assert held["2"][:3] == ("L2", "F2", "Staff") and held["3"][0] == "L3" and held["99"][2] == "Former-Staff"
    again = mcq(insite, "reconcile")
    assert again.exit_code == 0 and "0 missing, 0 extra, 0 different" in again.output, again.output


def test_a_person_whose_delete_survived_compaction_only_as_a_tombstone_becomes_former(world: World) -> None:
    """A daily listener that catches up after compaction sees no DELETE record, only the
    tombstones: the vendor still learns that the person is gone."""
    send_changes(
        world,
        ch("PERSON/PEOPLE", "INSERT", ADA, person_id=1),
        ch("PERSON/Status", "INSERT", {"person_id": "1", "status": "Faculty"}, person_id=1),
    )
    insite = listener(world, "Insite")
    with running(insite):
        wait_for("Ada", lambda: sa_person(world).get("1", ())[2:3] == ("Faculty",))
    # what a compacted entity topic keeps of a person who is gone: the tombstone alone
    gone = ch("INSITE_PERSON", "DELETE", None, None, person_id=1)
    table = world.registry.table("INSITE_PERSON", None)
    assert table is not None
    topic = table.topic(world.settings.topic_prefix)
    key, _ = ChangeCodec(registry_client(world.settings)).encode(topic, gone)
    producer = Producer(world.settings.kafka.client_config())
    producer.produce(topic, key=key, value=None, headers={POSITION_HEADER: str(gone.position)})
    assert producer.flush(30) == 0
    with running(insite) as rt:  # a new run: nothing of Ada in memory but what the topics keep
        wait_for("Former-Faculty", lambda: sa_person(world)["1"][2] == "Former-Faculty", 60)
        assert rt.counters.dead_lettered == 0
    assert sa_person(world)["1"][:2] == ("Lovelace", "Ada")


def test_a_trigger_rejection_is_dead_lettered_with_the_database_message_and_the_rest_flows(world: World) -> None:
    nameless = {"person_id": "3", "first_name": "Nobody", "last_name": ""}
    send_changes(
        world, ch("PERSON/PEOPLE", "INSERT", nameless, person_id=3), ch("PERSON/PEOPLE", "INSERT", ADA, person_id=1)
    )
    insite = listener(world, "Insite")
    with running(insite) as rt:
        wait_for("the dead letter", lambda: rt.counters.dead_lettered == 1, 60)
        wait_for("the others", lambda: "1" in sa_person(world), 30)
    [dead] = DeadLetters(world.settings, "Insite").entries()
    assert "INSITE: person 3 has no last name" in dead.error
    assert "3" not in sa_person(world)


def test_webhook_posts_with_an_idempotency_key_retries_5xx_and_dead_letters_4xx(
    world: World, receiver: Receiver
) -> None:
    receiver.answer = {"Flaky": 503, "Refused": 422}
    changes = [
        ch("PERSON/PEOPLE", "INSERT", ADA, person_id=1),
        ch("PERSON/PEOPLE", "UPDATE", {**ADA, "first_name": "Augusta"}, ADA, person_id=1),
        ch("PERSON/PEOPLE", "INSERT", {**ALAN, "last_name": "Refused"}, person_id=2),
        ch("PERSON/PEOPLE", "INSERT", {**ALAN, "person_id": "4", "last_name": "Flaky"}, person_id=4),
        ch("PERSON/PEOPLE", "DELETE", None, ADA, person_id=1),
    ]
    send_changes(world, *changes)
    hook = listener(world, "Hook")
    with running(hook) as rt:
        wait_for("two dead letters", lambda: rt.counters.dead_lettered == 2, 60)
        wait_for("the rest", lambda: len(receiver.accepted()) == 3, 30)
    accepted = receiver.accepted()
    assert [b["change_type"] for b in accepted] == ["INSERT", "UPDATE", "DELETE"]
    assert accepted[1]["after"]["first_name"] == "Augusta"
    assert {r["key"] for r in receiver.requests if r["code"] == 200} == {
        changes[0].idempotency_key,
        changes[1].idempotency_key,
        changes[4].idempotency_key,
    }
    flaky = [r for r in receiver.requests if r["code"] == 503]
    assert len(flaky) == 4  # 2 rounds x (1 try + 1 retry in place), then dead
    refused = [r for r in receiver.requests if r["code"] == 422]
    assert len(refused) == 1  # a 4xx is not retried
    errors = {e.attempts: e.error for e in DeadLetters(world.settings, "Hook").entries()}
    assert "HTTP 422" in errors[1] and "no such cost centre" in errors[1]
    assert "HTTP 503" in errors[2]
    # a repeated delivery is not posted again: the listener knows it applied it
    send_changes(world, changes[1])
    with running(hook) as rt:
        wait_for("the repeat", lambda: rt.counters.skipped == 1, 60)
    assert len(receiver.requests) == 8


def test_file_listeners_write_whole_jsonl_and_xml_files(world: World, tmp_path: Path) -> None:
    changes = [
        ch("PERSON/PEOPLE", "INSERT", ADA, person_id=1),
        ch("PERSON/PEOPLE", "UPDATE", {**ADA, "last_name": "King"}, ADA, person_id=1),
        ch("PERSON/PEOPLE", "DELETE", None, {**ADA, "last_name": "King"}, person_id=1),
    ]
    send_changes(world, *changes)
    for name in ("Files", "Xml"):
        with running(listener(world, name)) as rt:
            wait_for(f"{name} to apply", lambda rt=rt: rt.counters.applied == 3, 60)  # type: ignore[misc]
    lines = [json.loads(x) for f in sorted((tmp_path / "jsonl").glob("*.jsonl")) for x in f.read_text().splitlines()]
    assert [x["change_type"] for x in lines] == ["INSERT", "UPDATE", "DELETE"]
    assert lines[1]["after"]["last_name"] == "King" and lines[2]["after"] is None
    assert [x["idempotency_key"] for x in lines] == [c.idempotency_key for c in changes]
    docs = [ET.parse(f).getroot() for f in sorted((tmp_path / "xml").glob("*.xml"))]
    xml_changes = [c for d in docs for c in d.findall("change")]
    assert [c.get("type") for c in xml_changes] == ["INSERT", "UPDATE", "DELETE"]
    assert xml_changes[1].find("after/column[@name='last_name']").text == "King"  # type: ignore[union-attr]
    assert not list((tmp_path / "jsonl").glob(".*.tmp")) and not list((tmp_path / "xml").glob(".*.tmp"))
    # a repeated delivery is not written again (the listener knows it applied it)
    send_changes(world, changes[1])
    with running(listener(world, "Files")) as rt:
        wait_for("the repeat", lambda: rt.counters.skipped == 1, 60)
    again = [x for f in (tmp_path / "jsonl").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert len(again) == 3
