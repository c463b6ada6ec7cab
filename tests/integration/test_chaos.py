"""The pipeline under the failures of its own parts (issue 16, scenarios 3, 8 and 10):
while a workload writes to a user's table, Kafka Connect is SIGKILLed mid-stream, the
broker is SIGKILLed, and PostgreSQL — the source and the target's database, one
cluster — is SIGKILLed, each then started again as ``mcq stack up`` does. The normaliser
and the listener run as the processes a user runs, started once: each must recover by
itself. At the end the rule-filtered ``table`` target equals the source's last state,
read with SQL, key by key; the changes applied again after a fault (duplicates) are
counted from the listener's own metrics, and none was dead-lettered or parked for good."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from mcq.config import Settings
from mcq.registry import Registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from tests.integration.pipeline import Proc, Workload, accounts, kill_and_restart, start_pipeline

pytestmark = pytest.mark.faults

ROWS = 300

# the test's own deadlines on two cores, and pytest's timeout made from their sum
START_S = 240  # capture, the normaliser's Spark start and first batch
FAULT_S = 3 * 200  # each fault: the kill, the service started again and healthy, a pause
CONVERGE_S = 420  # the target equal to the source once the workload stopped
TEARDOWN_S = 180


def _where(settings: Settings, registry: Registry) -> str:
    """Where the changes stopped: the connector's state and each topic's end."""
    from confluent_kafka.admin import AdminClient

    from mcq.capture.connector import connector_name, raw_topic
    from mcq.connect_rest import ConnectClient
    from mcq.topics.read import all_watermarks

    source = registry.sources[0]
    with ConnectClient(settings.connect) as client:
        status = client.status(connector_name(source))
    admin = AdminClient(settings.kafka.client_config())
    topics = [raw_topic(source, f.table) for t in registry.tables for f in t.feeds] + [
        t.topic(settings.topic_prefix) for t in registry.tables
    ]
    meta = admin.list_topics(timeout=10).topics
    tps = [TopicPartition(t, p) for t in topics if t in meta for p in meta[t].partitions]
    return f"connector: {status}; topic ends: {all_watermarks(admin, tps)}"


@pytest.mark.timeout(START_S + FAULT_S + CONVERGE_S + TEARDOWN_S + 120)
def test_the_pipeline_recovers_by_itself_from_killed_connect_broker_and_database(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with accounts(settings, tmp_path, "chaos", ROWS, seed=31) as w:
        procs = {
            "normalize": Proc(["streams", "normalize", "--http-port", "0",
                               "--registry", str(w.registry_file), "--checkpoint-interval",
                               "10 seconds", "--checkpoint", str(tmp_path / "ckpt")], w.env,
                              tmp_path / "normalize.log"),
            "listen": Proc(["listen", w.listener, "--registry", str(w.registry_file), "--http-port", "0"], w.env,
                           tmp_path / "listen.log"),
        }  # fmt: skip
        faults: list[str] = []

        def assert_running() -> None:
            for p in procs.values():
                p.running()

        try:
            start_pipeline(w, procs.values(), START_S)
            workload = Workload(w.settings, w.schema, seed=41, next_id=ROWS)
            with workload.running():
                for name in ("connect", "kafka", "postgres"):
                    time.sleep(8)  # changes flowing before the fault
                    kill_and_restart(stack, name, faults)
                    assert_running()
                time.sleep(8)  # and after the last one
            assert workload.committed > 300, (workload.committed, workload.failures)
            expected = w.source_view()
            deadline = time.monotonic() + CONVERGE_S
            while (got := target_state(w.settings, w.target)) != expected:
                assert_running()
                if time.monotonic() > deadline:
                    missing = expected.keys() - got.keys()
                    extra = got.keys() - expected.keys()
                    different = [k for k in expected.keys() & got.keys() if expected[k] != got[k]]
                    raise AssertionError(
                        f"after {faults}: {len(missing)} missing, {len(extra)} extra, {len(different)} different, "
                        f"e.g. {sorted(missing)[:3]} {sorted(extra)[:3]} {different[:3]}\n"
                        f"{_where(w.settings, w.registry)}\n" + procs["listen"].log.read_text()[-3000:]
                    )
                time.sleep(3)
            assert_running()
            counted = procs["listen"].metrics()
            assert counted["dead_lettered"] == 0, procs["listen"].log.read_text()[-3000:]
            print(
                f"chaos: {'; '.join(faults)}; {workload.committed} changes committed "
                f"({workload.failures} connection losses); target equal to the source ({len(expected)} rows); "
                f"listener applied {counted['applied']}, skipped as already applied {counted['skipped']} "
                f"(duplicates), retried {counted['failed']}"
            )
        finally:
            for p in procs.values():
                p.stop()
            stack.up()  # whatever a failed restart left down, for the tests after this one
