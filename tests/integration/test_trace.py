"""``mcq trace``: one key's history after the fact, from the append-only history topic.

A user's table captured by Debezium and normalised by the Spark job (whose follower
records each change's capture), three listeners: one applies, one is offline throughout,
and one's target refuses one of the changes (a trigger), so that change is retried,
parked and dead-lettered, and the key's later changes wait behind it. The key is changed
five times; the trace must show, change by change in source order, the capture (commit
time, transaction, raw and logical positions) and each listener's steps with the target's
answer, and say which listener has done nothing yet. The expectations come from the
source (the transactions' ids read with SQL) and the test's own script of refusals."""

from __future__ import annotations

import html
import json
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from pydantic import SecretStr
from starlette.testclient import TestClient

from consumers.runtime.listener import ListenerRuntime
from consumers.runtime.status import waiting_records
from mcq.capture.apply import apply_capture
from mcq.capture.connector import raw_topic
from mcq.change import ChangeKey
from mcq.cli import main as cli
from mcq.config import ConsoleSettings, ConsoleUser, Settings
from mcq.console.app import create_app
from mcq.console.auth import hash_password
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.worlds import uncapture, wait_raw_records, wait_slot_active
from mcq.topics.listener import ListenerTopics
from streams.runner import run_normalize
from tests.integration.pipeline import SOURCE

REGISTRY = (
    SOURCE
    + """listeners:
  - name: Applies
    owner: trace@example
    adapter: {{type: table, settings: {{table: {schema}.applies}}}}
  - name: Offline
    owner: trace@example
    adapter: {{type: table, settings: {{table: {schema}.offline}}}}
  - name: Picky
    owner: trace@example
    adapter: {{type: table, settings: {{table: {schema}.picky}}}}
    delivery: {{retries_in_place: 0, park_initial_s: 1, max_attempts: 2}}
interests:
  - {{listener: Applies, tname: ACCOUNT, rule: "status = 'active'"}}
  - {{listener: Offline, tname: ACCOUNT}}
  - {{listener: Picky, tname: ACCOUNT}}
"""
)
CHANGES = [
    "UPDATE {t} SET owner = 'second' WHERE id = 7",
    "UPDATE {t} SET status = 'closed' WHERE id = 7",  # leaves Applies' view
    "UPDATE {t} SET owner = 'refused' WHERE id = 7",  # Picky's target refuses it
    "UPDATE {t} SET status = 'active', owner = 'fifth' WHERE id = 7",
    "DELETE FROM {t} WHERE id = 7",
]


def _trace(s: Settings, registry_file: Path, *args: str) -> str:
    env = {"MCQ_TOPIC_PREFIX": s.topic_prefix}
    result = CliRunner().invoke(
        cli, ["trace", "ACCOUNT", "pkey_number=7", "--registry", str(registry_file), *args], env=env
    )
    assert result.exit_code == 0, result.output
    return result.output


PICKY_TABLE = """CREATE TABLE {t} (
    change_key text PRIMARY KEY, tname text NOT NULL, subtype text,
    person_id bigint, pkey_string text, pkey_number bigint, aux_string text, state jsonb,
    last_commit_lsn bigint NOT NULL, lsn bigint NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"""


def _refusing_target(s: Settings, schema: str) -> None:
    """Picky's table, made before its listener (which then finds it as it would make it),
    with a trigger that refuses the owner 'refused' as a directory refuses a value."""
    with psycopg.connect(s.vendor.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(PICKY_TABLE.format(t=f"{schema}.picky"))
        conn.execute(
            f"CREATE FUNCTION {schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.state->>'owner' = 'refused' THEN RAISE EXCEPTION 'owner refused by policy'; END IF; "
            "RETURN NEW; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON {schema}.picky "
            f"FOR EACH ROW EXECUTE FUNCTION {schema}.refuse()"
        )


@pytest.mark.timeout(900)
def test_a_keys_five_changes_are_traced_through_capture_and_every_listener_in_order(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex[:8]
    schema, src, slot = f"tr_{token}", f"r{token}", f"mcq_r{token}"
    s = settings.model_copy(update={"topic_prefix": f"tr{token}"})
    text = REGISTRY.format(src=src, schema=schema, slot=slot)
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(text)
    registry = parse_registry(text, str(registry_file))
    table = f"{schema}.accounts"
    with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, owner text, status text, quota int)")
        conn.execute(f"INSERT INTO {table} VALUES (7, 'first', 'active', 1), (8, 'other', 'active', 2)")
    _refusing_target(s, schema)
    try:
        apply_capture(registry, s)
        wait_slot_active(s, slot)
        raw = raw_topic(registry.sources[0], table)
        wait_raw_records(s, raw, 2)  # the snapshot
        txids = []
        with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
            for sql in CHANGES:
                with conn.transaction():
                    conn.execute(sql.format(t=table))
                    row = conn.execute("SELECT txid_current()").fetchone()
                    assert row is not None
                    txids.append(int(row[0]))
        wait_raw_records(s, raw, 2 + len(CHANGES) + 1)  # and the delete's tombstone
        run_normalize(s, registry, once=True, checkpoint=tmp_path / "checkpoint")

        def run(name: str) -> None:
            runtime = ListenerRuntime(s, name, registry=registry, http_port=None)
            assert runtime.run(until_caught_up=True) == 0

        run("Applies")
        # Picky runs (a scheduled listener) until its target holds the source's last state
        # and nothing waits in its retry lane any more: the refused change's hold is 1 s
        kept = ChangeKey("ACCOUNT", pkey_number=8).text()
        deadline = time.monotonic() + 120
        while True:
            run("Picky")
            waiting, _ = waiting_records(s, ListenerTopics(s.topic_prefix, "Picky").waiting)
            if set(target_state(s, f"{schema}.picky")) == {kept} and waiting == 0:
                break
            assert time.monotonic() < deadline, (target_state(s, f"{schema}.picky"), waiting)
            time.sleep(1.5)
        # Offline never runs

        events = json.loads(_trace(s, registry_file, "--json"))
        [(key, got)] = events.items()
        assert key == "ACCOUNT[pkey_number=7]"
        changes: dict[str, list[dict[str, object]]] = {}
        for e in got:
            changes.setdefault(str(e["position"]), []).append(e)
        # the snapshot's read and the five changes, in source order, each captured once, first
        assert len(changes) == 1 + len(CHANGES), list(changes)
        positions = [tuple(int(x) for x in p.split("/")) for p in changes]
        assert positions == sorted(positions)
        for steps in changes.values():
            captured = [e for e in steps if e["step"] == "captured"]
            assert len(captured) == 1 and steps[0] is captured[0], steps
            c = captured[0]
            assert str(c["raw"]).startswith(f"{raw}[0]@") and str(c["logical"]).startswith(f"{s.topic_prefix}.account[")
            assert c["commit_time"] and c.get("listener") is None
            ats = [float(str(e["at"])) for e in steps]
            assert ats == sorted(ats), steps
        ordered = list(changes.values())
        assert [steps[0].get("txid") for steps in ordered[1:]] == txids  # each change's own transaction
        assert [steps[0]["change_type"] for steps in ordered] == [
            "INSERT",
            "UPDATE",
            "UPDATE",
            "UPDATE",
            "UPDATE",
            "DELETE",
        ]

        def of(listener: str) -> list[list[str]]:
            return [[str(e["step"]) for e in steps if e.get("listener") == listener] for steps in ordered]

        # Applies: its rule keeps active rows; 'closed' takes the row out of its view, 'active' back in
        # (the delete's tombstone follows it: a delete of what the target no longer holds, filtered)
        tombstone = ["applied", "filtered"]
        assert of("Applies") == [["applied"], ["applied"], ["applied"], ["filtered"], ["applied"], tombstone]
        assert [e.get("cause") for e in ordered[5] if e.get("listener") == "Applies"] == ["source", "tombstone"]
        assert [e.get("cause") for e in ordered[3] if e.get("listener") == "Applies"] == ["source"]
        # Picky: the refused change is parked with the target's answer, then dead-lettered or superseded
        picky = of("Picky")
        assert picky[:3] == [["applied"], ["applied"], ["applied"]], picky
        assert picky[3][0] == "parked" and picky[3][-1] in ("dead-lettered", "superseded"), picky
        refused = next(e for e in ordered[3] if e.get("listener") == "Picky" and e["step"] == "parked")
        assert "owner refused by policy" in str(refused["answer"]), refused
        assert picky[5][-2:] == tombstone, picky  # the delete reached the target
        assert all(p and p[-1] in ("applied", "superseded", "dead-lettered") for p in picky[:5]), picky
        assert of("Offline") == [[]] * 6

        shown = _trace(s, registry_file)
        assert shown.count("listener Offline: nothing yet") == 6, shown
        assert shown.count("normaliser captured") == 6, shown
        assert shown.index("owner refused by policy") > shown.index(f"(transaction {txids[2]})"), shown

        # the console's trace page (the deployment's registry: the store's): the same history,
        # to a read-only user, the read audited
        applied = CliRunner().invoke(
            cli, ["registry", "apply", str(registry_file)], env={"MCQ_TOPIC_PREFIX": s.topic_prefix}
        )
        assert applied.exit_code == 0, applied.output
        users = {"rob": ConsoleUser(password_hash=SecretStr(hash_password("a long passphrase")), role="read")}
        console = ConsoleSettings(users=users, audit_log=tmp_path / "audit.log")
        client = TestClient(create_app(s.model_copy(update={"console": console})), follow_redirects=False)
        login = client.post("/login", data={"username": "rob", "password": "a long passphrase", "next": "/trace"})
        assert login.status_code == 303, login.text
        page = client.get("/trace", params={"tname": "ACCOUNT", "key": "pkey_number=7"})
        assert page.status_code == 200, page.text
        parked = [line for line in html.unescape(page.text).splitlines() if "listener Picky parked: " in line]
        assert len(parked) == 1 and "owner refused by policy" in parked[0], page.text
        assert page.text.count("normaliser captured") == 6
        assert "read history" in (tmp_path / "audit.log").read_text()
        assert client.get("/trace", params={"tname": "ACCOUNT", "key": "nonsense"}).status_code == 400
    finally:
        uncapture(s, registry, schema)
