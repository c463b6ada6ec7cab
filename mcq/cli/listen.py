"""``mcq listen NAME`` (run a listener) and ``mcq status`` (the process monitor over every
listener)."""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

import click
from rich.table import Table

from mcq.cli.app import (
    DEFAULT_HTTP_PORT,
    EXIT_CONFIG,
    EXIT_FAILED,
    FROM_FILE,
    _check_login,
    _current_registry,
    _err,
    _health_port,
    _load_registry_file,
    _refuse_unknown,
    _say,
    _settings,
    _stop,
    console,
    health_options,
    main,
)
from mcq.config import Settings
from mcq.output import cell
from mcq.registry import Registry


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
    from consumers.runtime.health import HealthAddressTaken
    from consumers.runtime.listener import ListenerRuntime, stop_on_signals

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
        )
        # A batch makes thousands of short-lived objects (records, changes, rows): at the
        # default threshold (700 allocations) the collector's passes took 15% of a `table`
        # listener's initial load (bench/listener_apply.py); this process is the listener's.
        gc.set_threshold(10_000, 10, 10)
        with stop_on_signals(runtime):
            sys.exit(runtime.run(until_caught_up=until_caught_up))
    except HealthAddressTaken as exc:
        _stop(
            f"mcq listen: {name}: {exc}; choose another with --http-port (0: any free port) or --no-http", EXIT_CONFIG
        )


def _serve_status(
    settings: Settings, registry_file: Path | None, names: list[str] | None, every_s: float, host: str, port: int
) -> None:
    """``mcq status --serve``: check every EVERY_S seconds (the registry read again each time:
    a listener added is watched, one removed is dropped) until SIGTERM or SIGINT."""
    import signal
    import threading

    from consumers.runtime.status import status_report
    from consumers.runtime.status_exporter import StatusGauges, check_every
    from mcq.health import HealthAddressTaken, HealthServer

    gauges = StatusGauges()
    stopping = threading.Event()
    try:
        server = HealthServer(host, port, live=lambda: True, ready=lambda: gauges.checked_once,
                              metrics=gauges.registry)  # fmt: skip
    except HealthAddressTaken as exc:
        _stop(f"mcq status --serve: {exc}; choose another with --http-port (0: any free port)", EXIT_CONFIG)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    server.start()
    _say(f"mcq status: serving {server.address}/metrics, a check every {every_s:.0f} s")
    try:
        check_every(gauges, lambda: status_report(settings, _current_registry(registry_file), names), every_s, stopping)
    finally:
        server.stop()


@main.command("status")
@click.argument("names", nargs=-1)
@FROM_FILE
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--serve",
    is_flag=True,
    help="Keep checking, and serve the verdicts as Prometheus gauges on /metrics (mcq_status_alert{listener,kind} "
    "and others; the chart's alert rules read them) until SIGTERM.",
)
@click.option("--every", "every_s", type=click.FloatRange(min=5), default=60.0, show_default=True,
              help="With --serve: seconds between checks.")  # fmt: skip
@click.option("--http-host", default="127.0.0.1", show_default=True, help="With --serve: address of /metrics.")
@click.option("--http-port", type=click.IntRange(0, 65535), default=8092, show_default=True,
              help="With --serve: port of /metrics, /livez and /readyz (0: any free port).")  # fmt: skip
def listeners_status(
    names: tuple[str, ...], registry_file: Path | None, as_json: bool, serve: bool, every_s: float, http_host: str,
    http_port: int,
) -> None:  # fmt: skip
    """Process monitor: per listener, instances alive, pending changes, oldest pending, counts.

    Exits 1 when a listener is DEAD (real-time, no live instance), STUCK (its oldest
    pending change is older than its limit), holds as many unresolved dead letters as
    its delivery.alert_after_dead_letters (one line each on stderr, naming the command
    that lists them), or has changes waiting (or that waited, until the refresh is
    applied) on a logical topic longer than the topic keeps deletes (delete.retention.ms:
    one line each on stderr, naming the refresh that repairs its target), so cron or a
    probe can alert."""
    from consumers.runtime.status import status_report

    settings = _settings()
    registry = _current_registry(registry_file)
    _refuse_unknown("status", registry, names)

    if serve:
        _serve_status(settings, registry_file, list(names) or None, every_s, http_host, http_port)
        return
    report = status_report(settings, registry, list(names) or None)
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
                        "waiting": r.waiting,
                        "next_due": r.next_due,
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
            "waiting",
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
                f"{r.waiting} (next in {max(0.0, r.next_due - now):.0f} s)" if r.next_due is not None else "0",
                str(r.failed),
                str(c.get("dead_lettered", 0)),
                f"{r.dead_letters}" + (f"/{r.alert_after_dead_letters}" if r.alert_after_dead_letters else ""),
                str(c.get("superseded", 0)),
                cell(r.reason),
            )
            for lag in r.lags:
                if lag.pending:
                    table.add_row(f"  {lag.topic}", lag.lane, "", "", str(lag.pending), *[""] * 9)
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
