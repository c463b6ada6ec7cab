"""Settings of the ``sql_import`` adapter (a listener's ``adapter.settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, StringConstraints

from consumers.adapter import AdapterSettings
from mcq.registry.mappings import ImportMapping
from mcq.resources import ResourceMissing, resource
from mcq.secrets import ResolvedSecret

Ident = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]*$")]


class SqlImportSettings(AdapterSettings):
    table: Ident
    """The vendor's import table: one INSERT per record pushed; its trigger does the rest."""
    vendor_schema: Ident
    """Where the import table lives (``{schema}`` in the install and read-back scripts)."""
    database: str = "vendor"
    dsn: ResolvedSecret | None = None
    """A libpq connection string instead of a configured database (a reference when it holds
    a password: ``${env:MCQ_SECRET_NAME}``)."""
    statement_timeout_ms: int = 10_000
    install: Path | None = None
    """A vendor schema script to run when the import table is missing (the sample:
    ``examples/insite_import.sql``); relative paths are from the working directory, and
    ``examples/<name>`` that is not there names the sample shipped with the package."""

    def install_path(self) -> Path | None:
        return _script_path(self.install)

    def read_back_path(self) -> Path | None:
        return _script_path(self.read_back)

    read_back: Path | None = None
    """A SQL file of a query returning what the vendor holds per record (what ``mcq
    reconcile`` compares; relative paths as for ``install``), with columns named as the
    mapped import columns, and ``retired``: true for a row the vendor keeps for a record
    that is gone (INSITE's ``Former-<status>``). None: the target cannot be read back. The
    sample, for INSITE: ``examples/insite_read_back.sql``."""

    rows: dict[str, ImportMapping] = Field(min_length=1)
    """What each table the listener is interested in pushes, declared (mcq.registry.mappings):
    import column -> expression."""


def _script_path(path: Path | None) -> Path | None:
    """``path`` as given (absolute, or from the working directory); a relative
    ``examples/<name>`` that is not there is the sample shipped with the package."""
    if path is None or path.is_absolute() or path.exists() or len(path.parts) != 2 or path.parts[0] != "examples":
        return path
    try:
        return Path(str(resource("examples", path.parts[1])))
    except ResourceMissing:
        return path
