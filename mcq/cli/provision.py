"""``mcq helm values``, ``mcq topics apply``, ``mcq schemas apply``: what a deployment
provisions from the registry (chart values, Kafka topics, Avro schemas)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from mcq.cli.app import (
    EXIT_DOWN,
    EXIT_FAILED,
    FROM_FILE,
    _current_registry,
    _err,
    _load_registry_file,
    _say,
    _settings,
    _stop,
    main,
)


@main.group("helm")
def helm_group() -> None:
    """Kubernetes: values for the Helm chart helm/mcq, generated from the registry."""


@helm_group.command("values")
@click.argument("registry_file", metavar="REGISTRY", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--strimzi",
    is_flag=True,
    help="Also one Strimzi KafkaConnector per source (capture.mode strimzi), configured from the "
    "current settings (MCQ_SOURCE__HOST…) as `mcq connect apply` would.",
)
def helm_values(registry_file: Path, strimzi: bool) -> None:
    """Print the chart values that follow from REGISTRY: the registry itself (applied by the
    chart's setup hook) and every listener (a Deployment or a CronJob with its schedule).

    \b
      mcq helm values registry.yaml > values-registry.yaml
      helm upgrade --install campus helm/mcq -f values-registry.yaml -f my-values.yaml
    """
    from mcq.helm import chart_values, dump_values

    registry = _load_registry_file(registry_file)
    values = chart_values(registry, registry_file.read_text(), _settings(), strimzi=strimzi)
    click.echo(dump_values(values, str(registry_file)), nl=False)


@main.group()
def topics() -> None:
    """Kafka topics: one compacted topic per logical table/subtype, plus system topics."""


@topics.command("apply")
@FROM_FILE
def topics_apply(registry_file: Path | None) -> None:
    """Create missing topics, and bring how long each logical topic keeps deletes
    (delete.retention.ms: twice the longest gap of a scheduled listener reading it, at least
    a day) to the registry's; report any other drift without changing it (exit 3 on drift)."""
    from mcq.topics import TopicSettingsError, apply_topics, plan_topics

    reg = _current_registry(registry_file)
    try:
        result = apply_topics(_settings(), plan_topics(reg, _settings().topic_prefix), alter=True)
    except TopicSettingsError as exc:
        _stop(f"mcq topics apply: {exc}")
    _say(f"{len(result.created)} created, {len(result.unchanged)} unchanged, {len(result.drift)} drifted")
    if result.drift:
        sys.exit(EXIT_DOWN)


@topics.command("diff")
@FROM_FILE
def topics_diff(registry_file: Path | None) -> None:
    """Compare the cluster's topics with what the registry plans, changing nothing: each
    topic missing, and each setting that differs (delete.retention.ms among them: what the
    listeners' schedules need); exit 1 on any difference."""
    from mcq.topics import TopicSettingsError, apply_topics, plan_topics

    reg = _current_registry(registry_file)
    for t in reg.tables:
        _say(f"{t.topic(_settings().topic_prefix)}: keeps deletes {reg.delete_retention_s(t) / 3600:g} h")
    try:
        result = apply_topics(_settings(), plan_topics(reg, _settings().topic_prefix), create=False)
    except TopicSettingsError as exc:
        _stop(f"mcq topics diff: {exc}")
    _say(f"{len(result.unchanged)} as planned, {len(result.drift)} different")
    if result.drift:
        sys.exit(EXIT_FAILED)


@topics.command("remove")
@click.option("--yes", is_flag=True, help="Remove them; without it, only list what would be removed.")
def topics_remove(yes: bool) -> None:
    """Remove this deployment (the topic prefix, MCQ_TOPIC_PREFIX) from Kafka and the schema
    registry: every topic named <prefix>.* (logical topics, the registry store, heartbeats,
    each listener's applied positions, lanes and dead letters), its listeners' consumer
    groups, and the Avro subjects of those topics. Nothing is removed without --yes.

    \b
    Never touched: the raw topics of a capture (mcq.raw.*; `mcq connect remove` retires the
    capture), and another deployment whose prefix starts with this one (it has its own
    <prefix>._registry). Refused while a listener instance of the deployment is alive or a
    consumer group of it has members; stop the normaliser first (it would write on). This
    machine's normaliser checkpoint (the default, under MCQ_HOME) and listener snapshots go
    too: a normaliser started on an old checkpoint would go on from its raw offsets and
    never write again what the removed topics held. Delete a --checkpoint of your own by hand.
    Exit 0 when removed (or a list only), 1 when refused or something could not be removed.
    """
    from confluent_kafka.admin import AdminClient

    from consumers.runtime.heartbeat import read_beats
    from mcq.contract import registry_client
    from mcq.topics import TopicError
    from mcq.topics.listener import heartbeat_listener
    from mcq.topics.remove import busy_groups, holdings, local_files, remove

    settings = _settings()
    prefix = settings.topic_prefix
    admin = AdminClient(settings.kafka.client_config())
    registry = registry_client(settings)
    try:
        held = holdings(admin, registry, prefix)
        if held.empty:
            _say(f"nothing under topic prefix {prefix!r} (raw topics of a capture are never removed here)")
            return
        files = local_files(settings.stack.home, settings.state_dir, held)
        for kind, names in (("topic", held.topics), ("consumer group", held.groups), ("subject", held.subjects)):
            for name in names:
                _say(f"{kind} {name}")
        for path in files:
            _say(f"local {'checkpoint' if path.is_dir() else 'snapshot'} {path}")
        counts = f"{len(held.topics)} topic(s), {len(held.groups)} consumer group(s), {len(held.subjects)} subject(s)"
        counts += f", {len(files)} local file(s)" if files else ""
        alive = [
            f"{b.listener} {b.instance} on {b.host}"
            for topic in held.topics
            if (owner := heartbeat_listener(prefix, topic)) is not None
            for b in read_beats(settings, topic, owner)
            if b.alive()
        ]
        busy = busy_groups(admin, held.groups)
    except TopicError as exc:
        _stop(f"mcq topics remove: {exc}")
    if alive or busy:
        _stop(
            f"mcq topics remove: refused, deployment {prefix!r} is running: "
            + "; ".join([*(f"listener instance {a} is alive" for a in alive), *(f"group {b}" for b in busy)])
            + ". Stop its listeners (and its normaliser), then run this again"
        )
    if not yes:
        _say(f"would remove {counts} of deployment {prefix!r}; nothing removed: run again with --yes")
        return
    errors = remove(admin, registry, held)
    for path in files:
        try:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    for line in errors:
        _err(f"mcq topics remove: {line}")
    if errors:
        _stop(f"mcq topics remove: {len(errors)} of them could not be removed (above); run again to retry")
    _say(f"removed {counts} of deployment {prefix!r}")


# ------------------------------------------------------------------ schemas


@main.group()
def schemas() -> None:
    """Avro schemas of the change key and record in the schema registry."""


@schemas.command("apply")
@FROM_FILE
@click.option(
    "--compatibility",
    type=click.Choice(["BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"]),
    default="BACKWARD",
    show_default=True,
)
def schemas_apply(registry_file: Path | None, compatibility: str) -> None:
    """Register key and value schemas for every logical topic (topic name strategy)."""
    from mcq.contract import SchemaRefused, register_topic, registry_client

    client = registry_client(_settings())
    failed = False
    for table in _current_registry(registry_file).tables:
        try:
            topic = table.topic(_settings().topic_prefix)
            key_id, value_id = register_topic(client, topic, compatibility)  # type: ignore[arg-type]
            _say(f"{topic}: key schema id {key_id}, value schema id {value_id}, {compatibility}")
        except SchemaRefused as exc:
            _err(f"mcq schemas apply: {exc}")
            failed = True
    if failed:
        sys.exit(EXIT_FAILED)
