"""``mcq acl …``: the Kafka ACLs and SCRAM users derived from the registry."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mcq.cli.app import EXIT_FAILED, FROM_FILE, _current_registry, _say, _settings, main
from mcq.config import Settings

if TYPE_CHECKING:
    from mcq.acl.plan import Grant, Principals


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
    from mcq.acl.users import make_local_users

    settings = _settings()
    grants, principals = _acl_plan(settings, registry_file)
    admin = AclAdmin(settings)  # an AclError ends the command: one line, exit 1 (2 without an authorizer)
    if apply and settings.local_identities:
        for user in make_local_users(settings, principals, admin.admin):
            _say(f"{user}: SCRAM-SHA-512 user made (the secure local stack's password for it)")
    drift = admin.apply(grants, principals) if apply else admin.diff(grants, principals)
    for line in drift.lines(applied=apply):
        _say(line)
    if not drift:
        beside = f" (and {len(drift.foreign)} foreign, left alone)" if drift.foreign else ""
        _say(f"no drift: the broker holds exactly the {len(grants)} ACLs of the plan{beside}")
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
    """Create the missing ACLs and delete those an earlier apply made that the plan no
    longer holds; ACLs it did not make (by hand, DENY rules) are reported, never deleted."""
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
    from mcq.acl.users import set_scram_user

    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise click.BadParameter(f"{password_env} is not set or empty", param_hint="--password-env")
    else:
        password = click.prompt(f"password for {user}", hide_input=True, confirmation_prompt=True)
    set_scram_user(_settings(), user, password)
    _say(f"{user}: SCRAM-SHA-512 credentials set")
