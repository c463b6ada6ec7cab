"""A listener as a deployment runs it: ``mcq listen NAME`` in a process of its own (a pod), not a
thread of the benchmark. A thread shares this process's interpreter lock with the sampling
loop, its producers and, in ``bench.batch_jobs``, the Spark driver's gateway: what the
benchmark measured then was partly itself. The bulk lane's progress is read from Kafka (the
bulk group's committed offsets against the lane's ends), as ``mcq status`` reads it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from mcq.testing.listeners import listen_process
from mcq.topics.read import all_watermarks


@contextmanager
def listener_process(w: Any, log: Path) -> Iterator[None]:
    """``mcq listen`` for world ``w`` until the block ends (SIGTERM: it finishes its batch)."""
    proc = listen_process(w, log=log)
    try:
        yield
        if proc.poll() is not None:
            raise SystemExit(f"the listener exited {proc.returncode}: see {log}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)


def bulk_pending(w: Any) -> tuple[int, int]:
    """(changes waiting in the listener's bulk lane, changes it has committed there)."""
    return pending(w, w.topics.bulk_group, w.topics.bulk_lane())


_ADMINS: dict[str, AdminClient] = {}


def _admin(w: Any) -> AdminClient:
    """One admin client per cluster for the whole run: these reads poll every 0.1-0.5 s, and a
    client per read connected anew each time, on the cores being measured."""
    config = w.settings.kafka.client_config()
    key = repr(sorted(config.items()))
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(config)
    return _ADMINS[key]


def pending(w: Any, group: str, topics: list[str]) -> tuple[int, int]:
    """(records of ``topics`` past ``group``'s committed offsets, records before them)."""
    admin = _admin(w)
    meta = admin.list_topics(timeout=15).topics
    tps = [TopicPartition(t, p) for t in topics if t in meta for p in meta[t].partitions]
    ends = all_watermarks(admin, tps)
    committed: dict[tuple[str, int], int] = {}
    try:
        found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result()
        committed = {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions}
    except KafkaException:
        pass  # no commit yet
    pending = done = 0
    for key, (low, high) in ends.items():
        at = max(low, committed.get(key, -1))
        pending += max(0, high - at)
        done += max(0, at - low)
    return pending, done


def wait_bulk_started(w: Any, before: int, timeout_s: float = 600) -> None:
    """Until the listener has committed bulk work beyond ``before`` (its first batch is in)."""
    deadline = time.monotonic() + timeout_s
    while bulk_pending(w)[1] <= before:
        if time.monotonic() > deadline:
            raise SystemExit(f"the listener applied nothing of its bulk lane in {timeout_s:.0f} s")
        time.sleep(0.2)


def bulk_rate(w: Any, seconds: float = 10.0) -> float | None:
    """Changes per second the listener commits in its bulk lane over ``seconds`` (or until it is
    empty); None when the lane is already empty: nothing left to measure."""
    left, first = bulk_pending(w)
    if left == 0:
        return None
    started = time.monotonic()
    while True:
        time.sleep(0.5)
        left, last = bulk_pending(w)
        if left == 0 or time.monotonic() - started >= seconds:
            return (last - first) / (time.monotonic() - started)


def lane_rate(w: Any, done_before: int, started: float, timeout_s: float = 600) -> float:
    """Changes/s the listener committed in its bulk lane from ``started`` (when it had committed
    ``done_before``) until the lane is empty: the whole lane, not the tail left after the samples."""
    deadline = time.monotonic() + timeout_s
    while True:
        left, done = bulk_pending(w)
        if left == 0:
            return (done - done_before) / max(time.monotonic() - started, 1e-9)
        if time.monotonic() > deadline:
            raise SystemExit(f"the listener's bulk lane still held {left:,} changes after {timeout_s:.0f} s")
        time.sleep(0.2)
