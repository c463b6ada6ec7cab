"""``mcq connect …``: capture, i.e. the Debezium connectors generated from the registry, driven
over Connect's REST API, and the source's replication slots."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table

from mcq.cli.app import (
    EXIT_CONFIG,
    EXIT_DOWN,
    EXIT_FAILED,
    FROM_FILE,
    _current_registry,
    _err,
    _say,
    _settings,
    _stop,
    console,
    main,
)
from mcq.output import cell


@main.group("connect")
def connect_group() -> None:
    """Capture: Debezium connectors generated from the registry, driven over Connect's REST API."""


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
    from mcq.capture.apply import apply_capture

    apply_capture(_current_registry(registry_file), _settings(), connectors=not prepare_only)


@connect_group.command("status")
@FROM_FILE
def connect_status(registry_file: Path | None) -> None:
    """Show every connector and task state, and the replication slot of every source:
    exit 3 when a connector of the registry's sources is missing, not RUNNING or has no
    task, 1 when a slot is missing, lost its WAL, or holds more WAL than
    connect.slot_retained_warn_mb (one line each on stderr, saying what to do).
    Connectors of other registries on the same worker are listed, not judged."""
    from mcq.capture.connector import connector_name
    from mcq.capture.slots import MB, slot_alerts, slot_states
    from mcq.connect_rest import ConnectClient

    settings = _settings()
    registry = _current_registry(registry_file)
    slots = slot_states(settings, registry)
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
    from mcq.capture.remove import remove_capture

    reg = _current_registry(registry_file)
    chosen = [s for s in reg.sources if source is None or s.name == source]
    if source is not None and not chosen:
        known = ", ".join(s.name for s in reg.sources) or "none"
        _stop(f"mcq connect remove: no source named {source} in the registry (known: {known})", EXIT_CONFIG)
    remove_capture(chosen, _settings())
