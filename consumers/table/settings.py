"""Settings of the ``table`` adapter (a listener's ``adapter.settings``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from consumers.adapter import AdapterSettings
from mcq.secrets import ResolvedSecret


class TableSettings(AdapterSettings):
    table: Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$")] = "mcq_target.changes"
    """schema.table to keep the last state in; created when missing."""
    database: str = "vendor"
    """Which configured database holds it: ``vendor`` (``MCQ_VENDOR__*``, the default), ``source``,
    or a named ``postgres`` target of the configuration (``targets.<name>``)."""
    dsn: ResolvedSecret | None = None
    """A libpq connection string instead of a configured database: a reference
    (``${env:MCQ_SECRET_NAME}``) when it holds a password."""
    statement_timeout_ms: int = 10_000
    """A statement that waits longer (a lock held elsewhere) fails the change, not the listener."""
