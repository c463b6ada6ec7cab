"""``mcq streams normalize``: the Spark job that turns raw CDC topics into the compacted
logical topics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from mcq.cli.app import (
    EXIT_CONFIG,
    FROM_FILE,
    MASTER,
    NORMALIZE_HTTP_PORT,
    _check_login,
    _current_registry,
    _health_port,
    _say,
    _settings,
    _stop,
    health_options,
    main,
    path_option,
)
from mcq.config import Settings
from mcq.registry import RegistryError
from streams.catchup import CATCH_UP_ABOVE

if TYPE_CHECKING:
    from streams.registry_watch import RegistryWatch


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
@path_option("--checkpoint", "Checkpoint directory (default MCQ_HOME/checkpoints/normalize-<prefix>).", directory=True)
@click.option(
    "--catch-up-above",
    type=click.IntRange(min=0),
    default=CATCH_UP_ABOVE,
    show_default=True,
    help="Realtime mode, first start under a checkpoint: with more raw records waiting, drain them in "
    "micro-batches first, then start real time where they ended (0: always).",
)
@MASTER
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), help="Cap a micro-batch's size.")
@click.option(
    "--accept-lost-raw",
    is_flag=True,
    help="Go on past raw records deleted (retention) before they were read; only after refreshing the "
    "listeners from the source, as the error naming them says.",
)
@click.option(
    "--after-handover",
    type=click.Choice(["exit", "idle"]),
    default="exit",
    show_default=True,
    help="When another normaliser of this checkpoint takes over: end, or stay up, not ready, until stopped "
    "(a pod of a rolling update, which its Deployment would otherwise restart).",
)
@click.option(
    "--standby",
    is_flag=True,
    help="Started beside a running normaliser of this checkpoint: do not ask it to hand over; start Spark and "
    "the real-time queries held at the gate, and take over when it crashes or stops (a warm standby).",
)
@click.option(
    "--standby-refresh",
    default="5 minutes",
    show_default=True,
    help="With --standby, when its held queries cannot follow the running one (their reader of the logical "
    "topics failed): start them again on a fresh copy of the checkpoint this often, so that a take-over reads "
    "again at most about this much.",
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
    after_handover: str,
    standby: bool,
    standby_refresh: str,
    http_host: str,
    http_port: int | None,
    no_http: bool,
) -> None:
    """Normalise raw Debezium topics into the compacted logical topics of the registry.

    Started beside a running normaliser of the same checkpoint, it starts Spark, then
    takes over from it: the other stops, and no record is missing or written twice. With
    --standby it waits instead, ready to take over within seconds when the other crashes.

    Exit 0 when stopped (SIGTERM/SIGINT) or, with --once, caught up; 1 when the stream
    failed (raw records deleted before they were read included: the line says how to
    repair); 2 for bad options."""
    from mcq.health import HealthAddressTaken
    from streams.realtime import interval_ms
    from streams.runner import run_normalize

    try:
        interval_ms(checkpoint_interval)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--checkpoint-interval") from None
    try:
        refresh_s = interval_ms(standby_refresh) / 1000
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--standby-refresh") from None
    settings = _settings().for_normaliser()
    port = _health_port(http_port, no_http, once, NORMALIZE_HTTP_PORT)
    _check_login("mcq streams normalize", settings)
    # a running normaliser follows the store: its first read is the registry it starts with (a
    # --once run reads it the same way, for when each table's definition was stored)
    watch = None if registry_file is not None else _registry_watch(settings)
    registry = _current_registry(registry_file) if watch is None else watch.registry
    try:
        run_normalize(
            settings,
            registry,
            once=once,
            trigger=trigger,
            checkpoint=checkpoint,
            master=master,
            max_offsets_per_trigger=max_offsets_per_trigger,
            mode=mode,
            checkpoint_interval=checkpoint_interval,
            accept_lost_raw=accept_lost_raw,
            health=None if port is None else (http_host, port),
            catch_up_above=catch_up_above,
            registry_changed=None if watch is None or once else watch.changed,
            defined_at=None if watch is None else watch.defined_at,
            jit_by_backlog=True,  # this process ends with the run
            after_handover=after_handover,
            standby=standby,
            standby_refresh_s=refresh_s,
        )
    except HealthAddressTaken as exc:
        _stop(
            f"mcq streams normalize: {exc}; choose another with --http-port (0: any free port) or --no-http",
            EXIT_CONFIG,
        )
    except KeyboardInterrupt:
        _say("normalize: stopped")
    finally:
        if watch is not None:
            watch.close()


def _registry_watch(settings: Settings) -> RegistryWatch:
    """The registry store followed while the queries run (a --registry file is not)."""
    from streams.registry_watch import RegistryWatch

    try:
        return RegistryWatch(settings)
    except RegistryError as exc:
        _stop(f"mcq streams normalize: following the registry store: {exc}")
