"""Debezium killed at the awkward moments of capture (issue 16, scenarios 3 and 4): Kafka
Connect SIGKILLed during the initial snapshot of a large table, while a large
transaction is open on the source, and while it streams the events of a large COPY
(many rows committed at one commit LSN). Each time the stack starts it again as
``mcq stack up`` does. A sentinel row committed last tells when capture has caught
up; then the normaliser and the listener run once (``--once``, ``--until-caught-up``)
and the ``table`` target must equal the source read with SQL, key by key. The
duplicates capture wrote again after the restarts are counted from the raw topic."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from mcq.capture.apply import apply_capture
from mcq.capture.connector import raw_topic
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import target_state, wait_for
from mcq.testing.worlds import read_topic_to_end, wait_raw_records, wait_slot_active
from mcq.topics.read import all_watermarks
from tests.integration.pipeline import Accounts, accounts, kill_and_restart

pytestmark = pytest.mark.faults

SNAPSHOT_ROWS = 80_000
OPEN_TX_ROWS = 20_000
COPY_ROWS = 40_000
SENTINEL = -1


def _raw_count(settings: Settings, topic: str) -> int:
    from confluent_kafka import TopicPartition

    admin = AdminClient(settings.kafka.client_config())
    meta = admin.list_topics(timeout=10).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        return 0
    marks = all_watermarks(admin, [TopicPartition(topic, p) for p in meta.partitions])
    return sum(high for _, high in marks.values())


def _kill_connect(stack: Stack, report: list[str], what: str) -> None:
    kill_and_restart(stack, "connect", report)
    report[-1] = f"{what}: {report[-1]}"


def _raw_ops(settings: Settings, topic: str, keys: list[str]) -> str:
    """What the raw topic holds for the keys that differ: were their changes captured at all?"""
    wanted = {int(json.loads(k)["pkey_number"]) for k in keys}
    ops: dict[int, list[str]] = {}
    for key, value, _, _ in read_topic_to_end(settings, topic):
        pk = json.loads(key).get("id") if key else None
        if pk in wanted:
            ops.setdefault(pk, []).append(json.loads(value).get("op", "?") if value else "tombstone")
    captured = sum(1 for pk in wanted if "d" in ops.get(pk, []))
    return f"in the raw topic, {captured} of {len(wanted)} such keys have a delete; e.g. {sorted(ops.items())[:3]}"


def _run(args: list[str], env: dict[str, str], log: Path, timeout: float) -> None:
    with log.open("ab") as out:
        done = subprocess.run([sys.executable, "-m", "mcq.cli", *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout)  # fmt: skip
    assert done.returncode == 0, f"mcq {args[0]} exited {done.returncode}:\n{log.read_text()[-4000:]}"


@pytest.mark.timeout(900)
def test_connect_killed_mid_snapshot_and_inside_an_open_transaction_loses_no_row(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with accounts(settings, tmp_path, "capk", SNAPSHOT_ROWS, seed=34, listener="All", rule=None) as w:
        _restarts(stack, w, tmp_path, amid_copy=False)


@pytest.mark.xfail(
    strict=False,
    reason="Debezium 3.6.3 and 3.7.0 (PostgreSQL connector, pgoutput): Connect SIGKILLed while it streams a large "
    "transaction (a 40,000-row COPY, then a 14,000-row DELETE), then started again, lost a run of that "
    "transaction's later events in 3 of 6 runs (the raw topic has none of those deletes: mcq never sees them). "
    "The repair is `mcq refresh LISTENER --from source`; reported upstream-style in the closing note",
)
@pytest.mark.extended(minutes=6)  # an upstream defect kept visible: CI runs it when its time budget allows
@pytest.mark.timeout(900)
def test_connect_killed_amid_the_events_of_a_large_transaction_loses_none_of_them(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with accounts(settings, tmp_path, "capk", SNAPSHOT_ROWS, seed=35, listener="All", rule=None) as w:
        _restarts(stack, w, tmp_path, amid_copy=True)


def _restarts(stack: Stack, w: Accounts, tmp_path: Path, amid_copy: bool) -> None:
    s, schema, slot, target = w.settings, w.schema, w.slot, w.target
    topic = raw_topic(w.registry.sources[0], f"{schema}.accounts")
    faults: list[str] = []
    env = {**os.environ, **w.env}
    try:
        # 3: during the initial snapshot
        apply_capture(w.registry, s)
        wait_raw_records(s, topic, 2_000, timeout_s=180)
        read = _raw_count(s, topic)
        assert read < SNAPSHOT_ROWS, "the snapshot ended before Connect could be killed during it"
        _kill_connect(stack, faults, f"snapshot at {read} of {SNAPSHOT_ROWS} rows")
        wait_slot_active(s, slot, timeout_s=300)  # streaming: the snapshot is over

        # 4: a large transaction open on the source while Connect dies and comes back
        with psycopg.connect(s.source.dsn()) as tx:
            tx.execute(f"UPDATE {schema}.accounts SET quota = quota + 1, status = 'open-tx' WHERE id % 4 = 0")
            with tx.cursor().copy(f"COPY {schema}.accounts FROM STDIN") as copy:
                for i in range(SNAPSHOT_ROWS, SNAPSHOT_ROWS + OPEN_TX_ROWS):
                    copy.write_row((i, f"owner{i}", "new", i % 1000))
            _kill_connect(stack, faults, f"a transaction of {SNAPSHOT_ROWS // 4 + OPEN_TX_ROWS} changes open")
            wait_slot_active(s, slot, timeout_s=300)
            tx.commit()

        # 4: amid the events of a large COPY committed at one commit LSN
        before = _raw_count(s, topic)
        with psycopg.connect(s.source.dsn()) as tx:
            with tx.cursor().copy(f"COPY {schema}.accounts FROM STDIN") as copy:
                first = SNAPSHOT_ROWS + OPEN_TX_ROWS
                for i in range(first, first + COPY_ROWS):
                    copy.write_row((i, f"owner{i}", "copied", i % 1000))
            tx.execute(f"DELETE FROM {schema}.accounts WHERE id % 10 = 1")
            tx.commit()
        if amid_copy:
            wait_raw_records(s, topic, before + 5_000, timeout_s=180)
            streamed = _raw_count(s, topic) - before
            assert streamed < COPY_ROWS, "the COPY's events were all streamed before Connect could be killed"
            _kill_connect(stack, faults, f"the COPY's events at {streamed} of {COPY_ROWS + SNAPSHOT_ROWS // 10}")
            wait_slot_active(s, slot, timeout_s=300)

        with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
            conn.execute(f"INSERT INTO {schema}.accounts VALUES ({SENTINEL}, 'sentinel', 'last', 0)")

        def sentinel_captured() -> bool:
            return any(
                key is not None and json.loads(key).get("id") == SENTINEL
                for key, _, _, _ in read_topic_to_end(s, topic)[-50:]
            )

        wait_for("capture to reach the sentinel row", sentinel_captured, 300, 3)
        _run(["streams", "normalize", "--once", "--registry", str(w.registry_file), "--checkpoint",
              str(tmp_path / "ckpt")], env, tmp_path / "normalize.log", 600)  # fmt: skip
        _run(["listen", "All", "--registry", str(w.registry_file), "--until-caught-up"], env, tmp_path / "listen.log",
             600)  # fmt: skip
        expected, got = w.source_view(), target_state(s, target)
        missing = sorted(expected.keys() - got.keys())
        extra = sorted(got.keys() - expected.keys())
        different = [k for k in expected.keys() & got.keys() if expected[k] != got[k]]
        assert (missing, extra, different) == ([], [], []), (
            f"after {faults}: {len(missing)} missing, {len(extra)} extra, {len(different)} different, "
            f"e.g. {missing[:3]} {extra[:3]} {different[:3]}; " + _raw_ops(s, topic, missing + extra + different)
        )
        events = (
            SNAPSHOT_ROWS + SNAPSHOT_ROWS // 4 + OPEN_TX_ROWS + COPY_ROWS + len(range(1, first + COPY_ROWS, 10)) + 1
        )
        print(
            f"capture restarts: {'; '.join(faults)}; target equal to the source ({len(expected)} rows); "
            f"raw records {_raw_count(s, topic)} for about {events} changes (the rest written again after a restart)"
        )
    finally:
        stack.up()  # whatever a failed restart left down, for the tests after this one


@pytest.mark.timeout(420)
def test_a_source_task_failed_on_its_lost_database_is_started_again_once_it_is_back(
    stack: Stack, settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stop 70's red CI: Connect started the task again while PostgreSQL was still down, and
    Debezium failed it for good (a race inside its start, not reproducible on demand).
    Here Debezium is told to retry nothing (errors.max.retries 0), so that the database's
    SIGKILL under a streaming task fails it just as for good. The keeper the normaliser runs
    (streams/beside.py) starts it again once the database is back, and a row committed
    then is captured."""
    from mcq.capture.connector import connector_name
    from mcq.capture.keeper import lost_connection
    from mcq.connect_rest import ConnectClient
    from streams.beside import keeping

    with accounts(settings, tmp_path, "keeper", 20, seed=3) as w:
        s, name = w.settings, connector_name(w.registry.sources[0])
        topic = raw_topic(w.registry.sources[0], f"{w.schema}.accounts")
        apply_capture(w.registry, s)
        wait_slot_active(s, w.slot)
        wait_raw_records(s, topic, 20)
        with ConnectClient(s.connect) as client:
            before = _slot_pid(s, w.slot)
            client.put(name, {**(client.config(name) or {}), "errors.max.retries": "0"})
            wait_for("the task made again streaming", lambda: _slot_pid(s, w.slot) not in (None, before), timeout=90)
            _insert_and_wait(s, w.schema, topic, 5000)

            def task_state() -> tuple[str, str]:
                tasks = (client.status(name) or {}).get("tasks") or [{}]
                return str(tasks[0].get("state")), str(tasks[0].get("trace") or "")

            try:
                stack.service("postgres").handle.stop(signal.SIGKILL)
                wait_for("the task FAILED", lambda: task_state()[0] == "FAILED", timeout=90)
                trace = task_state()[1]
                assert lost_connection(trace), trace
                with caplog.at_level(logging.WARNING, logger="mcq.capture.keeper"), keeping(s, lambda: [name], False):
                    wait_for("the keeper's restart", lambda: "restarted its failed tasks" in caplog.text, timeout=60)
                    stack.up()
                    wait_for("the task RUNNING again", lambda: task_state()[0] == "RUNNING", timeout=180, every=2)
            finally:
                stack.up()
        _insert_and_wait(s, w.schema, topic, 9999)


def _slot_pid(s: Settings, slot: str) -> int | None:
    """The server process streaming the slot to its task, None while none does."""
    with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
        row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    return row[0] if row else None


def _insert_and_wait(s: Settings, schema: str, topic: str, pk: int) -> None:
    with psycopg.connect(s.source.dsn(), autocommit=True) as conn:
        conn.execute(f"INSERT INTO {schema}.accounts VALUES ({pk}, 'after', 'active', 1)")

    def captured() -> bool:
        return any(k and json.loads(k).get("id") == pk for k, _, _, _ in read_topic_to_end(s, topic))

    wait_for(f"row {pk} captured", captured, timeout=120, every=2)
