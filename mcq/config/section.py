"""What every section of the configuration shares: its base model, its error, the
checkout it may run from and the local stack's fixed identities."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from mcq.errors import EXIT_CONFIG, McqError


def _checkout() -> Path | None:
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "mcq" / "resources").is_dir() else None


CHECKOUT: Path | None = _checkout()
"""The source checkout this package runs from (an editable install), or None when it is
installed (a wheel, the image). Only the defaults of the local stack's own directories
use it (``stack.home``, ``stack.jvm_cache``); what mcq reads at run time ships with the
package (:mod:`mcq.resources`)."""
KAFKA_ADMIN = "mcq-admin"
"""The local broker's SCRAM super user (its password: ``StackSettings.local_password``)."""
KAFKA_CONNECT = "mcq-connect"
"""The local Connect worker's identity on the broker's SASL_SSL port: no super user, only
its ACLs (``mcq.acl.plan.connect_grants``), so capture runs as least privilege wants it."""
CONNECT_REST = "mcq-connect-rest"
"""The login of the local Connect worker's REST API (its password: the stack's own, made at
random when Connect is first prepared, ``StackSettings.password_file``)."""


class ConfigError(McqError):
    """Configuration that cannot be used; the message says which setting and where."""

    exit_code = EXIT_CONFIG


class Section(BaseModel):
    """A section of the settings: unknown keys refused, frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)
