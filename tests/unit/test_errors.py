"""One error tree: every error mcq raises on purpose derives from ``McqError``, says
whether retrying can help and what the command line exits with, and reaches the user as
one line -- never as a traceback."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import click
import pytest
from click.testing import CliRunner

import consumers
import mcq
import streams
from consumers.exceptions import ChangeFailed, ChangeRejected, ListenerConfigError, TargetUnavailable
from mcq.cli.app import McqGroup
from mcq.config import ConfigError
from mcq.contract import SchemaRefused, SchemaRegistryUnavailable
from mcq.errors import EXIT_CONFIG, EXIT_FAILED, McqError
from mcq.topics import TopicReadError
from streams.exceptions import SelectionError

# Exceptions that never leave their module: control flow of one loop, caught where raised.
INTERNAL = {"NotReady", "LoginRequired", "Stopped", "Abandon"}


def _error_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for package in (mcq, streams, consumers):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.startswith(("mcq.cli", "mcq.demo.smoke", "streams.normalize_job")):
                continue
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == info.name:
                    found.append(cls)
    return found


def test_every_error_mcq_defines_derives_from_one_root() -> None:
    classes = _error_classes()
    assert len(classes) > 30
    strays = sorted(
        f"{c.__module__}.{c.__name__}" for c in classes if c.__name__ not in INTERNAL and not issubclass(c, McqError)
    )
    assert strays == []


def test_errors_say_whether_trying_again_can_help() -> None:
    assert TargetUnavailable("ldap down").retriable and ChangeFailed("lock").retriable
    assert SchemaRegistryUnavailable("registry: 503").retriable
    assert not ChangeRejected("refused for good").retriable and not SchemaRefused("incompatible").retriable
    assert TopicReadError("t: broker down", retriable=True).retriable
    assert not TopicReadError("t: no such topic").retriable


def test_errors_say_what_the_command_line_exits_with() -> None:
    assert ConfigError("x").exit_code == EXIT_CONFIG
    assert ListenerConfigError("x").exit_code == EXIT_CONFIG
    assert SelectionError("keys.csv:3: bad line").exit_code == EXIT_CONFIG
    assert TargetUnavailable("x").exit_code == EXIT_FAILED


def _cli(raise_: BaseException) -> click.Group:
    @click.group(cls=McqGroup)
    def root() -> None:
        pass

    @root.group()
    def things() -> None:
        pass

    @things.command()
    def do() -> None:
        raise raise_

    return root


def test_an_mcq_error_ends_a_command_as_one_line_with_its_exit_code() -> None:
    result = CliRunner().invoke(_cli(SelectionError("keys.csv:3: not a key")), ["things", "do"], prog_name="mcq")
    assert result.exit_code == EXIT_CONFIG
    assert result.output.strip() == "mcq things do: keys.csv:3: not a key"


def test_an_unexpected_error_is_one_line_naming_its_type_never_a_traceback() -> None:
    result = CliRunner().invoke(_cli(RuntimeError("boom\nsecond line")), ["things", "do"], prog_name="mcq")
    assert result.exit_code == EXIT_FAILED
    assert result.output.strip() == "mcq things do: unexpected RuntimeError: boom"
    assert "Traceback" not in result.output


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)])
def test_interrupts_and_exits_pass_through(exc: BaseException) -> None:
    result = CliRunner().invoke(_cli(exc), ["things", "do"], prog_name="mcq")
    assert "unexpected" not in result.output
