"""``mcq console``: the operator's web console (``mcq.console``), in the foreground or beside
the local stack."""

from __future__ import annotations

import os
import signal
from contextlib import suppress

import click

from mcq.cli.app import EXIT_CONFIG, _say, _settings, _stop, main


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
        _stop(
            "mcq console: no one could log in: set MCQ_CONSOLE__USERS__<NAME>__PASSWORD_HASH (from "
            "`mcq console --hash-password`) and __ROLE (read or admin), or console.trusted_user_header",
            EXIT_CONFIG,
        )
    host, _, port_text = (bind or settings.console.bind).rpartition(":")
    if not host or not port_text.isdigit():
        raise click.BadParameter(f"{bind!r} is not HOST:PORT", param_hint="--bind")
    if background:
        try:
            pid = local.start_background(settings, f"{host}:{port_text}")
        except RuntimeError as exc:
            _stop(f"mcq console: {exc}")
        who = f"log in as {local.LOCAL_ADMIN}, password in {local.password_file(settings)}" if local_admin else ""
        _say(f"mcq console at http://{host}:{port_text} (pid {pid}; {who or 'console.users log in'})")
        return
    tls = settings.console
    if (tls.tls_cert is None) != (tls.tls_key is None):
        raise click.UsageError("console.tls_cert and console.tls_key go together: set both, or neither")
    app = create_app(settings)
    scheme = "https" if tls.tls_cert else "http"
    _say(f"mcq console at {scheme}://{host}:{port_text} ({len(settings.console.users)} user(s); Ctrl-C stops it)")
    config = uvicorn.Config(
        app,
        host=host,
        port=int(port_text),
        log_level="warning",
        access_log=False,
        ssl_certfile=str(tls.tls_cert) if tls.tls_cert else None,
        ssl_keyfile=str(tls.tls_key) if tls.tls_key else None,
    )
    with suppress(KeyboardInterrupt):
        uvicorn.Server(config).run()
