"""Secrets by reference. A registry is stored in a Kafka topic and shown by ``mcq registry
show``, the console and the chart's ConfigMap, so a secret in it (a webhook's token, a
target's password) is written as a reference and read where it is used:

    ${env:MCQ_SECRET_NAME}  the environment variable of the process that uses it
    ${file:PATH}            the content of PATH (a mounted Kubernetes Secret), without its
                            last newline; a relative PATH is read from the secrets directory

A reference resolves only what the deployment set aside for it: an environment variable
whose name starts with ``MCQ_SECRET_``, or a file inside a secrets directory
(``MCQ_SECRETS_DIR``, default ``/run/secrets``; several joined by ``:``), symbolic links
followed before the check. Whoever may write the registry can therefore never make a
listener read, and post to a webhook, the process's own credentials
(``MCQ_KAFKA__SASL_PASSWORD``), another variable or any other file
(:class:`SecretRefused`).

``literal_secrets`` finds values that should have been references, and references that
can never resolve (the registry loader refuses them, file:line); ``resolve`` turns a
reference into a ``SecretStr``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, SecretStr

from mcq.errors import EXIT_CONFIG, McqError

REFERENCE = re.compile(r"^\$\{(env|file):([^}]+)\}$")
SECRET_KEY = re.compile(
    r"password|passwd|secret|token|credential|authorization|api[_-]?key|private[_-]?key", re.IGNORECASE
)
SHOWN_SECRET_KEY = re.compile(
    SECRET_KEY.pattern + r"|ssl\.key\b|keystore|truststore\.|\.config$|jaas|oauthbearer|keytab", re.IGNORECASE
)
"""Keys whose values are not shown (``mcq config``): SECRET_KEY's, and the client settings
that carry a key or a secret inside a larger value (``ssl.key.pem``,
``sasl.oauthbearer.config``, ``sasl.jaas.config``, a keystore)."""
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/:@\s]*:)[^@\s]*(?P<at>@)", re.IGNORECASE)
_DSN_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
MASK = "**********"
SECRET_ENV_PREFIX = "MCQ_SECRET_"
SECRETS_DIR_ENV = "MCQ_SECRETS_DIR"
DEFAULT_SECRETS_DIR = "/run/secrets"
HOW = f"write a reference instead: ${{env:{SECRET_ENV_PREFIX}NAME}} or ${{file:PATH}} (in the secrets directory)"


class SecretUnresolved(McqError):
    """A reference whose variable is not set or whose file cannot be read."""

    exit_code = EXIT_CONFIG


class SecretRefused(SecretUnresolved):
    """A reference to something the deployment did not set aside for secrets (a variable
    without the ``MCQ_SECRET_`` prefix, a file outside the secrets directories)."""


def secrets_dirs() -> list[Path]:
    """The directories ``${file:…}`` may read from (``MCQ_SECRETS_DIR``), resolved."""
    raw = os.environ.get(SECRETS_DIR_ENV, DEFAULT_SECRETS_DIR)
    return [Path(p).resolve() for p in raw.split(os.pathsep) if p]


def is_reference(value: object) -> bool:
    return isinstance(value, str) and REFERENCE.match(value) is not None


def _dsn_has_password(value: str) -> bool:
    from psycopg.conninfo import conninfo_to_dict  # only when a registry has a DSN

    try:
        return bool(conninfo_to_dict(value).get("password"))
    except Exception:  # not a conninfo at all: the adapter says so when it connects
        return False


def literal_secrets(settings: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every value under SETTINGS that is a secret written in clear: (its path, what to do)."""
    if isinstance(settings, dict):
        for key, value in settings.items():
            here = (*path, key)
            if isinstance(value, dict | list):
                yield from literal_secrets(value, here)
            elif isinstance(value, str) and (match := REFERENCE.match(value)):
                if match.group(1) == "env" and not match.group(2).startswith(SECRET_ENV_PREFIX):
                    yield (
                        here,
                        f"${{env:{match.group(2)}}} can never resolve: only variables named "
                        f"{SECRET_ENV_PREFIX}* may be referenced",
                    )
            elif not isinstance(value, str) or not value:
                continue
            elif SECRET_KEY.search(str(key)):
                yield here, f"a secret in clear (the registry is stored in a Kafka topic): {HOW}"
            elif str(key).lower() == "dsn" and _dsn_has_password(value):
                yield (
                    here,
                    f"a connection string with its password in clear (the registry is stored in a Kafka topic): {HOW}",
                )
    elif isinstance(settings, list):
        for i, item in enumerate(settings):
            yield from literal_secrets(item, (*path, i))


def resolve(value: str, where: str) -> SecretStr:
    """The secret VALUE refers to (a value that is no reference is returned as it is: a DSN
    without a password). ``where`` names the setting in the error."""
    match = REFERENCE.match(value)
    if match is None:
        return SecretStr(value)
    kind, name = match.groups()
    if kind == "env":
        if not name.startswith(SECRET_ENV_PREFIX):
            raise SecretRefused(
                f"{where}: ${{env:{name}}}: refused: only variables named {SECRET_ENV_PREFIX}* may be referenced"
            )
        found = os.environ.get(name)
        if found is None:
            raise SecretUnresolved(f"{where}: ${{env:{name}}}: the environment variable {name} is not set")
        return SecretStr(found)
    dirs = secrets_dirs()
    path = Path(name) if Path(name).is_absolute() or not dirs else dirs[0] / name
    real = path.resolve()
    if not any(real.is_relative_to(d) for d in dirs):
        where_ = ", ".join(map(str, dirs)) or "none"
        raise SecretRefused(
            f"{where}: ${{file:{name}}}: refused: not inside a secrets directory ({SECRETS_DIR_ENV}: {where_})"
        )
    try:
        return SecretStr(real.read_text().removesuffix("\n"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretUnresolved(f"{where}: ${{file:{name}}}: cannot read: {getattr(exc, 'strerror', exc)}") from None


def _resolved(value: object) -> object:
    if isinstance(value, str) and is_reference(value):
        try:
            return resolve(value, "reference").get_secret_value()
        except SecretUnresolved as exc:
            raise ValueError(str(exc).removeprefix("reference: ")) from None
    return value


ResolvedSecret = Annotated[SecretStr, BeforeValidator(_resolved)]
"""A settings field holding a secret or a reference to one, resolved when the model is built."""
ResolvedText = Annotated[str, BeforeValidator(_resolved)]
"""Text that may be a reference (a header value such as ``Authorization``)."""


def masked(data: Any) -> Any:
    """``data`` (settings as JSON-ready values) with every secret masked: the values of keys
    :data:`SHOWN_SECRET_KEY` matches, and a password inside a URL (``scheme://user:pw@``) or
    a connection string (``password=pw``)."""
    if isinstance(data, dict):
        return {
            k: MASK if SHOWN_SECRET_KEY.search(str(k)) and isinstance(v, str) and v else masked(v)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [masked(v) for v in data]
    if isinstance(data, str):
        text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}{m['at']}", data)
        return _DSN_PASSWORD.sub(lambda m: f"{m['head']}{MASK}", text)
    return data
