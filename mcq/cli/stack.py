"""``mcq stack …`` (the local stack of real services) and ``mcq config`` (the effective
settings)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from mcq.cli.app import EXIT_CONFIG, EXIT_DOWN, _forget_settings, _say, _settings, _stop, console, main
from mcq.output import cell

if TYPE_CHECKING:
    from mcq.stack import Stack


@main.group()
def stack() -> None:
    """The local stack of real services (PostgreSQL, Kafka, Connect, registry, LDAP)."""


def _only(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


ONLY = click.option(
    "--only",
    metavar="SERVICES",
    help="Comma-separated subset: postgres, ldap, kafka, registry, connect (and the optional ones, "
    "when started: ad, spark-master, spark-worker-1, spark-worker-2, etcd, kube-apiserver).",
)


def _stack(only: str | None, with_: str | None = None) -> Stack:
    from mcq.stack import Stack

    try:
        return Stack(_settings(), only=_only(only), with_=_only(with_) or ())
    except KeyError as exc:
        raise click.BadParameter(
            str(exc.args[0]), param_hint="--with" if "optional" in str(exc) else "--only"
        ) from None


@stack.command()
@ONLY
@click.option(
    "--secure/--plaintext",
    default=None,
    help="Make the stack the secure one (its broker has no port without a login; mcq's clients "
    "use SCRAM over TLS, each process as its own principal) or the quick start's plaintext one; "
    "kept for later commands. Default: as it was.",
)
@click.option(
    "--with",
    "with_",
    metavar="SERVICES",
    help="Optional services to start too: ad (Samba's Active Directory domain controller, LDAPS on "
    "127.0.0.1:636 with the stack's CA; needs root and the samba package); spark (a standalone Spark "
    "cluster, a master at spark://127.0.0.1:27077 and two workers, for --master); kubernetes (etcd and a "
    "kube-apiserver built by `make kube`, HTTPS on 127.0.0.1:26443 with the stack's CA).",
)
def up(only: str | None, secure: bool | None, with_: str | None) -> None:
    """Start every service that is not running and wait until all are healthy."""
    if secure is not None and secure != _settings().stack.secure:
        _switch_mode(secure)
    st = _stack(only, with_)
    if st.settings.stack.secure:
        _say(
            f"secure stack: Kafka at {st.settings.kafka.bootstrap_servers} (SASL_SSL, SCRAM-SHA-512); "
            "each process logs in as its own principal once `mcq acl apply` made it"
        )
    st.up()


def _switch_mode(secure: bool) -> None:
    """Mark the stack secure or plaintext; its broker must be down (its listeners change)."""
    from mcq.stack import Stack

    settings = _settings()
    kafka = Stack(settings).service("kafka")
    if kafka.handle.pid() is not None:
        mode = "plaintext" if secure else "secure"
        _stop(f"mcq stack up: the {mode} stack's Kafka is running; stop it first with `mcq stack down`", EXIT_CONFIG)
    settings.stack.set_secure(secure)
    _forget_settings()  # the stack's mode decides the broker's port and the login


@stack.command()
@ONLY
def down(only: str | None) -> None:
    """Stop every service the stack started (and the console beside it); no process is left behind."""
    from mcq.console.local import handle

    st = _stack(only)
    if only is None and handle(st.settings).stop(signal.SIGTERM):
        _say("console: stopped")
    st.down()


@stack.command()
@ONLY
def status(only: str | None) -> None:
    """Show each service, its address, pid and whether it is up (exit 3 if any is down)."""
    st = _stack(only)
    rows = st.status()
    # no rules: with the optional services' longer names it still fits 80 columns
    table = Table(title=f"mcq stack ({st.settings.stack.home})", box=None, pad_edge=False)
    for col in ("service", "address", "pid", "state"):
        table.add_column(col, no_wrap=True)  # whole, to be copied; the reason may wrap
    table.add_column("detail", overflow="fold")
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


@main.command("config")
def show_config() -> None:
    """Print the effective configuration (secrets masked: passwords, keys, tokens, the
    client settings that carry one, and a password inside a URL or connection string)."""
    from mcq.secrets import masked

    console.print_json(json.dumps(masked(json.loads(_settings().model_dump_json()))))
