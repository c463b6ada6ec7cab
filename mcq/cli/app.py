"""The root of the ``mcq`` command line and what its command modules share: the consoles,
the exit codes, settings and registry loading, common options, and the one place where an
error ends a command.

Errors: an :class:`mcq.errors.McqError` that reaches a command's edge is printed as one
line (``mcq <command>: <message>``) and exits with its ``exit_code``; any other exception
(a Kafka client's, a JVM's) is one line naming its type and the log file that holds its
traceback, exit 1. Never a traceback on the terminal.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import click
from confluent_kafka import KafkaError, KafkaException

from mcq.config import Settings, load_settings
from mcq.errors import EXIT_CONFIG, EXIT_FAILED, McqError, first_line
from mcq.logs import SHOWN, TerminalHandler, configure
from mcq.output import cli_console, say
from mcq.registry import Registry, RegistryError, load_registry
from mcq.registry.store import RegistryStore
from mcq.topics.read import transient

__all__ = ["EXIT_CONFIG", "EXIT_DOWN", "EXIT_FAILED", "main"]

log = logging.getLogger("mcq.cli")

console = cli_console()
err_console = cli_console(stderr=True)

EXIT_DOWN = 3
_COMMAND = "mcq.command"  # ctx.meta: the command path of the command that runs
_LOG_FILE = "mcq.log_file"
_BOOTSTRAP = "mcq.bootstrap"
_SETTINGS = "mcq.settings"


def _settings() -> Settings:
    """This command's settings: read once, by the root group (frozen, so shared safely); a
    ConfigError ends the command as one line, exit 2 (McqGroup)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return load_settings()
    root = ctx.find_root()
    if _SETTINGS not in root.meta:
        root.meta[_SETTINGS] = load_settings()
    settings: Settings = root.meta[_SETTINGS]
    return settings


def _forget_settings() -> None:
    """After a command changed what the settings are read from (``mcq stack up --secure``
    marks the stack secure: its broker's port and login follow): read them again next."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.find_root().meta.pop(_SETTINGS, None)


_plain = [True]  # False under log.format json: every line is a JSON log record on stderr


def _say(line: object) -> None:
    """Print a report line (runtime, stack, demo…): it may quote a target's error or a
    record's value, so it is never read as markup (mcq/output.py). The log has it too."""
    if _plain[0]:
        say(console, line)
    log.info("%s", line, extra={SHOWN: True})


def _err(line: object) -> None:
    """Print an error line on stderr, never read as markup; the log has it too."""
    if _plain[0]:
        say(err_console, line)
    log.warning("%s", line, extra={SHOWN: True})


def _stop(line: str, code: int = EXIT_FAILED) -> NoReturn:
    """End the command with one line on stderr and ``code``."""
    _err(line)
    sys.exit(code)


def _kafka_line(exc: KafkaException, bootstrap: str | None) -> str:
    """A Kafka client's failure in one line: what the broker (or the client) said, and
    whether trying again later can help."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    said = err.str() if err is not None else first_line(exc)
    where = f"Kafka at {bootstrap}" if bootstrap else "Kafka"
    hint = "; the broker did not answer: try again once it is up" if transient(exc) else ""
    return f"{where}: {said}{hint}"


def _name(ctx: click.Context) -> None:
    """Tell the root which command runs (for its error lines): ``mcq <path>``."""
    ctx.meta[_COMMAND] = " ".join(["mcq", *ctx.command_path.split()[1:]])


class McqCommand(click.Command):
    """A command that tells the root which command runs."""

    def invoke(self, ctx: click.Context) -> Any:
        _name(ctx)
        return super().invoke(ctx)


class McqGroup(click.Group):
    """Every command and group of ``mcq``; the root also ends every command's errors."""

    command_class = McqCommand
    group_class = type  # subgroups are McqGroups too

    def invoke(self, ctx: click.Context) -> Any:
        if ctx.parent is not None:
            _name(ctx)
            return super().invoke(ctx)
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except McqError as exc:
            command = ctx.meta.get(_COMMAND, "mcq")
            log.debug("%s failed", command, exc_info=True)
            _err(f"{command}: {exc}")
            ctx.exit(exc.exit_code)
        except KafkaException as exc:
            _failed(f"{ctx.meta.get(_COMMAND, 'mcq')}: {_kafka_line(exc, ctx.meta.get(_BOOTSTRAP))}")
        except ModuleNotFoundError as exc:
            extra = missing_extra(exc)
            if extra is None:
                _failed(f"{ctx.meta.get(_COMMAND, 'mcq')}: unexpected {type(exc).__name__}: {first_line(exc)}")
            _err(f"{ctx.meta.get(_COMMAND, 'mcq')}: {extra}")
            ctx.exit(EXIT_FAILED)
        except Exception as exc:
            _failed(f"{ctx.meta.get(_COMMAND, 'mcq')}: unexpected {type(exc).__name__}: {first_line(exc)}")


EXTRAS = {
    "pyspark": "spark",
    "matplotlib": "spark",
    "starlette": "console",
    "uvicorn": "console",
    "multipart": "console",
    "itsdangerous": "console",
    "argon2": "console",
}
"""The distribution's extras by the top-level module each brings (pyproject.toml)."""


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The line for a module an extra of the distribution brings and this install lacks
    (``pip install meta-change-queue`` alone runs listeners, not Spark), or None."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return f"needs the '{extra}' extra ({top} is not installed): pip install 'meta-change-queue[{extra}]'"


def _failed(line: str) -> NoReturn:
    """End a command that failed in a way mcq does not know: the line on the terminal, the
    traceback of the exception being handled in the log file the line names; exit 1."""
    where = click.get_current_context().meta.get(_LOG_FILE)
    line += f" (details: {where})" if where else ""
    log.error("%s", line, exc_info=True, extra={SHOWN: True})  # one record, with the traceback
    if _plain[0]:
        say(err_console, line)
    sys.exit(EXIT_FAILED)


def _job_failed(command: str, exc: BaseException, after: str = "") -> NoReturn:
    """A Spark or Kafka failure under a batch job: one line (not a JVM stack trace) naming
    the log that holds it."""
    _failed(f"{command}: the job failed: {first_line(exc)}{after}")


@click.group(cls=McqGroup)
@click.version_option(package_name="meta-change-queue")
@click.pass_context
def main(ctx: click.Context) -> None:
    """mcq: the Meta Change Queue on Kafka, Debezium and Spark."""
    settings = _settings()
    terminal = TerminalHandler(lambda line: say(console, line), lambda line: say(err_console, line))
    ctx.meta[_LOG_FILE] = configure(settings.log, terminal)
    ctx.meta[_BOOTSTRAP] = settings.kafka.bootstrap_servers
    _plain[0] = settings.log.format == "text"
    if console.is_terminal:  # long Spark jobs draw bars on a terminal, write lines elsewhere
        from streams.jobs.progress import show_bars

        show_bars(console)


def _check_login(command: str, settings: Settings) -> None:
    """Stop with one line (exit 2) when the broker refuses this process's Kafka login."""
    from mcq.acl.exceptions import LoginRefused
    from mcq.acl.login import check_login

    try:
        check_login(settings)
    except LoginRefused as exc:
        _stop(f"{command}: {exc}", EXIT_CONFIG)


# ------------------------------------------------------------------ the registry a command uses


REGISTRY_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))


def _load_registry_file(file: Path) -> Registry:
    try:
        return load_registry(file)
    except RegistryError as exc:
        _stop(str(exc))


def _store() -> RegistryStore:
    return RegistryStore(_settings())


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
        _stop(f"mcq: reading the registry store: {exc}")


# ------------------------------------------------------------------ long-running commands


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


# ------------------------------------------------------------------ listeners named on the line


def _refuse_unknown(verb: str, registry: Registry, names: tuple[str, ...]) -> None:
    """Exit 2 with one line when a listener named on the command line is not in the registry."""
    unknown = [n for n in names if registry.listener(n) is None]
    if unknown:
        _stop(f"mcq {verb}: no listener named {', '.join(unknown)} in the registry", EXIT_CONFIG)


@contextmanager
def _moving_groups(verb: str) -> Iterator[None]:
    """The errors of a command that moves a stopped listener's groups: a listener, time or
    file that is not right exits 2; a running listener (it names the instances) or a
    Kafka failure exits 1."""
    from consumers.exceptions import ConsumerError, ListenerConfigError

    try:
        yield
    except ListenerConfigError as exc:
        _stop(f"mcq {verb}: {exc}", EXIT_CONFIG)
    except ConsumerError as exc:
        _stop(f"mcq {exc}")


def dry_run(effect: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--dry-run``: show what the command would do (``effect``), change nothing."""
    return click.option("--dry-run", is_flag=True, help=f"{effect}; change nothing.")


def path_option(
    name: str, help: str, *, directory: bool = False
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """An option naming a file (or a directory) to write."""
    kind = click.Path(file_okay=not directory, dir_okay=directory, path_type=Path)
    return click.option(name, type=kind, help=help)


MASTER = click.option("--master", help="Spark master (default: MCQ_SPARK_MASTER, spark-submit's, or local[*]).")
