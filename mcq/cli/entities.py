"""``mcq entities run`` (every entity written to its topic) and ``mcq map preview`` (what
a listener's target would be given for one key)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mcq.cli.app import (
    EXIT_CONFIG,
    FROM_FILE,
    _current_registry,
    _health_port,
    _load_registry_file,
    _say,
    _settings,
    _stop,
    console,
    health_options,
    main,
)
from mcq.signals import stop_on_signals

ENTITIES_HTTP_PORT = 8091


@main.group("entities")
def entities() -> None:
    """Entities: logical tables computed from related rows (a root table and its joins)."""


@entities.command("run")
@click.argument("names", nargs=-1)
@FROM_FILE
@click.option("--until-caught-up", is_flag=True, help="Write what the member topics hold now, then exit 0.")
@health_options(ENTITIES_HTTP_PORT, "An --until-caught-up run")
def run(
    names: tuple[str, ...],
    registry_file: Path | None,
    until_caught_up: bool,
    http_host: str,
    http_port: int | None,
    no_http: bool,
) -> None:
    """Keep every entity of the registry (or those NAMES) written to its compacted topic:
    a change of any member row writes every entity it belongs to again.

    Run one instance per topic prefix. Stops on SIGTERM/SIGINT after the chunk in flight;
    exit 0 when stopped or caught up, 1 when it failed, 2 for an unknown entity."""
    from mcq.health import HealthAddressTaken
    from mcq.registry.exceptions import RegistryError
    from mcq.registry.store import RegistryReader
    from streams.entities.job import EntityJob

    settings = _settings().for_normaliser()  # it writes logical topics, as the normaliser does
    reader = None
    if registry_file is not None:
        registry = _load_registry_file(registry_file)
    else:  # the shared store, followed: an entity added or changed is taken without a restart
        try:
            reader = RegistryReader(settings)
            reader.catch_up()
            registry = reader.registry()
        except RegistryError as exc:
            _stop(f"mcq entities run: reading the registry store: {exc}")
    port = _health_port(http_port, no_http, until_caught_up, ENTITIES_HTTP_PORT)
    try:
        job = EntityJob(
            settings, registry, list(names) or None, http=None if port is None else (http_host, port),
            reader=reader,
        )  # fmt: skip
    except ValueError as exc:
        _stop(f"mcq entities run: {exc}", EXIT_CONFIG)
    except HealthAddressTaken as exc:
        _stop(f"mcq entities run: {exc}; choose another with --http-port or --no-http", EXIT_CONFIG)
    if not job.tables:
        _stop("mcq entities run: the registry defines no entity (a table with an entity: block)", EXIT_CONFIG)
    with stop_on_signals(job.stop, _say, "mcq entities run", "the chunk in flight"):
        sys.exit(job.run(until_caught_up=until_caught_up))


@main.group("map")
def map_() -> None:
    """What a listener's target is given."""


@map_.command("preview")
@click.argument("listener")
@click.argument("key", nargs=-1, required=True)
@click.option("--tname", help="The table (or entity) of the key, when the listener has several.")
@FROM_FILE
def preview(listener: str, key: tuple[str, ...], tname: str | None, registry_file: Path | None) -> None:
    """Show what LISTENER's target would be given for one KEY (FIELD=VALUE ..., e.g.
    pkey_number=17), from the topics as they are now: the key's state (an entity assembled
    from its member tables), whether the listener's rules admit it, and the payload its
    adapter would write.

    Exit 0 when the key is in the listener's view, 1 when it is not (or does not exist),
    2 for an unknown listener, table or key."""
    from streams.entities.preview import PreviewError
    from streams.entities.preview import preview as compute

    settings = _settings()
    registry = _current_registry(registry_file)
    try:
        shown = compute(settings, registry, listener, key, tname)
    except PreviewError as exc:
        _stop(f"mcq map preview: {exc}", EXIT_CONFIG)
    _say(shown.why)
    if shown.written is None:
        sys.exit(1)
    console.print(shown.written, markup=False, highlight=False, soft_wrap=True)
