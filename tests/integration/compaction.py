"""Make the broker's log cleaner compact a test's topic now, and wait until it has: what a
listener that was away for a day meets (DELETE records gone, only their tombstones left)."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource

from mcq.config import Settings
from mcq.testing.listeners import World, change, produce, wait_for
from mcq.topics.read import read_to_end


def compact_now(settings: Settings, topic: str) -> None:
    """Make the broker's log cleaner compact ``topic`` soon: small segments, no lag, any dirt."""
    admin = AdminClient(settings.kafka.client_config())
    config = {
        "segment.ms": "500",
        "min.compaction.lag.ms": "0",
        "min.cleanable.dirty.ratio": "0.0001",
        "delete.retention.ms": "86400000",
    }
    for future in admin.incremental_alter_configs(
        [ConfigResource("topic", topic, incremental_configs=_ops(config))]
    ).values():
        future.result(30)


def _ops(config: dict[str, str]) -> list[Any]:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    return [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()]


def values_by_key(settings: Settings, topic: str) -> dict[bytes, list[bytes | None]]:
    out: dict[bytes, list[bytes | None]] = defaultdict(list)
    for msg in read_to_end(settings, topic):
        out[msg.key() or b""].append(msg.value())
    return out


def wait_compacted(w: World, filler_pid: int, deleted: int) -> None:
    """Roll segments (a record after segment.ms closes the active one) until the cleaner has
    removed the DELETE records, leaving their tombstones alone."""

    def only_tombstones_left() -> bool:
        nonlocal filler_pid
        time.sleep(1.0)
        filler_pid += 1
        produce(w.settings, w.phone_topic, [change("PHONE", filler_pid, "filler", "INSERT", tele="filler")])
        lone = [vs for vs in values_by_key(w.settings, w.phone_topic).values() if vs == [None]]
        return len(lone) >= deleted

    wait_for("the log cleaner to leave only tombstones of the deleted keys", only_tombstones_left, 240, every=0.1)
