"""A projection state store restored from its snapshot ends equal to one that read its
topics whole, on the real broker; a snapshot that may no longer describe the topics (older
than their delete.retention.ms, a topic created again) is not used, and the store says why."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from consumers.projection import StateStore
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import World, change, expected_state, make_world, produce
from mcq.topics import delete_topics
from mcq.topics.plan import apply_topics, plan_topics
from tests.integration.compaction import compact_now, wait_compacted


def _workload(rnd: random.Random, people: range, n: int) -> list[Any]:
    """Updates, deletes (each with its tombstone) and new keys, in random order."""
    out = []
    for _ in range(n):
        pid = rnd.choice(people)
        kind = "DELETE" if rnd.random() < 0.2 else "UPDATE"
        out.append(change("PHONE", pid, f"+1 {rnd.randrange(10**7)}", kind, rnd.choice(["office", "home"])))
    return out


def _state(store: StateStore) -> dict[str, dict[str, Any]]:
    return {key.text(): row for key, row, _ in store.entries("PHONE")}


def _open(world: World, snapshot: Path) -> StateStore:
    store = StateStore(world.settings, world.registry, ["PHONE"], snapshot)
    store.catch_up()
    return store


def test_a_store_restored_from_its_snapshot_reads_only_the_tail_and_ends_equal_to_a_whole_read(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    world = make_world(settings, token, tmp_path)
    snapshot = tmp_path / "state" / "T.store"
    rnd = random.Random(5)
    first = _workload(rnd, range(200), 2000)
    produce(world.settings, world.phone_topic, first)

    store = _open(world, snapshot)
    assert store.restored == "read whole: no snapshot yet"
    saved_positions = store.positions()
    store.close()
    assert snapshot.is_file() and snapshot.stat().st_mode & 0o777 == 0o600

    later = _workload(rnd, range(150, 300), 1500)  # old keys changed and deleted, new ones
    produce(world.settings, world.phone_topic, later)

    restored = StateStore(world.settings, world.registry, ["PHONE"], snapshot)
    assert restored.restored.startswith("restored "), restored.restored
    assert restored.positions() == saved_positions  # it starts where the last run ended
    restored.catch_up()
    whole = _open(world, tmp_path / "nowhere" / "unused.store")  # no snapshot there: reads whole
    try:
        assert _state(restored) == _state(whole) == expected_state(first + later)
        assert restored.positions() == whole.positions()
    finally:
        restored.close()
        whole.close()


def test_a_snapshot_older_than_delete_retention_or_of_a_recreated_topic_is_not_used(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    world = make_world(settings, token, tmp_path)
    snapshot = tmp_path / "T.store"
    rnd = random.Random(9)
    produce(world.settings, world.phone_topic, _workload(rnd, range(50), 300))
    _open(world, snapshot).close()

    admin = AdminClient(world.settings.kafka.client_config())
    retention = [ConfigEntry("delete.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)]
    for future in admin.incremental_alter_configs(
        [ConfigResource("topic", world.phone_topic, incremental_configs=retention)]
    ).values():
        future.result(30)
    time.sleep(1.5)
    aged = _open(world, snapshot)
    assert aged.restored.startswith("read whole: it is ") and "delete.retention.ms" in aged.restored, aged.restored
    aged.close()  # saves a fresh snapshot

    delete_topics(world.settings, [world.phone_topic])
    apply_topics(world.settings, [t for t in plan_topics(world.registry, world.settings.topic_prefix)
                                  if t.name == world.phone_topic])  # fmt: skip
    again = _workload(rnd, range(20), 100)
    produce(world.settings, world.phone_topic, again)
    recreated = _open(world, snapshot)
    try:
        assert recreated.restored == "read whole: a topic was created again since (another topic id)"
        assert _state(recreated) == expected_state(again)
    finally:
        recreated.close()


def test_deletes_made_after_the_snapshot_and_compacted_to_tombstones_still_remove_their_keys(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """A scheduled listener away while its keys were deleted, and the log cleaner left only
    the tombstones: the restored store drops those keys, as a whole read does."""
    world = make_world(settings, token, tmp_path)
    snapshot = tmp_path / "T.store"
    first = [change("PHONE", pid, f"+1 555 {pid:04d}", "INSERT") for pid in range(40)]
    produce(world.settings, world.phone_topic, first)
    _open(world, snapshot).close()

    compact_now(world.settings, world.phone_topic)
    later = [change("PHONE", pid, None, "DELETE") for pid in range(0, 40, 3)]
    later += [change("PHONE", pid, f"+1 556 {pid:04d}") for pid in range(1, 40, 3)]
    produce(world.settings, world.phone_topic, later)
    wait_compacted(world, 10_000, len(range(0, 40, 3)))

    restored = _open(world, snapshot)
    whole = _open(world, tmp_path / "nowhere" / "unused.store")
    try:
        assert restored.restored.startswith("restored "), restored.restored
        assert _state(restored) == _state(whole)
        mine = {k: v for k, v in _state(restored).items() if v["tele_type"] != "filler"}
        assert mine == expected_state(first + later)
    finally:
        restored.close()
        whole.close()
