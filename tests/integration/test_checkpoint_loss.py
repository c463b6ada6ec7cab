"""Issue 16, scenario 9: the normaliser's own memory gone, and raw changes gone before it
read them.

- A deleted checkpoint: the normaliser starts from the raw topics' beginning against
  logical topics that already hold records. It says so, and re-derives: the topics end
  with the same last state per key (every record carries its source position, so a
  listener skips what it applied).
- Raw records deleted before they were read (retention passed the checkpoint's offsets):
  the normaliser stops with one line naming the raw topic, partition and offsets and the
  repair, exit 1, no traceback; ``--accept-lost-raw`` goes on from the oldest record kept.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from mcq.capture.connector import raw_topic
from mcq.cli import main
from mcq.config import Settings
from mcq.registry import Registry, parse_registry
from mcq.stack import Stack
from mcq.testing.logs import log_lines
from mcq.topics import delete_topics
from mcq.topics.plan import TopicSpec, apply_topics
from streams.runner import run_normalize
from tests.integration.typed import produce_updates, typed_registry_yaml
from tests.support.logical import decode_topic, last_state

pytestmark = pytest.mark.faults


def _world(settings: Settings, tmp_path: Path) -> tuple[Settings, Registry, Path, str]:
    token = uuid.uuid4().hex[:8]
    text = typed_registry_yaml(token, f"y_{token}")
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(text)
    registry = parse_registry(text, str(registry_file))
    topic = raw_topic(registry.sources[0], f"y_{token}.typed")
    apply_topics(settings, [TopicSpec(topic, 1, {"cleanup.policy": "delete"})])
    return settings.model_copy(update={"topic_prefix": f"tk{token}"}), registry, registry_file, topic


def _notes(records: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> dict[int, str]:
    """pkey -> note of each key's last state in a logical topic."""
    return {int(k[4]): v["after"]["note"] for k, v in last_state(records).items()}


def _once(settings: Settings, registry: Registry, checkpoint: Path) -> list[str]:
    with log_lines() as lines:
        run_normalize(settings, registry, once=True, checkpoint=checkpoint)
    return lines


def test_a_deleted_checkpoint_is_said_and_re_derives_the_same_last_states(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    s, registry, _, topic = _world(settings, tmp_path)
    logical = registry.tables[0].topic(s.topic_prefix)
    try:
        produce_updates(s, topic, [(1, "a", 10), (2, "b", 11), (1, "a2", 12), (3, "c", 13)])
        first = _once(s, registry, tmp_path / "checkpoint")
        assert not [line for line in first if "already hold" in line], first  # a true first run says nothing
        before = decode_topic(s, logical)
        shutil.rmtree(tmp_path / "checkpoint")
        produce_updates(s, topic, [(2, "b2", 14)])  # and a change made while the checkpoint was gone
        again = _once(s, registry, tmp_path / "checkpoint")
        said = [line for line in again if "no microbatch checkpoint at" in line]
        assert said and f"already hold {len(before)} records" in said[0] and "re-deriving" in said[0], again
        after = decode_topic(s, logical)
        assert _notes(before) == {1: "a2", 2: "b", 3: "c"}
        assert _notes(after) == {1: "a2", 2: "b2", 3: "c"}
        assert len(after) == 2 * len(before) + 1  # every record derived again, nothing skipped
    finally:
        delete_topics(s, [topic])


def test_raw_records_deleted_before_they_were_read_stop_the_normaliser_with_the_repair(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    s, registry, registry_file, topic = _world(settings, tmp_path)
    logical = registry.tables[0].topic(s.topic_prefix)
    checkpoint = tmp_path / "checkpoint"
    env = {"MCQ_TOPIC_PREFIX": s.topic_prefix}
    command = ["streams", "normalize", "--once", "--registry", str(registry_file), "--checkpoint", str(checkpoint)]
    try:
        produce_updates(s, topic, [(1, "a", 10), (2, "b", 11), (3, "c", 12)])
        _once(s, registry, checkpoint)
        produce_updates(s, topic, [(4, "lost", 13), (5, "lost too", 14), (6, "kept", 15)])
        admin = AdminClient(s.kafka.client_config())
        for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
            future.result(30)  # retention, as it would have happened: offsets 3 and 4 are gone

        failed = CliRunner().invoke(main, command, env=env)
        assert failed.exit_code == 1 and isinstance(failed.exception, SystemExit), repr(failed.exception)[:3000]
        lines = [line for line in failed.output.splitlines() if line.startswith("mcq streams normalize: ")]
        assert len(lines) == 1 and "Traceback" not in failed.output, failed.output[-3000:]
        # Spark's own words name the range it could not read: from the first lost offset (3) to where its
        # read stopped (5 or 6, as it happened to fetch)
        assert topic in lines[0] and "[3, " in lines[0], lines[0]
        assert "mcq refresh LISTENER --from source" in lines[0] and "--accept-lost-raw" in lines[0], lines[0]
        assert _notes(decode_topic(s, logical)) == {1: "a", 2: "b", 3: "c"}  # nothing written past the gap

        went_on = CliRunner().invoke(main, [*command, "--accept-lost-raw"], env=env)
        assert went_on.exit_code == 0, went_on.output[-3000:]
        assert _notes(decode_topic(s, logical)) == {1: "a", 2: "b", 3: "c", 6: "kept"}
        again = CliRunner().invoke(main, command, env=env)  # and the next ordinary run is clean again
        assert again.exit_code == 0, again.output[-3000:]
    finally:
        delete_topics(s, [topic])
