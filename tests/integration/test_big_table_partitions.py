"""A big table's raw topic in several partitions (``raw_partitions`` on its feed): Debezium
spreads its rows by primary key, the real-time normaliser reads each partition in a task of
its own, and a listener's target still ends as the source's last state. What would reorder
one key's changes is refused before capture changes anything: a feed whose key fields miss
a primary key column, and more partitions for a raw topic that exists already. While a
burst is read, the normaliser's ``/metrics`` says how far behind its real-time query is
now, not at its last checkpoint."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from mcq.capture.apply import apply_capture
from mcq.capture.connector import connector_name, raw_topic
from mcq.capture.exceptions import CaptureError
from mcq.config import Settings
from mcq.connect_rest import ConnectClient
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.worlds import read_topic_to_end, wait_raw_records
from mcq.topics.read import records_held
from streams.realtime import QUERY_PREFIX
from tests.integration.pipeline import Accounts, Proc, Workload, accounts, start_pipeline

ROWS = 400
PARTITIONS = 3
BURST = 20_000  # rows inserted in one transaction, read from the raw topic while /metrics is looked at

# the test's own deadlines on two cores, and pytest's timeout made from their sum
START_S = 300  # capture, the normaliser's Spark start (4 real-time tasks) and the snapshot through
LOAD_S = 25
CONVERGE_S = 300
TEARDOWN_S = 180


def _raw(w: Accounts) -> str:
    return raw_topic(w.registry.sources[0], f"{w.schema}.accounts")


def _converge(w: Accounts, procs: list[Proc]) -> None:
    """Wait until the listener's target holds the source's rows (read with SQL)."""
    expected = w.source_view()  # read with SQL, after the last commit
    deadline = time.monotonic() + CONVERGE_S
    while (got := target_state(w.settings, w.target)) != expected:
        for p in procs:
            p.running()
        if time.monotonic() > deadline:
            different = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
            raise AssertionError(
                f"{len(different)} keys differ from the source after {CONVERGE_S} s, e.g. "
                + "; ".join(f"{k}: source {expected.get(k)}, target {got.get(k)}" for k in different[:3])
                + "\n"
                + _story(w, [json.loads(k)["pkey_number"] for k in different[:3]])
            )
        time.sleep(3)


def _behind(health: str, query: str) -> float | None:
    """``mcq_normalize_behind_records`` of ``query``, as Prometheus reads it now."""
    text = urllib.request.urlopen(f"{health}/metrics", timeout=10).read().decode()
    found = re.search(rf'^mcq_normalize_behind_records{{query="{re.escape(query)}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def _partitions_of_keys(settings: Settings, topic: str) -> dict[bytes, set[int]]:
    """Every raw record key of ``topic``, with the partitions it was written to."""
    seen: dict[bytes, set[int]] = defaultdict(set)
    for key, _, partition, _ in read_topic_to_end(settings, topic):
        if key is not None:
            seen[key].add(partition)
    return seen


def _story(w: Accounts, ids: list[int]) -> str:
    """For keys that differ: each raw record of them (partition, offset, op, quota) and each
    logical record (partition, offset, quota), to tell a record lost from one reordered."""
    import json

    from tests.support.logical import decode_topic

    wanted = {str(i) for i in ids}
    raw = read_topic_to_end(w.settings, _raw(w))
    lines = []
    for key, value, part, offset in raw:
        if key and str(json.loads(key).get("id")) in wanted:
            v = json.loads(value) if value else None
            lines.append(f"raw {json.loads(key)} p{part}@{offset}: {v and v.get('op')} {(v or {}).get('after')}")
    topic = w.registry.tables[0].topic(w.settings.topic_prefix)
    for k, v in decode_topic(w.settings, topic):
        if str(k.get("pkey_number")) in wanted:
            lines.append(f"logical {k.get('pkey_number')}: {v and v.get('change_type')} {(v or {}).get('after')}")
    return "\n".join(lines)


@pytest.mark.long
@pytest.mark.timeout(START_S + LOAD_S + 3 * CONVERGE_S + TEARDOWN_S + 120)  # three waits of CONVERGE_S
def test_a_big_tables_raw_partitions_keep_each_key_in_one_and_the_target_ends_as_the_source(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with accounts(settings, tmp_path, "rawparts", ROWS, seed=71, raw_partitions=PARTITIONS) as w:
        procs = [
            Proc(["streams", "normalize", "--http-port", "0", "--registry", str(w.registry_file),
                  "--checkpoint", str(tmp_path / "ckpt")], w.env, tmp_path / "normalize.log"),
            Proc(["listen", w.listener, "--registry", str(w.registry_file), "--http-port", "0"], w.env,
                 tmp_path / "listen.log"),
        ]  # fmt: skip
        try:
            start_pipeline(w, procs, START_S)
            workload = Workload(w.settings, w.schema, seed=72, next_id=ROWS)
            with workload.running():
                time.sleep(LOAD_S)
            assert workload.committed > 50, (workload.committed, workload.failures)
            _converge(w, procs)
            # a burst written while the normaliser is stalled (SIGSTOP): /metrics says its
            # real-time query is behind while it reads it (its last progress, at a checkpoint
            # minutes away, could not say), then 0
            found = re.search(r"normalize: health (http://[0-9.]+:\d+)", procs[0].log.read_text())
            assert found, procs[0].log.read_text()[-2000:]
            query = QUERY_PREFIX + _raw(w)
            held = records_held(w.settings, [_raw(w)])
            with procs[0].frozen():
                with psycopg.connect(w.settings.source.dsn(), autocommit=True) as conn:
                    conn.execute(
                        f"INSERT INTO {w.schema}.accounts SELECT g, 'burst' || g, 'active', g % 1000 "
                        f"FROM generate_series(1000000, {1_000_000 + BURST - 1}) g"
                    )
                wait_raw_records(w.settings, _raw(w), held + BURST)
            seen: list[float | None] = []
            deadline = time.monotonic() + CONVERGE_S
            while not (seen and max(v or 0 for v in seen) > 0 and seen[-1] == 0) and time.monotonic() < deadline:
                procs[0].running()
                seen.append(_behind(found.group(1), query))
                time.sleep(0.2)
            most = max(v or 0 for v in seen)
            assert most >= BURST / 10, f"behind by at most {most} reading {BURST} rows: {seen[:20]}...{seen[-5:]}"
            assert most <= BURST, f"behind by {most}: more than the {BURST} rows written"
            assert seen[-1] == 0, f"still behind after {CONVERGE_S} s: {seen[-5:]}"
            _converge(w, procs)
            keys = _partitions_of_keys(w.settings, _raw(w))
        finally:
            for p in procs:
                p.stop()
    assert len(keys) >= ROWS, f"{len(keys)} raw keys for {ROWS} snapshot rows and the workload's inserts"
    assert {k: ps for k, ps in keys.items() if len(ps) > 1} == {}, "a key's changes in two partitions"
    used = {p for ps in keys.values() for p in ps}
    assert used == set(range(PARTITIONS)), f"rows only in partitions {used} of {PARTITIONS}"
    normalised = procs[0].log.read_text()
    assert f"{PARTITIONS + 2} real-time task slots needed" in normalised, normalised[-2000:]


def test_raw_partitions_on_a_feed_whose_key_fields_miss_the_primary_key_are_refused(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with accounts(settings, tmp_path, "rawkeys", 5, seed=73, raw_partitions=PARTITIONS) as w:
        text = w.registry_file.read_text().replace("keys: {pkey_number: id}", "keys: {pkey_string: owner}")
        registry = parse_registry(text, str(w.registry_file))
        with pytest.raises(CaptureError) as refused:
            apply_capture(registry, w.settings)
    said = str(refused.value)
    assert f"{w.schema}.accounts's primary key column id" in said, said
    assert "key fields (owner)" in said, said


def test_more_raw_partitions_for_a_raw_topic_that_exists_are_refused_before_capture(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with accounts(settings, tmp_path, "rawraise", 5, seed=74, raw_partitions=PARTITIONS) as w:
        topic = _raw(w)
        admin = AdminClient(w.settings.kafka.client_config())
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
        with pytest.raises(CaptureError) as refused:
            apply_capture(w.registry, w.settings)
        # also when another manager puts the connectors (--prepare-only): the topic is Kafka's
        with pytest.raises(CaptureError) as prepared:
            apply_capture(w.registry, w.settings, connectors=False)
        with ConnectClient(w.settings.connect) as client:
            assert client.config(connector_name(w.registry.sources[0])) is None, "a connector was put anyway"
        with psycopg.connect(w.settings.source.dsn()) as conn:
            identity = conn.execute(f"SELECT relreplident FROM pg_class WHERE oid = '{w.schema}.accounts'::regclass")
            assert identity.fetchone() == ("d",), "the source was changed before the refusal"
    for said in (str(refused.value), str(prepared.value)):
        assert f"{topic} has 1, the registry asks for {PARTITIONS}" in said, said
