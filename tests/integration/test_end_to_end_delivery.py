"""A new user's table, end to end on the real stack: created by the test with PostgreSQL's
defaults, captured only through ``apply_capture`` (``mcq connect apply``), normalised by
the Spark job, and applied by three listeners — a ``table`` target whose interest has a
content rule on an ordinary column, a ``webhook`` with a column allow-list, and ``file``.
A random workload moves rows in and out of the rule, deletes and inserts; Figure 5's
refresh (``mcq_log_update``) names live and deleted keys. Every target is compared with
the source's last state read with SQL, not with anything the code under test computes."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from consumers.runtime.listener import ListenerRuntime
from mcq.capture.apply import apply_capture
from mcq.capture.connector import OUTBOX_TABLE, raw_topic
from mcq.change import ChangeKey
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.worlds import uncapture, wait_raw_records, wait_slot_active
from streams.runner import run_normalize
from tests.integration.pipeline import SOURCE, STATUSES
from tests.integration.webhook_server import receiving_webhook, replay

REGISTRY = (
    SOURCE
    + """listeners:
  - name: Active
    owner: e2e@example
    adapter: {{type: table, settings: {{table: {target}}}}}
  - name: Hook
    owner: e2e@example
    adapter: {{type: webhook, settings: {{url: "{url}", timeout_s: 5}}}}
  - name: Files
    owner: e2e@example
    adapter: {{type: file, settings: {{format: jsonl, directory: "{files}"}}}}
interests:
  - {{listener: Active, tname: ACCOUNT, rule: "status = 'active'"}}
  - {{listener: Hook, tname: ACCOUNT, columns: [id, status]}}
  - {{listener: Files, tname: ACCOUNT}}
"""
)


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with receiving_webhook() as hook:
        yield hook


def _source_rows(settings: Settings, schema: str) -> dict[str, dict[str, str | None]]:
    """The source's last state, keyed like the listeners key it, values as text."""
    with psycopg.connect(settings.source.dsn()) as conn:
        rows = conn.execute(
            f"SELECT id::text, owner, status, quota::text FROM {schema}.accounts ORDER BY id"
        ).fetchall()
    return {
        ChangeKey("ACCOUNT", pkey_number=int(r[0])).text(): {"id": r[0], "owner": r[1], "status": r[2], "quota": r[3]}
        for r in rows
    }


@pytest.mark.timeout(900)
def test_a_new_users_table_reaches_every_listener_as_its_view_of_the_sources_last_state(
    stack: Stack, settings: Settings, tmp_path: Path, webhook: tuple[str, list[dict[str, Any]]]
) -> None:
    url, bodies = webhook
    token = uuid.uuid4().hex[:8]
    schema, src, slot = f"e2e_{token}", f"e{token}", f"mcq_e{token}"
    s = settings.model_copy(update={"topic_prefix": f"te{token}"})
    text = REGISTRY.format(
        src=src, schema=schema, slot=slot, target=f"e2e_{token}.active", url=url, files=tmp_path / "files"
    )
    registry = parse_registry(text, "e2e.yaml")
    rnd = random.Random(23)
    with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
        # earlier versions of this test logged for every source; a new connector's snapshot reads them too
        conn.execute(f"DELETE FROM {OUTBOX_TABLE} WHERE tname = 'ACCOUNT' AND source IS NULL")
        conn.execute(f"CREATE SCHEMA {schema}")
        # PostgreSQL's defaults: replica identity is the primary key until capture says otherwise
        conn.execute(f"CREATE TABLE {schema}.accounts (id int PRIMARY KEY, owner text, status text, quota int)")
        for i in range(150):
            conn.execute(
                f"INSERT INTO {schema}.accounts VALUES (%s, %s, %s, %s)",
                (i, f"owner{i}", rnd.choice(STATUSES), rnd.randrange(100)),
            )
    try:
        apply_capture(registry, s)
        wait_slot_active(s, slot)
        with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
            identity = conn.execute(f"SELECT relreplident FROM pg_class WHERE oid = '{schema}.accounts'::regclass")
            assert identity.fetchone() == ("f",)  # set by capture, not by the test
            next_id = 150
            events = 150  # the snapshot's reads; then a record per change, two per delete (and its tombstone)
            for _ in range(1500):
                ids = [r[0] for r in conn.execute(f"SELECT id FROM {schema}.accounts").fetchall()]
                roll = rnd.random()
                if roll < 0.5 and ids:  # in and out of the rule
                    conn.execute(
                        f"UPDATE {schema}.accounts SET status = %s WHERE id = %s",
                        (rnd.choice(STATUSES), rnd.choice(ids)),
                    )
                    events += 1
                elif roll < 0.75 and ids:  # a change of another column only
                    conn.execute(
                        f"UPDATE {schema}.accounts SET quota = %s WHERE id = %s", (rnd.randrange(100), rnd.choice(ids))
                    )
                    events += 1
                elif roll < 0.88 and ids:
                    conn.execute(f"DELETE FROM {schema}.accounts WHERE id = %s", (rnd.choice(ids),))
                    events += 2
                else:
                    conn.execute(
                        f"INSERT INTO {schema}.accounts VALUES (%s, %s, %s, %s)",
                        (next_id, f"owner{next_id}", rnd.choice(STATUSES), rnd.randrange(100)),
                    )
                    next_id += 1
                    events += 1
            live = sorted(r[0] for r in conn.execute(f"SELECT id FROM {schema}.accounts").fetchall())
            gone = sorted(set(range(next_id)) - set(live))
            # Figure 5: an explicit refresh of some live keys and one that no longer exists
            refreshed = live[:3]
            for pk in [*refreshed, gone[0]]:  # for this test's source: the outbox outlives the test
                conn.execute("SELECT mcq_log_update('ACCOUNT', pkey_number => %s, source => %s)", (pk, src))
            outbox = conn.execute(f"SELECT count(*) FROM {OUTBOX_TABLE}").fetchone()
            assert outbox is not None  # the snapshot took every entry there was, then came the new ones

        # the normaliser reads up to the raw topics' ends as they are when it starts
        wait_raw_records(s, raw_topic(registry.sources[0], f"{schema}.accounts"), events)
        wait_raw_records(s, raw_topic(registry.sources[0], OUTBOX_TABLE), outbox[0])
        run_normalize(s, registry, once=True, checkpoint=tmp_path / "checkpoint")
        for name in ("Active", "Hook", "Files"):
            runtime = ListenerRuntime(s, name, registry=registry, http_port=None)
            assert runtime.run(until_caught_up=True) == 0

        source = _source_rows(s, schema)
        # the rule-filtered table target holds exactly the rows whose last state matches the rule
        assert target_state(s, f"e2e_{token}.active") == {k: v for k, v in source.items() if v["status"] == "active"}
        # the webhook: every key equal to the source, and never a column outside its allow-list
        assert replay(bodies) == {k: {"id": v["id"], "status": v["status"]} for k, v in source.items()}
        assert all(set(b["after"] or {}) <= {"id", "status"} and set(b["before"] or {}) <= {"id", "status"}
                   for b in bodies)  # fmt: skip
        # the files: every column, every key
        lines = [
            json.loads(x) for f in sorted((tmp_path / "files").glob("*.jsonl")) for x in f.read_text().splitlines()
        ]
        assert replay(lines) == source
        # the refresh carried state: the whole current record of each live key, and a delete of the gone one
        refreshes = [line for line in lines if line["cause"] == "refresh"]
        got = {(line["pkey_number"], line["change_type"]) for line in refreshes}
        assert got == {*((pk, "UPDATE") for pk in refreshed), (gone[0], "DELETE")}
        for line in refreshes:
            if line["change_type"] == "UPDATE":
                assert line["after"] == source[ChangeKey("ACCOUNT", pkey_number=line["pkey_number"]).text()]
    finally:
        uncapture(s, registry, schema)
