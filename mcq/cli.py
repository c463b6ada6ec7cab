"""The `mcq` command line.

Exit codes: 0 success; 1 a service or pipeline step failed; 2 bad usage or
configuration (click's own convention); 3 `stack status` found a service down.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from mcq.config import ConfigError, Settings, load_settings
from mcq.output import cell, say
from mcq.registry import Registry, RegistryError, load_registry
from mcq.registry.model import Interest
from mcq.registry.store import RegistryStore
from streams.catchup import CATCH_UP_ABOVE

if TYPE_CHECKING:
    from consumers.runtime.dlq import DeadLetter, DeadLetters
    from mcq.acl.plan import Grant, Principals
    from mcq.stack import Stack

# Commands import what only they use (capture, Connect's client, the stack's services,
# the runtime) inside their functions: every command, a scheduled `mcq listen` run
# included, would otherwise pay for importing all of them (about 0.35 s).

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_DOWN = 3


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        _err(f"mcq: {exc}")
        sys.exit(EXIT_CONFIG)


def _say(line: object) -> None:
    """Print a report line (runtime, stack, demo…): it may quote a target's error or a
    record's value, so it is never read as markup (mcq/output.py)."""
    say(console, line)


def _err(line: object) -> None:
    """Print an error line on stderr, never read as markup."""
    say(err_console, line)


@click.group()
@click.version_option(package_name="meta-change-queue")
def main() -> None:
    """mcq: the Meta Change Queue on Kafka, Debezium and Spark."""
    if console.is_terminal:  # long Spark jobs draw bars on a terminal, write lines elsewhere
        from streams.progress import show_bars

        show_bars(console)


def _check_login(command: str, settings: Settings) -> None:
    """Stop with one line (exit 2) when the broker refuses this process's Kafka login."""
    from mcq.acl.exceptions import LoginRefused
    from mcq.acl.login import check_login

    try:
        check_login(settings)
    except LoginRefused as exc:
        _err(f"{command}: {exc}")
        sys.exit(EXIT_CONFIG)


# ------------------------------------------------------------------ stack


@main.group()
def stack() -> None:
    """The local stack of real services (PostgreSQL, Kafka, Connect, registry, LDAP)."""


def _only(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


ONLY = click.option(
    "--only",
    metavar="SERVICES",
    help="Comma-separated subset: postgres, ldap, kafka, registry, connect.",
)


def _stack(only: str | None) -> Stack:
    from mcq.stack import Stack

    try:
        return Stack(_settings(), only=_only(only))
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="--only") from None


@stack.command()
@ONLY
@click.option(
    "--secure/--plaintext",
    default=None,
    help="Make the stack the secure one (its broker has no port without a login; mcq's clients "
    "use SCRAM over TLS, each process as its own principal) or the quick start's plaintext one; "
    "kept for later commands. Default: as it was.",
)
def up(only: str | None, secure: bool | None) -> None:
    """Start every service that is not running and wait until all are healthy."""
    from mcq.stack import StackError

    if secure is not None and secure != _settings().stack.secure:
        _switch_mode(secure)
    st = _stack(only)
    if st.settings.stack.secure:
        _say(
            f"secure stack: Kafka at {st.settings.kafka.bootstrap_servers} (SASL_SSL, SCRAM-SHA-512); "
            "each process logs in as its own principal once `mcq acl apply` made it"
        )
    try:
        st.up(report=_say)
    except StackError as exc:
        _err(f"mcq stack up: {exc}")
        sys.exit(EXIT_FAILED)


def _switch_mode(secure: bool) -> None:
    """Mark the stack secure or plaintext; its broker must be down (its listeners change)."""
    from mcq.stack import Stack

    settings = _settings()
    kafka = Stack(settings).service("kafka")
    if kafka.handle.pid() is not None:
        mode = "plaintext" if secure else "secure"
        _err(f"mcq stack up: the {mode} stack's Kafka is running; stop it first with `mcq stack down`")
        sys.exit(EXIT_CONFIG)
    settings.stack.set_secure(secure)


@stack.command()
@ONLY
def down(only: str | None) -> None:
    """Stop every service the stack started (and the console beside it); no process is left behind."""
    from mcq.console.local import handle

    st = _stack(only)
    if only is None and handle(st.settings).stop(signal.SIGTERM):
        _say("console: stopped")
    st.down(report=_say)


@stack.command()
@ONLY
def status(only: str | None) -> None:
    """Show each service, its address, pid and whether it is up (exit 3 if any is down)."""
    st = _stack(only)
    rows = st.status()
    table = Table(title=f"mcq stack ({st.settings.stack.home})")
    for col in ("service", "address", "pid", "state", "detail"):
        table.add_column(col)
    for r in rows:
        state = "[green]up[/green]" if r.up else "[red]down[/red]"
        table.add_row(r.name, r.address, str(r.pid or "-"), state, cell(r.detail))
    console.print(table)
    if not all(r.up for r in rows):
        sys.exit(EXIT_DOWN)


@stack.command()
@click.argument("service", required=False)
@click.option("-n", "--lines", default=40, show_default=True, help="Lines to show per log.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the log grows (one service).")
def logs(service: str | None, lines: int, follow: bool) -> None:
    """Show the last lines of a service's log (all services when none is named)."""
    from mcq.stack import Stack

    st = Stack(_settings())
    try:
        chosen = [st.service(service)] if service else list(st)
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="SERVICE") from None
    if follow and len(chosen) != 1:
        raise click.UsageError("--follow needs one SERVICE")
    for svc in chosen:
        console.rule(cell(f"{svc.name}: {svc.handle.log_file}"))
        for line in svc.handle.tail(lines):
            _say(line)
    if follow:
        _follow(chosen[0].handle.log_file)


def _follow(path: Path) -> None:
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        try:
            while True:
                chunk = fh.readline()
                if chunk:
                    _say(chunk.decode(errors="replace").rstrip("\n"))
                else:
                    time.sleep(0.5)
        except KeyboardInterrupt:
            return


# ------------------------------------------------------------------ registry


@main.group()
def registry() -> None:
    """The registry: tables/subtypes, listeners and interests (see examples/campus.yaml)."""


REGISTRY_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))


def _load_registry_file(file: Path) -> Registry:
    try:
        return load_registry(file)
    except RegistryError as exc:
        _err(str(exc))
        sys.exit(EXIT_FAILED)


@registry.command()
@REGISTRY_FILE
def validate(file: Path) -> None:
    """Check a registry file; every problem is one line with file:line (exit 1)."""
    reg = _load_registry_file(file)
    _say(
        f"{file}: valid: {len(reg.sources)} sources, {len(reg.tables)} tables/subtypes, "
        f"{len(reg.listeners)} listeners, {len(reg.interests)} interests"
    )


def _store() -> RegistryStore:
    return RegistryStore(_settings())


@registry.command("apply")
@REGISTRY_FILE
def registry_apply(file: Path) -> None:
    """Publish a registry file to this prefix's store (<MCQ_TOPIC_PREFIX>._registry); running
    processes of the same prefix pick it up."""
    reg = _load_registry_file(file)
    try:
        change = _store().apply(reg)
    except RegistryError as exc:
        _err(f"mcq registry apply: {exc}")
        sys.exit(EXIT_FAILED)
    for line in change.lines() or ["no change"]:
        _say(line)


@registry.command("diff")
@REGISTRY_FILE
def registry_diff(file: Path) -> None:
    """Show what `apply FILE` would change (exit 0 either way)."""
    change = _store().diff(_load_registry_file(file))
    for line in change.lines() or ["no change"]:
        _say(line)


@registry.command("show")
def registry_show() -> None:
    """Show the registry as running processes see it, with first-seen provenance."""
    store = _store()
    reg = store.read()
    if not (reg.sources or reg.tables or reg.listeners):
        _err(
            f"mcq registry show: the store {store.topic} is empty; each topic prefix has its own: "
            f"apply a registry file under MCQ_TOPIC_PREFIX={_settings().topic_prefix}"
        )
    provenance = {p.ref: p for p in store.provenance()}
    tables = Table(title="tables / subtypes")
    for col in ("table/subtype", "topic", "fed by", "first seen"):
        tables.add_column(col)
    for t in reg.tables:
        p = provenance.get(t.ref)
        tables.add_row(
            t.ref,
            t.topic(_settings().topic_prefix),
            ", ".join(f.table for f in t.feeds) or "(explicit log)",
            cell(f"{p.origin} at {p.first_seen}" if p else "-"),
        )
    console.print(tables)
    listeners = Table(title="listeners")
    for col in ("listener", "schedule", "adapter", "owner", "interests"):
        listeners.add_column(col)
    for lst in reg.listeners:
        interests = [_interest_line(i) for i in reg.interests_of(lst.name)]
        listeners.add_row(lst.name, lst.schedule, lst.adapter.type, cell(lst.owner), cell("\n".join(interests)))
    console.print(listeners)


def _interest_line(i: Interest) -> str:
    """One interest as ``registry show`` prints it: table/subtype, rule, allow-list, delay, expiry."""
    parts = [i.tname if i.subtype is None else f"{i.tname}/{i.subtype}"]
    if i.rule:
        parts.append(f"[{i.rule}]")
    if i.columns is not None:
        parts.append(f"columns: {', '.join(i.columns)}")
    if i.delay_s:
        parts.append(f"delay {i.delay_s:g} s")
    if i.expire_after_s:
        parts.append(f"expires after {i.expire_after_s:g} s")
    return " ".join(parts)


# ------------------------------------------------------------------ connect


@main.group("connect")
def connect_group() -> None:
    """Capture: Debezium connectors generated from the registry, driven over Connect's REST API."""


FROM_FILE = click.option(
    "--registry",
    "registry_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Registry file to use instead of the shared registry store.",
)


def _current_registry(registry_file: Path | None) -> Registry:
    if registry_file is not None:
        return _load_registry_file(registry_file)
    try:
        return _store().read()
    except RegistryError as exc:
        _err(f"mcq: reading the registry store: {exc}")
        sys.exit(EXIT_FAILED)


@connect_group.command("render")
@FROM_FILE
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Write <connector>.json files here.")
def connect_render(registry_file: Path | None, out: Path | None) -> None:
    """Print (or write) the connector configuration generated from the registry."""
    from mcq.capture.connector import render

    configs = render(_current_registry(registry_file), _settings())
    if out is None:
        console.print_json(json.dumps(configs))
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, config in configs.items():
        (out / f"{name}.json").write_text(json.dumps(config, indent=2) + "\n")
        _say(f"wrote {out / f'{name}.json'}")


@connect_group.command("apply")
@FROM_FILE
@click.option(
    "--prepare-only",
    is_flag=True,
    help="Prepare the source (outbox functions, replica identity) but leave the connectors to "
    "another manager (Strimzi KafkaConnector resources: `mcq helm values --strimzi`).",
)
def connect_apply(registry_file: Path | None, prepare_only: bool) -> None:
    """Install the outbox functions and create/update every source connector; wait until RUNNING."""
    from mcq.capture.apply import CaptureError, apply_capture
    from mcq.connect_rest import ConnectError

    try:
        apply_capture(_current_registry(registry_file), _settings(), report=_say, connectors=not prepare_only)
    except (ConnectError, CaptureError) as exc:
        _err(f"mcq connect apply: {exc}")
        sys.exit(EXIT_FAILED)


@connect_group.command("status")
@FROM_FILE
def connect_status(registry_file: Path | None) -> None:
    """Show every connector and task state, and the replication slot of every source:
    exit 3 when a connector of the registry's sources is missing, not RUNNING or has no
    task, 1 when a slot is missing, lost its WAL, or holds more WAL than
    connect.slot_retained_warn_mb (one line each on stderr, saying what to do).
    Connectors of other registries on the same worker are listed, not judged."""
    from mcq.capture.connector import connector_name
    from mcq.capture.slots import MB, SlotReadError, slot_alerts, slot_states
    from mcq.connect_rest import ConnectClient

    settings = _settings()
    registry = _current_registry(registry_file)
    try:
        slots = slot_states(settings, registry)
    except SlotReadError as exc:
        _err(f"mcq connect status: {exc}")
        sys.exit(EXIT_FAILED)
    ours = {connector_name(source) for source in registry.sources}
    table = Table(title=f"connectors at {settings.connect.url}")
    for col in ("connector", "state", "tasks", "trace"):
        table.add_column(col)
    healthy = True
    with ConnectClient(settings.connect) as client:
        for name in sorted(set(client.connectors()) | ours):
            st = client.status(name) or {"connector": {"state": "MISSING"}, "tasks": []}
            tasks = st.get("tasks", [])
            states = [st["connector"]["state"], *(t.get("state") for t in tasks)]
            trace = next((t.get("trace", "").splitlines()[0] for t in tasks if t.get("trace")), "")
            if not tasks and st["connector"]["state"] == "RUNNING":
                trace = "no task: nothing is captured (`mcq connect restart`)"
            if name in ours:  # another registry's connectors are shown, not judged
                healthy &= bool(tasks) and all(s == "RUNNING" for s in states)
            else:
                name = f"{name} (not in this registry)"
            table.add_row(name, st["connector"]["state"], ", ".join(str(t.get("state")) for t in tasks), cell(trace))
    console.print(table)
    slot_table = Table(title=f"replication slots at {settings.source}")
    for col in ("source", "slot", "active", "wal status", "WAL held", "unconfirmed"):
        slot_table.add_column(col)
    for sl in slots:
        slot_table.add_row(
            sl.source, sl.slot, "yes" if sl.active else "no" if sl.exists else "MISSING", sl.wal_status or "-",
            f"{sl.retained_bytes / MB:,.1f} MB", f"{sl.behind_bytes / MB:,.1f} MB",
        )  # fmt: skip
    console.print(slot_table)
    alerts = slot_alerts(slots, settings.connect.slot_retained_warn_mb)
    for line in alerts:
        _err(f"mcq connect status: {line}")
    if not healthy:
        sys.exit(EXIT_DOWN)
    if alerts:
        sys.exit(EXIT_FAILED)


@connect_group.command("restart")
@click.argument("name", required=False)
def connect_restart(name: str | None) -> None:
    """Restart a connector and its tasks (all mcq connectors when NAME is omitted)."""
    from mcq.connect_rest import ConnectClient

    with ConnectClient(_settings().connect) as client:
        names = [name] if name else [n for n in client.connectors() if n.startswith("mcq-source-")]
        for n in names:
            client.restart(n)
            client.wait_running(n)
            _say(f"{n}: restarted, RUNNING")


@connect_group.command("remove")
@click.argument("source", required=False)
@FROM_FILE
def connect_remove(source: str | None, registry_file: Path | None) -> None:
    """Remove SOURCE's capture (every source of the registry when omitted): delete its
    connector and its stored offsets, drop its replication slot and publication.

    Raw and logical topics and the outbox stay. Removing what is gone is a no-op."""
    from mcq.capture.apply import CaptureError
    from mcq.capture.remove import remove_capture
    from mcq.connect_rest import ConnectError

    reg = _current_registry(registry_file)
    chosen = [s for s in reg.sources if source is None or s.name == source]
    if source is not None and not chosen:
        known = ", ".join(s.name for s in reg.sources) or "none"
        _err(f"mcq connect remove: no source named {source} in the registry (known: {known})")
        sys.exit(EXIT_CONFIG)
    try:
        remove_capture(chosen, _settings(), report=_say)
    except (ConnectError, CaptureError) as exc:
        _err(f"mcq connect remove: {exc}")
        sys.exit(EXIT_FAILED)


# ------------------------------------------------------------------ topics


@main.group("acl")
def acl_group() -> None:
    """Kafka ACLs derived from the registry: each identity gets only what it needs."""


def _acl_plan(settings: Settings, registry_file: Path | None) -> tuple[list[Grant], Principals]:
    from mcq.acl.plan import Principals, plan_acls

    registry = _current_registry(registry_file)
    principals = Principals.of(settings, registry)
    return plan_acls(registry, principals), principals


@acl_group.command("plan")
@FROM_FILE
def acl_plan(registry_file: Path | None) -> None:
    """Show every ACL the registry's identities need, one per line with why (nothing is
    read from the broker)."""
    grants, principals = _acl_plan(_settings(), registry_file)
    for g in grants:
        _say(f"{g.line()}  ({g.why})")
    _say(f"{len(grants)} ACLs for {len(principals.all())} principals")


def _acl_call(verb: str, apply: bool, registry_file: Path | None) -> None:
    from mcq.acl.cluster import AclAdmin
    from mcq.acl.exceptions import AclError, AclUnsupported
    from mcq.acl.users import make_local_users

    settings = _settings()
    grants, principals = _acl_plan(settings, registry_file)
    try:
        admin = AclAdmin(settings)
        if apply and settings.local_identities:
            for user in make_local_users(settings, principals, admin.admin):
                _say(f"{user}: SCRAM-SHA-512 user made (the secure local stack's password for it)")
        drift = admin.apply(grants, principals) if apply else admin.diff(grants, principals)
    except AclUnsupported as exc:
        _err(f"mcq acl {verb}: {exc}")
        sys.exit(EXIT_CONFIG)
    except AclError as exc:
        _err(f"mcq acl {verb}: {exc}")
        sys.exit(EXIT_FAILED)
    for line in drift.lines(applied=apply):
        _say(line)
    if not drift:
        _say(f"no drift: the broker holds exactly the {len(grants)} ACLs of the plan")
    elif not apply:
        sys.exit(EXIT_FAILED)


@acl_group.command("diff")
@FROM_FILE
def acl_diff(registry_file: Path | None) -> None:
    """Compare the broker's ACLs of mcq's principals with the plan (exit 1 on drift)."""
    _acl_call("diff", False, registry_file)


@acl_group.command("apply")
@FROM_FILE
def acl_apply(registry_file: Path | None) -> None:
    """Create the missing ACLs and delete the extra ones of mcq's principals; nothing else."""
    _acl_call("apply", True, registry_file)


@acl_group.command("user")
@click.argument("user")
@click.option(
    "--password-env",
    metavar="VAR",
    help="Read the password from this environment variable (default: asked for, not echoed).",
)
def acl_user(user: str, password_env: str | None) -> None:
    """Create SCRAM-SHA-512 user USER on the broker, or change its password."""
    from mcq.acl.exceptions import AclError
    from mcq.acl.users import set_scram_user

    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise click.BadParameter(f"{password_env} is not set or empty", param_hint="--password-env")
    else:
        password = click.prompt(f"password for {user}", hide_input=True, confirmation_prompt=True)
    try:
        set_scram_user(_settings(), user, password)
    except AclError as exc:
        _err(f"mcq acl user: {exc}")
        sys.exit(EXIT_FAILED)
    _say(f"{user}: SCRAM-SHA-512 credentials set")


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
    """Create missing topics; report drift from the registry without changing it (exit 3 on drift)."""
    from mcq.topics import TopicSettingsError, apply_topics, plan_topics

    reg = _current_registry(registry_file)
    try:
        result = apply_topics(_settings(), plan_topics(reg, _settings().topic_prefix), report=_say)
    except TopicSettingsError as exc:
        _err(f"mcq topics apply: {exc}")
        sys.exit(EXIT_FAILED)
    _say(f"{len(result.created)} created, {len(result.unchanged)} unchanged, {len(result.drift)} drifted")
    if result.drift:
        sys.exit(EXIT_DOWN)


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


# ------------------------------------------------------------------ streams


DEFAULT_HTTP_PORT = 8080  # a listener's health endpoint
NORMALIZE_HTTP_PORT = 8090  # the normaliser's


def _health_port(given: int | None, no_http: bool, one_off: bool, default: int = DEFAULT_HTTP_PORT) -> int | None:
    """The health endpoint's port, None for none: a one-off run (a cron catch-up, a
    normaliser --once) is over before a probe would ask, so it serves one only when a
    port is asked for."""
    if no_http or (given is None and one_off):
        return None
    return default if given is None else given


def health_options(default: int, one_off: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--http-host``, ``--http-port`` and ``--no-http`` of a long-running command."""

    def add(command: Callable[..., None]) -> Callable[..., None]:
        command = click.option("--no-http", is_flag=True, help="Serve no health or metrics endpoint.")(command)
        command = click.option(
            "--http-port",
            type=click.IntRange(min=0, max=65535),
            help=f"Port of the health endpoint (default {default}; 0 picks a free port). "
            f"{one_off} serves none unless this is given.",
        )(command)
        return click.option(
            "--http-host",
            default="127.0.0.1",
            show_default=True,
            help="Address of /livez, /readyz and /metrics (0.0.0.0: every interface, e.g. in a pod).",
        )(command)

    return add


@main.group()
def streams() -> None:
    """Spark jobs: the normaliser (raw CDC topics -> compacted logical topics)."""


@streams.command("normalize")
@FROM_FILE
@click.option("--once", is_flag=True, help="Process what is available in micro-batches, then exit 0.")
@click.option(
    "--mode",
    type=click.Choice(["realtime", "microbatch"]),
    default="realtime",
    show_default=True,
    help="Continuous run: Spark's Real-Time Mode (each change as it arrives) or micro-batches.",
)
@click.option(
    "--trigger",
    default="1 second",
    show_default=True,
    help="Micro-batch interval (microbatch mode; in realtime mode, of the query ordering keys fed by two tables).",
)
@click.option(
    "--checkpoint-interval",
    default="5 minutes",
    show_default=True,
    help="Realtime mode: how often progress is checkpointed (not a latency; BENCHMARKS.md).",
)
@click.option(
    "--checkpoint",
    type=click.Path(file_okay=False, path_type=Path),
    help="Checkpoint directory (default MCQ_HOME/checkpoints/normalize-<prefix>).",
)
@click.option(
    "--catch-up-above",
    type=click.IntRange(min=0),
    default=CATCH_UP_ABOVE,
    show_default=True,
    help="Realtime mode, first start under a checkpoint: with more raw records waiting, drain them in "
    "micro-batches first, then start real time where they ended (0: always).",
)
@click.option("--master", help="Spark master (default: MCQ_SPARK_MASTER, spark-submit's, or local[*]).")
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), help="Cap a micro-batch's size.")
@click.option(
    "--accept-lost-raw",
    is_flag=True,
    help="Go on past raw records deleted (retention) before they were read; only after refreshing the "
    "listeners from the source, as the error naming them says.",
)
@health_options(NORMALIZE_HTTP_PORT, "A --once run")
def streams_normalize(
    registry_file: Path | None,
    once: bool,
    mode: str,
    trigger: str,
    checkpoint_interval: str,
    checkpoint: Path | None,
    catch_up_above: int,
    master: str | None,
    max_offsets_per_trigger: int | None,
    accept_lost_raw: bool,
    http_host: str,
    http_port: int | None,
    no_http: bool,
) -> None:
    """Normalise raw Debezium topics into the compacted logical topics of the registry.

    Exit 0 when stopped (SIGTERM/SIGINT) or, with --once, caught up; 1 when the stream
    failed (raw records deleted before they were read included: the line says how to
    repair); 2 for bad options."""
    from mcq.contract import SchemaRefused
    from mcq.health import HealthAddressTaken
    from mcq.topics import TopicSettingsError
    from streams.normalize import NormalizeError, run_normalize
    from streams.realtime import interval_ms

    try:
        interval_ms(checkpoint_interval)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--checkpoint-interval") from None
    settings = _settings().for_normaliser()
    port = _health_port(http_port, no_http, once, NORMALIZE_HTTP_PORT)
    _check_login("mcq streams normalize", settings)
    try:
        run_normalize(
            settings,
            _current_registry(registry_file),
            once=once,
            trigger=trigger,
            checkpoint=checkpoint,
            master=master,
            max_offsets_per_trigger=max_offsets_per_trigger,
            report=_say,
            mode=mode,
            checkpoint_interval=checkpoint_interval,
            accept_lost_raw=accept_lost_raw,
            health=None if port is None else (http_host, port),
            catch_up_above=catch_up_above,
        )
    except HealthAddressTaken as exc:
        _err(f"mcq streams normalize: {exc}; choose another with --http-port (0: any free port) or --no-http")
        sys.exit(EXIT_CONFIG)
    except (SchemaRefused, NormalizeError) as exc:
        _err(f"mcq streams normalize: {exc}")
        sys.exit(EXIT_FAILED)
    except TopicSettingsError as exc:
        _err(f"mcq streams normalize: {exc}")
        sys.exit(EXIT_CONFIG)
    except KeyboardInterrupt:
        _say("normalize: stopped")


# ------------------------------------------------------------------ listeners


@main.command("listen")
@click.argument("name")
@FROM_FILE
@click.option("--until-caught-up", is_flag=True, help="Handle what is pending now, then exit 0 (a cron catch-up run).")
@health_options(DEFAULT_HTTP_PORT, "An --until-caught-up run")
def listen(
    name: str,
    registry_file: Path | None,
    until_caught_up: bool,
    http_host: str,
    http_port: int | None,
    no_http: bool,
) -> None:
    """Run listener NAME: apply the changes it is interested in, commit as they are accepted.

    Stops on SIGTERM/SIGINT after the batch in flight. Exit 0 when stopped or caught up,
    1 when the runtime failed, 2 for a listener or adapter that cannot run as configured
    (a health port already taken included)."""
    from consumers.exceptions import ConsumerError, ListenerConfigError
    from consumers.runtime.health import HealthAddressTaken
    from consumers.runtime.listener import ListenerRuntime, stop_on_signals
    from mcq.contract import SchemaRefused
    from mcq.topics.read import TopicReadError

    settings = _settings().for_listener(name)
    registry = _load_registry_file(registry_file) if registry_file else None
    _check_login(f"mcq listen: {name}", settings)
    try:
        runtime = ListenerRuntime(
            settings,
            name,
            registry=registry,
            http_host=http_host,
            http_port=_health_port(http_port, no_http, until_caught_up),
            report=_say,
        )
        with stop_on_signals(runtime):
            sys.exit(runtime.run(until_caught_up=until_caught_up))
    except HealthAddressTaken as exc:
        _err(f"mcq listen: {name}: {exc}; choose another with --http-port (0: any free port) or --no-http")
        sys.exit(EXIT_CONFIG)
    except ListenerConfigError as exc:
        _err(f"mcq listen: {exc}")
        sys.exit(EXIT_CONFIG)
    except (ConsumerError, RegistryError, SchemaRefused, TopicReadError) as exc:
        _err(f"mcq listen: {exc}")
        sys.exit(EXIT_FAILED)


@contextmanager
def _moving_groups(verb: str) -> Iterator[None]:
    """The errors of a command that moves a stopped listener's groups: a listener, time or
    file that is not right exits 2; a running listener (it names the instances) or a
    Kafka failure exits 1."""
    from consumers.exceptions import ConsumerError, ListenerConfigError

    try:
        yield
    except ListenerConfigError as exc:
        _err(f"mcq {verb}: {exc}")
        sys.exit(EXIT_CONFIG)
    except ConsumerError as exc:
        _err(f"mcq {exc}")
        sys.exit(EXIT_FAILED)


def _replay_point(value: str) -> str | int | Path:
    """``earliest``, an offsets file, or an ISO 8601 time (UTC when it names no zone) in ms."""
    from datetime import UTC, datetime

    if value == "earliest":
        return value
    path = Path(value)
    if path.is_file():
        return path
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither 'earliest', an ISO 8601 time (2026-11-24T06:00:00Z) nor an existing offsets file",
            param_hint="--from",
        ) from None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1000)


@main.command("replay")
@click.argument("name")
@click.option(
    "--from",
    "since",
    required=True,
    metavar="earliest|TIME|OFFSETS-FILE",
    help="Replay from the first record, from the first record at or after an ISO 8601 time (UTC unless it "
    "names a zone), or from the offsets a file names (topic,partition,offset per line).",
)
@FROM_FILE
@click.option("--dry-run", is_flag=True, help="Show what would be moved and reset; change nothing.")
def replay(name: str, since: str, registry_file: Path | None, dry_run: bool) -> None:
    """Apply again what listener NAME applied from a point on (after a target was restored
    from a backup, say): move its real-time consumer group back on its logical topics and
    reset its applied positions for their keys, so every replayed change is applied again
    (idempotently). The retry and bulk lanes are left as they are.

    Refused while an instance of NAME runs (exit 1, naming the instances); exit 2 for a
    listener, time or offsets file that is not right, naming what and where."""
    from consumers.runtime.replay import Replay

    point = _replay_point(since)
    with _moving_groups("replay"):
        job = Replay(_settings(), _current_registry(registry_file), name, report=_say)
        plan = job.plan(point)
        for line in plan.lines():
            _say(f"replay {name}: {line}")
        if dry_run:
            _say(f"replay {name}: dry run: nothing changed")
            return
        job.apply(plan)
    _say(
        f"replay {name}: {len(plan.offsets)} partition(s) moved back, {len(plan.keys):,} applied positions reset; "
        f"the next run (mcq listen {name}) applies them again"
    )


@main.command("flush")
@click.argument("name")
@click.option(
    "--before",
    metavar="TIME",
    help="Skip only what was written before this ISO 8601 time (UTC unless it names a zone); all pending when omitted.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File of the skipped records (JSON Lines); default $MCQ_HOME/flushed/<prefix>.NAME.<time>.jsonl.",
)
@FROM_FILE
@click.option("--dry-run", is_flag=True, help="Show what would be skipped; change nothing.")
@click.option("--yes", is_flag=True, help="Skip them: the listener never applies them (their keys' next changes are).")
def flush(
    name: str, before: str | None, out: Path | None, registry_file: Path | None, dry_run: bool, yes: bool
) -> None:
    """Skip what listener NAME has pending (the MCQ paper's flush): every skipped record is
    written to a file first, a skipped parked change's key is unblocked, then the
    listener's consumer groups move past them.

    Refused while an instance of NAME runs (exit 1, naming the instances); without --yes
    (or --dry-run) nothing is done (exit 2)."""
    from datetime import UTC, datetime

    from consumers.runtime.flush import Flush

    before_ms = None
    if before is not None:
        point = _replay_point(before)
        if not isinstance(point, int):
            raise click.BadParameter(f"{before!r} is not an ISO 8601 time", param_hint="--before")
        before_ms = point
    settings = _settings()
    with _moving_groups("flush"):
        job = Flush(settings, _current_registry(registry_file), name, report=_say)
        plan = job.plan(before_ms)
        for line in plan.lines():
            _say(f"flush {name}: {line}")
        if dry_run:
            _say(f"flush {name}: dry run: nothing changed")
            return
        if not plan.moves:
            return
        if not yes:
            _err(
                f"mcq flush: {name}: {plan.pending:,} pending record(s) would never be applied; add --yes to skip them"
            )
            sys.exit(EXIT_CONFIG)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        target = out or settings.stack.home / "flushed" / f"{settings.topic_prefix}.{name}.{stamp}.jsonl"
        written = job.apply(plan, target)
    _say(f"flush {name}: skipped {written:,} record(s), written to {target}")


@main.command("refresh")
@click.argument("name")
@click.option("--tname", help="Only this logical table (default: every table of the listener's interests).")
@click.option("--subtype", help="Only this subtype of --tname.")
@click.option("--where", metavar="RULE", help="Only states that pass this rule (the registry's rule language).")
@click.option(
    "--keys",
    "keys_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Only these keys: CSV with a header row of key fields, or JSON Lines; a key may be partial.",
)
@click.option(
    "--from",
    "origin",
    type=click.Choice(["topics", "source"]),
    default="topics",
    show_default=True,
    help="Read the state from the compacted logical topics, or from the source database (JDBC).",
)
@FROM_FILE
@click.option("--master", help="Spark master (default: MCQ_SPARK_MASTER, spark-submit's, or local[*]).")
@click.option("--dry-run", is_flag=True, help="Count what would be sent, per table, with examples; send nothing.")
def refresh(
    name: str,
    tname: str | None,
    subtype: str | None,
    where: str | None,
    keys_file: Path | None,
    origin: str,
    registry_file: Path | None,
    master: str | None,
    dry_run: bool,
) -> None:
    """Send the current state of the selected objects to listener NAME only (its bulk lane;
    other listeners see nothing): a Spark job over the compacted logical topics, or with
    --from source over the source tables that feed them (every row as its change record
    would carry it, at the database's current WAL position).

    A key without state is sent as a delete when the listener's target holds it (a whole
    table, or a key list that covers it) or when a key list names it whole. The listener
    applies the bulk lane while its real-time lane is idle. Exit 2 for an unknown listener
    or table, a rule that does not parse or a bad key file line (nothing is sent), 1 when
    the job fails."""
    from streams.refresh import Refresh, listener_tables
    from streams.selection import SelectionError, selection
    from streams.session import SparkSetupError, spark_session
    from streams.source_state import SourceReadError

    settings = _settings()
    registry = _current_registry(registry_file)
    try:
        chosen = selection(listener_tables(registry, name), tname, subtype, where, keys_file)
        job = Refresh(settings, registry, name, chosen, report=_say, from_source=origin == "source")
    except SelectionError as exc:
        _err(f"mcq refresh: {name}: {exc}")
        sys.exit(EXIT_CONFIG)
    try:
        spark = spark_session(settings, f"mcq-refresh-{name}", master)
        summary = job.run(spark, dry_run=dry_run)
    except (SparkSetupError, SourceReadError) as exc:
        _err(f"mcq refresh: {name}: {exc}")
        sys.exit(EXIT_FAILED)
    except Exception as exc:  # a Spark or Kafka failure: one line, not a JVM stack trace
        _err(f"mcq refresh: {name}: the job failed: {_first_line(exc)}")
        sys.exit(EXIT_FAILED)
    for line in summary.lines():
        _say(f"refresh {name}: {line}")
    if dry_run:
        _say(f"refresh {name}: dry run: nothing sent ({summary.total:,} record(s) would be; {summary.seconds:.1f} s)")
    else:
        _say(
            f"refresh {name}: {summary.total:,} record(s) sent to {summary.topic} in {summary.seconds:.1f} s; "
            f"the listener applies them while its real-time lane is idle"
        )


@main.command("reconcile")
@click.argument("name")
@click.option("--repair", is_flag=True, help="Refresh exactly the drifted objects' keys into the listener's bulk lane.")
@click.option(
    "--report",
    "report_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write every drifted object, with what it should hold and what it holds, to this JSON file.",
)
@FROM_FILE
@click.option("--master", help="Spark master (default: MCQ_SPARK_MASTER, spark-submit's, or local[*]).")
def reconcile(
    name: str, repair: bool, report_file: Path | None, registry_file: Path | None, master: str | None
) -> None:
    """Compare listener NAME's target with the last state it should hold (a Spark job over
    the compacted logical topics, through the listener's rules and column allow-lists,
    against the target read back): missing, extra and different objects, with examples.

    Exit 0 when the target holds what it should (or --repair sent the repair), 1 when it
    drifted (or the job failed), 2 for an unknown listener or a target that cannot be
    read back (table, ldap, file and sql_import targets can)."""
    from consumers.exceptions import ListenerConfigError, TargetUnavailable
    from streams.reconcile import Reconcile
    from streams.selection import SelectionError
    from streams.session import SparkSetupError, spark_session

    settings = _settings()
    registry = _current_registry(registry_file)
    try:
        job = Reconcile(settings, registry, name, report=_say)
    except (SelectionError, ListenerConfigError) as exc:
        _err(f"mcq reconcile: {name}: {exc}")
        sys.exit(EXIT_CONFIG)
    try:
        spark = spark_session(settings, f"mcq-reconcile-{name}", master)
        drift = job.run(spark)
        for line in drift.lines():
            _say(f"reconcile {name}: {line}")
        if report_file is not None:
            drift.write(report_file)
            _say(f"reconcile {name}: report written to {report_file}")
        if drift.total and repair:
            sent = job.repair(spark, drift)
            _say(
                f"reconcile {name}: repair: {sent.total:,} record(s) for {drift.total:,} drifted object(s) sent to "
                f"{sent.topic}; the listener applies them while its real-time lane is idle"
            )
            return
    except SparkSetupError as exc:
        _err(f"mcq reconcile: {exc}")
        sys.exit(EXIT_FAILED)
    except TargetUnavailable as exc:
        _err(f"mcq reconcile: {name}: the target cannot be read: {exc}")
        sys.exit(EXIT_FAILED)
    except Exception as exc:  # a Spark or Kafka failure: one line, not a JVM stack trace
        _err(f"mcq reconcile: {name}: the job failed: {_first_line(exc)}")
        sys.exit(EXIT_FAILED)
    if drift.total:
        sys.exit(EXIT_FAILED)


@main.command("report")
@click.option("--since", default="7d", show_default=True, help="The period: 7d, 24h, 90m, or an ISO 8601 time.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The HTML file (its CSV files beside it); default $MCQ_HOME/reports/<prefix>-report.html, "
    "which the console links to.",
)
@FROM_FILE
@click.option("--master", help="Spark master (default: MCQ_SPARK_MASTER, spark-submit's, or local[*]).")
def report_command(since: str, out: Path | None, registry_file: Path | None, master: str | None) -> None:
    """A report to put in front of a manager, computed by Spark over the topics: changes per
    day per table/subtype and per listener, commit-to-applied latency percentiles, the
    average wait in the bulk lane, dead letters per day by reason. One self-contained HTML
    file (plots embedded, opens offline) and the same figures as CSV.

    Exit 0 when written, 1 when the job failed, 2 for a --since it cannot read."""
    from streams.progress import stage_progress
    from streams.report import ReportError, compute, since_time
    from streams.report_render import default_report, write
    from streams.session import SparkSetupError, spark_session

    try:
        start = since_time(since)
    except ReportError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    settings = _settings()
    registry = _current_registry(registry_file)
    target = out or default_report(settings)
    try:
        spark = spark_session(settings, "mcq-report", master)
        with stage_progress(spark, "report", _say):
            figures = compute(spark, settings, registry, start, _say)
        written = write(figures, target)
    except SparkSetupError as exc:
        _err(f"mcq report: {exc}")
        sys.exit(EXIT_FAILED)
    except Exception as exc:  # a Spark or Kafka failure: one line, not a JVM stack trace
        _err(f"mcq report: the job failed: {_first_line(exc)}")
        sys.exit(EXIT_FAILED)
    total = sum(n for _, _, n in figures.changes)
    _say(f"report: {total:,} change(s) since {start:%Y-%m-%d %H:%M} UTC, in {figures.seconds:.1f} s")
    for path in written:
        _say(f"report: wrote {path}")


@main.command("rebuild")
@click.argument("name")
@click.option(
    "--truncate", is_flag=True, help="A table target: empty it first (faster; readers wait until it commits)."
)
@FROM_FILE
@click.option("--master", help="Spark master (default: MCQ_SPARK_MASTER, spark-submit's, or local[*]).")
@click.option("--dry-run", is_flag=True, help="Count the live states that would be loaded; change nothing.")
def rebuild(name: str, truncate: bool, registry_file: Path | None, master: str | None, dry_run: bool) -> None:
    """Rebuild stopped listener NAME's target from the compacted logical topics in a Spark
    job, without consuming them through Kafka: a table target by COPY in one transaction,
    any other through its adapter (what it holds beyond the states removed where it can be
    read back). The listener's applied positions follow, and its group moves to the
    offsets the rebuild read up to: what is committed meanwhile is applied by its next run.

    Refused while an instance of NAME runs (exit 1, naming the instances); exit 2 for an
    unknown listener or --truncate on a target that is not a table; 1 when the job fails
    (the listener's offsets are then left where they were)."""
    from consumers.exceptions import ConsumerError, TargetUnavailable
    from streams.rebuild import Rebuild
    from streams.session import SparkSetupError, spark_session

    settings = _settings()
    registry = _current_registry(registry_file)
    with _moving_groups("rebuild"):
        job = Rebuild(settings, registry, name, truncate, report=_say)
        job.groups.refuse_while_running("rebuild")
        try:
            spark = spark_session(settings, f"mcq-rebuild-{name}", master)
            summary = job.run(spark, dry_run=dry_run)
        except (SparkSetupError, TargetUnavailable) as exc:
            _err(f"mcq rebuild: {name}: {exc}")
            sys.exit(EXIT_FAILED)
        except ConsumerError:
            raise  # a running listener, a refused change...: said by _moving_groups
        except Exception as exc:  # a Spark or Kafka failure: one line, not a JVM stack trace
            _err(f"mcq rebuild: {name}: the job failed: {_first_line(exc)}; the listener's offsets were not moved")
            sys.exit(EXIT_FAILED)
    for line in summary.lines():
        _say(f"rebuild {name}: {line}")
    if not dry_run:
        _say(f"rebuild {name}: done; the next run (mcq listen {name}) goes on from where the rebuild read up to")


def _refuse_unknown(verb: str, registry: Registry, names: tuple[str, ...]) -> None:
    """Exit 2 with one line when a listener named on the command line is not in the registry."""
    unknown = [n for n in names if registry.listener(n) is None]
    if unknown:
        _err(f"mcq {verb}: no listener named {', '.join(unknown)} in the registry")
        sys.exit(EXIT_CONFIG)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@main.command("purge")
@click.argument("names", nargs=-1)
@click.option(
    "--gone-after",
    type=click.FloatRange(min=0),
    default=24.0,
    show_default=True,
    help="Hours since an instance's last heartbeat before it counts as gone.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory of the files of what is removed (JSON Lines); default $MCQ_HOME/purged.",
)
@FROM_FILE
@click.option("--dry-run", is_flag=True, help="Show what would be removed; remove nothing.")
def purge(
    names: tuple[str, ...], gone_after: float, out: Path | None, registry_file: Path | None, dry_run: bool
) -> None:
    """Apply retention for stopped listeners NAMES (default: every listener): resolved dead
    letters older than delivery.dead_letter_retention_days, applied positions of keys
    deleted longer ago than their topic keeps deletes, heartbeats of instances gone.
    Everything removed is written to a file first; unresolved dead letters are kept.

    A running listener is skipped with one line on stderr (exit 1 at the end); exit 2 for
    an unknown listener."""
    from datetime import UTC, datetime

    from consumers.exceptions import ConsumerError
    from consumers.runtime.purge import Purge

    settings = _settings()
    registry = _current_registry(registry_file)
    _refuse_unknown("purge", registry, names)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    failed = False
    for name in names or tuple(li.name for li in registry.listeners):
        try:
            job = Purge(settings, registry, name, report=_say, gone_after_s=gone_after * 3600)
            plan = job.plan()
            for line in plan.lines():
                _say(f"purge {name}: {line}")
            if dry_run or not plan.total:
                continue
            target = (out or settings.stack.home / "purged") / f"{settings.topic_prefix}.{name}.{stamp}.jsonl"
            removed = job.apply(plan, target)
            _say(f"purge {name}: removed {removed:,}, written to {target}")
        except ConsumerError as exc:
            _err(f"mcq {exc}")
            failed = True
    if dry_run:
        _say("purge: dry run: nothing removed")
    if failed:
        sys.exit(EXIT_FAILED)


@main.command("status")
@click.argument("names", nargs=-1)
@FROM_FILE
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def listeners_status(names: tuple[str, ...], registry_file: Path | None, as_json: bool) -> None:
    """Process monitor: per listener, instances alive, pending changes, oldest pending, counts.

    Exits 1 when a listener is DEAD (real-time, no live instance), STUCK (its oldest
    pending change is older than its limit), holds as many unresolved dead letters as
    its delivery.alert_after_dead_letters (one line each on stderr, naming the command
    that lists them), or has changes waiting (or that waited, until the refresh is
    applied) on a logical topic longer than the topic keeps deletes (delete.retention.ms:
    one line each on stderr, naming the refresh that repairs its target), so cron or a
    probe can alert."""
    from consumers.exceptions import DeadLetterError
    from consumers.runtime.status import status_report

    settings = _settings()
    registry = _current_registry(registry_file)
    _refuse_unknown("status", registry, names)
    from mcq.topics.read import TopicReadError

    try:
        report = status_report(settings, registry, list(names) or None)
    except (TopicReadError, DeadLetterError) as exc:
        _err(f"mcq status: {exc}")
        sys.exit(EXIT_FAILED)
    if as_json:
        console.print_json(
            json.dumps(
                [
                    {
                        "listener": r.name,
                        "schedule": r.schedule,
                        "verdict": r.verdict,
                        "reason": r.reason,
                        "instances_alive": len(r.alive),
                        "last_heartbeat": r.last_heartbeat,
                        "pending": r.pending,
                        "oldest_pending_age_s": r.oldest_pending_age_s,
                        "pending_by_topic": {x.topic: x.pending for x in r.lags if x.pending},
                        "counters": r.counters,
                        "failed": r.failed,
                        "dead_letters": r.dead_letters,
                        "alert_after_dead_letters": r.alert_after_dead_letters,
                        "alert": r.dead_letter_alert,
                        "tombstones_at_risk": r.tombstones_at_risk,
                    }
                    for r in report
                ]
            )
        )
    else:
        table = Table(
            "listener",
            "verdict",
            "alive",
            "last beat",
            "pending",
            "oldest",
            "applied",
            "parked",
            "failed",
            "dead-lettered",
            "dlq",
            "superseded",
            "why",
        )
        now = time.time()
        for r in report:
            age = r.oldest_pending_age_s
            c = r.counters
            table.add_row(
                r.name,
                r.verdict,
                str(len(r.alive)),
                f"{now - r.last_heartbeat:.0f} s ago" if r.last_heartbeat else "-",
                str(r.pending),
                f"{age:.0f} s" if age is not None else "-",
                str(c.get("applied", 0)),
                str(c.get("parked", 0)),
                str(r.failed),
                str(c.get("dead_lettered", 0)),
                f"{r.dead_letters}" + (f"/{r.alert_after_dead_letters}" if r.alert_after_dead_letters else ""),
                str(c.get("superseded", 0)),
                cell(r.reason),
            )
            for lag in r.lags:
                if lag.pending:
                    table.add_row(f"  {lag.topic}", lag.lane, "", "", str(lag.pending), *[""] * 8)
        console.print(table)
    for r in report:
        if r.dead_letter_alert:
            _err(f"mcq status: {r.dead_letter_alert}")
        if r.tombstones_at_risk:
            _err(f"mcq status: {r.tombstones_at_risk}")
    pipeline = [] if names else _pipeline_alerts(settings, registry)
    for line in pipeline:
        _err(f"mcq status: {line}")
    sys.exit(EXIT_FAILED if any(r.failing for r in report) or pipeline else 0)


def _pipeline_alerts(settings: Settings, registry: Registry) -> list[str]:
    """What needs an operator upstream of the listeners: changes the normaliser withheld,
    replication slots missing, lost or holding too much WAL."""
    from mcq.capture.slots import SlotReadError, slot_alerts, slot_states
    from streams.withheld import Withheld

    out = [line for line in [Withheld(settings).alert()] if line]
    try:
        out += slot_alerts(slot_states(settings, registry), settings.connect.slot_retained_warn_mb)
    except SlotReadError as exc:
        out.append(str(exc))
    return out


@main.group()
def withheld() -> None:
    """Changes the normaliser withheld: a large value the source left out of the WAL would
    have overwritten the real one at every target (list them, acknowledge them)."""


@withheld.command("list")
@click.option("--all", "show_all", is_flag=True, help="Acknowledged ones too.")
def withheld_list(show_all: bool) -> None:
    """Each withheld change: its key, when, its raw record and why (exit 0)."""
    from streams.withheld import Withheld

    entries = [e for e in Withheld(_settings()).entries() if show_all or not e.acknowledged]
    if not entries:
        _say("no withheld changes" + ("" if show_all else " to acknowledge"))
        return
    for e in entries:  # a line each, not a table: the key and the reason are long
        _say(f"{e.partition}:{e.offset}  {e.entry_time}  {e.key}" + ("  (acknowledged)" if e.acknowledged else ""))
        _say(f"    {e.reason}")


@withheld.command("ack")
def withheld_ack() -> None:
    """Acknowledge every withheld change so far (after repairing the targets): `mcq status`
    alerts only on changes withheld after this."""
    from streams.withheld import Withheld

    count = Withheld(_settings()).acknowledge()
    _say(f"withheld: {count} change(s) acknowledged")


@main.group()
def dlq() -> None:
    """Dead letters of a listener: list, show, requeue, discard (AQ's exception queue)."""


def _dead_letters(name: str) -> DeadLetters:
    from consumers.runtime.dlq import DeadLetters

    return DeadLetters(_settings(), name)


@dlq.command("list")
@click.argument("name")
@click.option("--all", "include_resolved", is_flag=True, help="Also requeued and discarded entries.")
def dlq_list(name: str, include_resolved: bool) -> None:
    """Dead letters of listener NAME (unresolved ones unless --all)."""
    from consumers.exceptions import DeadLetterError

    try:
        entries = _dead_letters(name).entries(include_resolved)
    except DeadLetterError as exc:
        _err(f"mcq dlq list: {exc}")
        sys.exit(EXIT_FAILED)
    table = Table("id", "failed at", "attempts", "from", "error", "resolution")
    for e in entries:
        table.add_row(
            e.id,
            e.failed_at,
            str(e.attempts),
            cell(e.origin),
            cell(e.error[:120]),
            e.resolution["action"] if e.resolution else "",
        )
    console.print(table)
    _say(f"{len(entries)} dead letter(s)")


@dlq.command("show")
@click.argument("name")
@click.argument("entry_id")
def dlq_show(name: str, entry_id: str) -> None:
    """One dead letter: its headers and the change it holds."""
    from consumers.exceptions import DeadLetterError

    letters = _dead_letters(name)
    try:
        entry = letters.get(entry_id)
    except DeadLetterError as exc:
        _err(f"mcq dlq show: {exc}")
        sys.exit(EXIT_FAILED)
    console.print_json(
        json.dumps(
            {
                "id": entry.id,
                "headers": entry.headers,
                "resolution": entry.resolution,
                "change": letters.decoded(entry),
            },
            default=str,
        )
    )


def _pick(name: str, ids: tuple[str, ...], everything: bool) -> tuple[DeadLetters, list[DeadLetter]]:
    from consumers.exceptions import DeadLetterError

    letters = _dead_letters(name)
    if not ids and not everything:
        raise click.UsageError("name entry ids, or --all")
    try:
        entries = letters.entries() if everything else [letters.get(i) for i in ids]
    except DeadLetterError as exc:
        _err(f"mcq dlq: {exc}")
        sys.exit(EXIT_FAILED)
    return letters, entries


@dlq.command("requeue")
@click.argument("name")
@click.argument("ids", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every unresolved dead letter.")
@click.option("--reason", default="", help="Why (kept with the resolution).")
def dlq_requeue(name: str, ids: tuple[str, ...], everything: bool, reason: str) -> None:
    """Put dead letters back in NAME's retry lane, due now, with a fresh attempt count."""
    from consumers.exceptions import DeadLetterError

    letters, entries = _pick(name, ids, everything)
    try:
        _say(f"requeued {letters.requeue(entries, reason)} dead letter(s) to {letters.topics.retry}")
    except DeadLetterError as exc:
        _err(f"mcq dlq requeue: {exc}")
        sys.exit(EXIT_FAILED)


@dlq.command("discard")
@click.argument("name")
@click.argument("ids", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every unresolved dead letter.")
@click.option("--reason", required=True, help="Why (kept with the resolution).")
def dlq_discard(name: str, ids: tuple[str, ...], everything: bool, reason: str) -> None:
    """Mark dead letters as dealt with; they stay in the topic for the record."""
    letters, entries = _pick(name, ids, everything)
    _say(f"discarded {letters.discard(entries, reason)} dead letter(s)")


@main.command("console")
@click.option("--bind", metavar="HOST:PORT", help="Where to listen (default: console.bind, 127.0.0.1:8088).")
@click.option(
    "--hash-password",
    "hash_only",
    is_flag=True,
    help="Print an argon2 hash of a password for console.users.<NAME>.password_hash, then exit.",
)
@click.option("--password-env", metavar="VAR", help="With --hash-password: read the password from this variable.")
@click.option(
    "--local-admin",
    is_flag=True,
    help="With no user configured: the local stack's admin (password in $MCQ_HOME/conf/console-admin.password).",
)
@click.option("--background", is_flag=True, help="Run detached beside the local stack (`mcq stack down` stops it).")
@click.option("--stop", "stop_it", is_flag=True, help="Stop the console --background started.")
def console_command(
    bind: str | None, hash_only: bool, password_env: str | None, local_admin: bool, background: bool, stop_it: bool
) -> None:
    """The operator's console: listeners' states, interests, dead letters, tables, topics,
    batch jobs and the latest report in a browser. Every page needs a login (console.users,
    the local admin, or a trusted proxy's header); actions need the admin role and are
    written to the audit log."""
    from mcq.console import local
    from mcq.console.auth import hash_password

    if hash_only:
        if password_env is not None:
            password = os.environ.get(password_env, "")
            if not password:
                raise click.BadParameter(f"{password_env} is not set or empty", param_hint="--password-env")
        else:
            password = click.prompt("password", hide_input=True, confirmation_prompt=True)
        click.echo(hash_password(password))
        return
    import uvicorn

    from mcq.console.app import create_app

    settings = _settings()
    if stop_it:
        stopped = local.handle(settings).stop(signal.SIGTERM)
        _say("console: stopped" if stopped else "console: was not running")
        return
    if local_admin:
        settings = local.with_local_admin(settings)
    if not settings.console.users and not settings.console.trusted_user_header:
        _err(
            "mcq console: no one could log in: set MCQ_CONSOLE__USERS__<NAME>__PASSWORD_HASH (from "
            "`mcq console --hash-password`) and __ROLE (read or admin), or console.trusted_user_header"
        )
        sys.exit(EXIT_CONFIG)
    host, _, port_text = (bind or settings.console.bind).rpartition(":")
    if not host or not port_text.isdigit():
        raise click.BadParameter(f"{bind!r} is not HOST:PORT", param_hint="--bind")
    if background:
        try:
            pid = local.start_background(settings, f"{host}:{port_text}")
        except RuntimeError as exc:
            _err(f"mcq console: {exc}")
            sys.exit(EXIT_FAILED)
        who = f"log in as {local.LOCAL_ADMIN}, password in {local.password_file(settings)}" if local_admin else ""
        _say(f"mcq console at http://{host}:{port_text} (pid {pid}; {who or 'console.users log in'})")
        return
    app = create_app(settings)
    _say(f"mcq console at http://{host}:{port_text} ({len(settings.console.users)} user(s); Ctrl-C stops it)")
    config = uvicorn.Config(app, host=host, port=int(port_text), log_level="warning", access_log=False)
    with suppress(KeyboardInterrupt):
        uvicorn.Server(config).run()


@main.command("demo")
@click.option("--timeout", default=900, show_default=True, type=click.IntRange(min=60), help="Seconds to converge.")
def demo(timeout: int) -> None:
    """The whole pipeline on the campus world: normaliser and listeners running, a scripted
    burst of changes, then LDAP, the vendor table and BEST's files checked key by key
    against the source.

    Expects `make run`'s earlier steps (stack, world, registry, topics, schemas, capture).
    Exit 0 when every target equals the source."""
    from mcq.demo import run_demo

    settings = _settings()
    sys.exit(run_demo(settings, _current_registry(None), _say, float(timeout)))


# ------------------------------------------------------------------ world


@main.group()
def world() -> None:
    """The sample world: a campus identity database with realistic, seeded data."""


@world.command("load")
@click.option("--people", default=3000, show_default=True, type=click.IntRange(min=0), help="How many people.")
@click.option("--seed", default=2004, show_default=True, type=int, help="Same seed, same world.")
@click.option("--schema", default="campus", show_default=True, help="Schema in the source database.")
@click.option("--replace", is_flag=True, help="Empty the world's tables first (otherwise a loaded world is kept).")
def world_load(people: int, seed: int, schema: str, replace: bool) -> None:
    """Create the campus schema in the source database and load a generated world into it."""
    import psycopg

    from mcq.world import create_schema, generate, load

    settings = _settings()
    try:
        with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
            create_schema(conn, schema, replace=replace)
            existing = conn.execute(f'SELECT count(*) FROM "{schema}".people').fetchone()
            if existing and existing[0] and not replace:
                _say(f"{schema}: already holds {existing[0]} people; kept (use --replace to reload)")
                return
            started = time.monotonic()
            world_rows = generate(people, seed)
            if console.is_terminal:
                from rich.progress import Progress

                with Progress(console=console, transient=True) as bar:
                    task = bar.add_task(f"loading {schema}", total=None)
                    counts = load(
                        conn,
                        schema,
                        world_rows,
                        report=lambda line: _say(f"  {line}"),
                        progress=lambda done, total: bar.update(task, completed=done, total=total),
                    )
            else:
                counts = load(conn, schema, world_rows, report=lambda line: _say(f"  {line}"))
    except (psycopg.Error, ValueError) as exc:
        _err(f"mcq world load: {settings.source}: {exc}".strip())
        sys.exit(EXIT_FAILED)
    _say(
        f"{schema}: loaded {sum(counts.values())} rows ({people} people, seed {seed}) "
        f"in {time.monotonic() - started:.1f} s"
    )


# ------------------------------------------------------------------ config


@main.command("config")
def show_config() -> None:
    """Print the effective configuration (secrets masked)."""
    console.print_json(_settings().model_dump_json(indent=2))


# ------------------------------------------------------------------ smoke


@main.command()
def smoke() -> None:
    """Run the smoke pipeline on the configured stack: capture, registry, Spark."""
    from mcq.smoke import SmokeFailed, run_smoke

    try:
        run_smoke(_settings(), report=_say)
    except SmokeFailed as exc:
        _err(f"mcq smoke: {exc}")
        sys.exit(EXIT_FAILED)


if __name__ == "__main__":  # pragma: no cover
    main(prog_name="mcq")  # `python -m mcq.cli` (the console's jobs, tests) says "mcq" as the script does
