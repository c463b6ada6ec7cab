"""``mcq topics remove``: a retired deployment's topics, consumer groups and Avro subjects
leave Kafka and the schema registry; a running one is refused; another deployment whose
prefix starts with this one stays whole."""

from __future__ import annotations

import uuid

from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from mcq.cli import main as cli
from mcq.config import Settings
from mcq.contract import register_topic, registry_client
from mcq.stack import Stack
from mcq.topics.plan import TopicSpec, apply_topics, delete_topics


def _group_with_offset(settings: Settings, group: str, topic: str) -> Consumer:
    consumer = Consumer({**settings.kafka.client_config(), "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    return consumer


def _registered(settings: Settings, subject: str) -> bool:
    try:
        return bool(registry_client(settings).get_versions(subject))
    except SchemaRegistryError as exc:
        assert exc.http_status_code == 404, exc
        return False


def _state(settings: Settings, prefix: str, subjects: list[str]) -> tuple[set[str], set[str], set[str]]:
    """Topics and groups under ``prefix.``, and which of ``subjects`` are registered (asked
    one by one: Apicurio lists only the first 1,000 subjects)."""
    admin = AdminClient(settings.kafka.client_config())
    topics = {t for t in admin.list_topics(timeout=15).topics if t.startswith(prefix + ".")}
    groups = {g.group_id for g in admin.list_consumer_groups().result().valid if g.group_id.startswith(prefix + ".")}
    return topics, groups, {s for s in subjects if _registered(settings, s)}


def test_topics_remove_takes_a_stopped_deployment_away_and_leaves_a_nested_one_whole(
    stack: Stack, settings: Settings, token: str
) -> None:
    prefix, nested = f"rm{token}", f"rm{token}.nested"
    mine = [f"{prefix}.person.people", f"{prefix}._registry", f"{prefix}.listener.LDAP.applied"]
    theirs = [f"{nested}.person.people", f"{nested}._registry"]
    apply_topics(settings, [TopicSpec(t, 1, {"cleanup.policy": "compact"}) for t in mine + theirs])
    client = registry_client(settings)
    for topic in (mine[0], theirs[0]):
        register_topic(client, topic, "BACKWARD")
    producer = Producer(settings.kafka.client_config())
    for topic in mine + theirs:
        producer.produce(topic, key=b"k", value=b"v")
    producer.flush(30)
    _group_with_offset(settings, f"{prefix}.LDAP", mine[0]).close()
    _group_with_offset(settings, f"{nested}.LDAP", theirs[0]).close()
    env = {"MCQ_TOPIC_PREFIX": prefix}
    # what this machine keeps of it: the default normaliser checkpoint, a listener's snapshot
    assert settings.state_dir is not None
    checkpoint = settings.stack.home / "checkpoints" / f"normalize-{prefix}"
    (checkpoint / "offsets").mkdir(parents=True)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    snapshot, nested_snapshot = (
        settings.state_dir / f"{prefix}.LDAP.applied",
        settings.state_dir / f"{nested}.LDAP.applied",
    )
    snapshot.write_bytes(b"x")
    nested_snapshot.write_bytes(b"x")
    subjects = [f"{t}-{part}" for t in (mine[0], theirs[0]) for part in ("key", "value")]
    try:
        # a member in one of its groups: refused, nothing touched
        live = Consumer({**settings.kafka.client_config(), "group.id": f"{prefix}.LDAP.bulk"})
        live.subscribe([mine[0]])
        for _ in range(120):  # a member once it has its partition
            if live.assignment():
                break
            live.poll(0.5)
        before = _state(settings, prefix, subjects)
        refused = CliRunner().invoke(cli, ["topics", "remove", "--yes"], env=env)
        assert refused.exit_code == 1, refused.output
        assert f"group {prefix}.LDAP.bulk: " in refused.output
        live.close()
        assert _state(settings, prefix, subjects) == before

        listed = CliRunner().invoke(cli, ["topics", "remove"], env=env)
        assert listed.exit_code == 0, listed.output
        assert "nothing removed: run again with --yes" in listed.output
        assert f"topic {mine[0]}" in listed.output and f"subject {mine[0]}-value" in listed.output
        assert f"local checkpoint {checkpoint}" in listed.output and f"local snapshot {snapshot}" in listed.output
        assert nested not in listed.output
        assert _state(settings, prefix, subjects) == before

        done = CliRunner().invoke(cli, ["topics", "remove", "--yes"], env=env)
        assert done.exit_code == 0, done.output
        assert "removed 3 topic(s), 2 consumer group(s), 2 subject(s), 2 local file(s)" in done.output
        assert not checkpoint.exists() and not snapshot.exists() and nested_snapshot.exists()
        topics, groups, registered = _state(settings, prefix, subjects)
        assert topics == set(theirs)
        assert groups == {f"{nested}.LDAP"}
        assert registered == {f"{theirs[0]}-key", f"{theirs[0]}-value"}
        empty = CliRunner().invoke(cli, ["topics", "remove", "--yes"], env=env)
        assert empty.exit_code == 0 and f"nothing under topic prefix '{prefix}'" in empty.output, empty.output
    finally:
        nested_snapshot.unlink(missing_ok=True)
        CliRunner().invoke(cli, ["topics", "remove", "--yes"], env={"MCQ_TOPIC_PREFIX": nested})
        CliRunner().invoke(cli, ["topics", "remove", "--yes"], env=env)
        delete_topics(settings, mine + theirs + [f"x-{uuid.uuid4().hex}"])
