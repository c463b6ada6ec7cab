"""mcq topics apply: compacted logical topics created idempotently; drift reported, not fixed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from mcq.cli import main
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.topics import apply_topics, delete_topics, plan_topics


def _registry(token: str) -> str:
    return f"""
sources: [{{name: src, schemas: [s]}}]
tables:
  - tname: T{token.upper()}
    subtype: Telephone
    partitions: 4
    feeds: [{{source: src, table: s.t, keys: {{person_id: id}}, columns: [id, phone]}}]
"""


def test_topics_are_created_compacted_once_and_drift_is_reported_not_changed(
    stack: Stack, settings: Settings, token: str
) -> None:
    reg = parse_registry(_registry(token))
    specs = [s for s in plan_topics(reg) if s.name.startswith("mcq.t")]
    topic = specs[0].name
    assert topic == f"mcq.t{token}.telephone"
    try:
        first = apply_topics(settings, specs)
        assert first.created == [topic] and not first.drift
        second = apply_topics(settings, specs)
        assert second.created == [] and second.unchanged == [topic]

        admin = AdminClient(settings.kafka.client_config())
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        config = next(iter(described.values())).result()
        assert config["cleanup.policy"].value == "compact"
        assert config["min.compaction.lag.ms"].value == "60000"
        assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4

        # someone changes the topic behind the registry's back
        change = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry("delete.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        next(iter(admin.incremental_alter_configs([change]).values())).result()
        third = apply_topics(settings, specs)
        assert third.drift == [f"{topic}: delete.retention.ms: registry 86400000, cluster 1000"]
        after = next(iter(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values())).result()
        assert after["delete.retention.ms"].value == "1000"  # reported, not silently reverted
    finally:
        delete_topics(settings, [topic])


def test_topic_durability_settings_reach_every_topic_and_a_cluster_too_small_is_one_line(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """MCQ_TOPICS__REPLICATION_FACTOR / MIN_INSYNC_REPLICAS: the stack has one broker, so a
    factor of 2 is refused before any topic is made; min.insync.replicas 1 is set on the
    topics created and checked as drift on those made without it."""
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(_registry(token))
    topic = f"mcq.t{token}.telephone"
    admin = AdminClient(settings.kafka.client_config())
    try:
        refused = CliRunner().invoke(
            main, ["topics", "apply", "--registry", str(registry_file)], env={"MCQ_TOPICS__REPLICATION_FACTOR": "2"}
        )
        assert refused.exit_code == 1, refused.output
        [line] = refused.stderr.splitlines()
        assert "topics.replication_factor is 2" in line and "has 1 broker(s)" in line, line
        assert topic not in admin.list_topics(timeout=10).topics

        durable = {"MCQ_TOPICS__REPLICATION_FACTOR": "1", "MCQ_TOPICS__MIN_INSYNC_REPLICAS": "1"}
        made = CliRunner().invoke(main, ["topics", "apply", "--registry", str(registry_file)], env=durable)
        assert made.exit_code in (0, 3), made.output  # the shared system topics may predate the setting
        assert f"created {topic}" in made.output
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        config = next(iter(described.values())).result()
        assert config["min.insync.replicas"].value == "1"

        mis = CliRunner().invoke(
            main, ["topics", "apply", "--registry", str(registry_file)], env={"MCQ_TOPICS__MIN_INSYNC_REPLICAS": "2"}
        )
        assert mis.exit_code == 3, mis.output  # drift: reported, never changed behind the operator's back
        assert f"{topic}: min.insync.replicas: registry 2, cluster 1" in mis.output
    finally:
        delete_topics(settings, [topic])


def test_looking_topics_up_by_name_never_creates_them_on_a_broker_that_auto_creates(
    stack: Stack, settings: Settings, token: str
) -> None:
    """The stack's broker auto-creates a topic a plain client asks about: the listener's
    start, the applied positions' reader and the login check ask by name and must not."""
    from mcq.acl.login import check_login
    from mcq.topics.exceptions import TopicReadError
    from mcq.topics.follow import TopicFollower
    from mcq.topics.named import all_topic_names, metadata_admin, named_topics

    ghost, control = f"mcq.ghost{token}", f"mcq.ghost{token}.control"
    found, cluster = named_topics(metadata_admin(settings), [ghost, "__consumer_offsets"])
    assert list(found) == ["__consumer_offsets"] and cluster is not None and cluster.brokers
    check_login(settings)
    with pytest.raises(TopicReadError, match=f"topic {ghost} is missing"):
        TopicFollower(settings, [ghost], lambda _: None, "ghost-reader", required=True)
    optional = TopicFollower(settings, [ghost], lambda _: None, "ghost-reader")
    assert optional.partitions == []
    optional.close()
    # the control: a plain admin client asking by name makes the broker create the topic
    AdminClient(settings.kafka.client_config()).list_topics(topic=control, timeout=10)
    try:
        names = all_topic_names(settings)
        assert control in names, "the broker did not auto-create: this test proves nothing"
        assert ghost not in names
    finally:
        delete_topics(settings, [control])


def test_records_after_counts_what_a_reader_has_not_read_yet(stack: Stack, settings: Settings, token: str) -> None:
    """What a ``--once`` normaliser run has to read: records at or after a checkpoint's
    offsets (Spark's form: partition as text), a partition it does not name from its
    start, a topic that does not exist as none (and not created by asking)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    from mcq.topics.named import all_topic_names
    from mcq.topics.read import records_after, records_held

    topic, ghost = f"mcq.after{token}", f"mcq.after{token}.ghost"
    admin = AdminClient(settings.kafka.client_config())
    next(iter(admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)]).values())).result()
    try:
        producer = Producer(settings.kafka.client_config())
        for i in range(10):
            producer.produce(topic, value=b"x", partition=0 if i < 7 else 1)
        assert producer.flush(30) == 0
        assert records_held(settings, [topic, ghost]) == 10
        assert records_after(settings, [topic, ghost], {}) == 10
        assert records_after(settings, [topic], {topic: {"0": 4}}) == 3 + 3
        assert records_after(settings, [topic], {topic: {"0": 7, "1": 3}}) == 0
        assert records_after(settings, [topic], {topic: {"0": 99, "1": 1}}) == 2  # past the end: nothing there
        assert ghost not in all_topic_names(settings)
    finally:
        delete_topics(settings, [topic])


def test_how_long_a_topic_keeps_deletes_follows_the_schedules_of_its_listeners_and_apply_brings_it_there(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """A weekday-night listener (runs up to 72 h apart, over a weekend) needs its topic to
    keep deletes 144 h; a nightly one 48 h; `topics diff` shows it, `topics apply` sets it."""
    prefix = f"dr{token}"
    listener = """
listeners:
  - {{name: NIGHTLY, owner: t@example, schedule: "{schedule}", adapter: {{type: file, settings: {{dir: /tmp/x}}}}}}
interests:
  - {{listener: NIGHTLY, tname: T{tname}}}
"""
    path = tmp_path / "registry.yaml"
    env = {"MCQ_TOPIC_PREFIX": prefix}
    topic = f"{prefix}.t{token}.telephone"

    def retention() -> str:
        admin = AdminClient(settings.kafka.client_config())
        found = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        return str(next(iter(found.values())).result()["delete.retention.ms"].value)

    try:
        path.write_text(_registry(token) + listener.format(schedule="0 2 * * *", tname=token.upper()))
        assert CliRunner().invoke(main, ["topics", "apply", "--registry", str(path)], env=env).exit_code == 0
        assert retention() == str(48 * 3600 * 1000)
        path.write_text(_registry(token) + listener.format(schedule="0 2 * * 1-5", tname=token.upper()))
        diff = CliRunner().invoke(main, ["topics", "diff", "--registry", str(path)], env=env)
        assert diff.exit_code == 1, diff.output
        assert f"{topic}: keeps deletes 144 h" in diff.output
        assert f"{topic}: delete.retention.ms: registry {144 * 3600 * 1000}, cluster {48 * 3600 * 1000}" in diff.output
        assert retention() == str(48 * 3600 * 1000)  # a diff changes nothing
        applied = CliRunner().invoke(main, ["topics", "apply", "--registry", str(path)], env=env)
        assert applied.exit_code == 0 and f"altered {topic}: delete.retention.ms" in applied.output, applied.output
        assert retention() == str(144 * 3600 * 1000)
        again = CliRunner().invoke(main, ["topics", "diff", "--registry", str(path)], env=env)
        assert again.exit_code == 0, again.output
    finally:
        reg = parse_registry(_registry(token))
        delete_topics(settings, [s.name for s in plan_topics(reg, prefix)])
