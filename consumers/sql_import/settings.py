"""Settings of the ``sql_import`` adapter (a listener's ``adapter.settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import SecretStr, StringConstraints

from consumers.adapter import AdapterSettings
from mcq.config import PROJECT_ROOT

Ident = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]*$")]


class SqlImportSettings(AdapterSettings):
    table: Ident = "simon_person_import"
    """The vendor's import table: one INSERT per person pushed; its trigger does the rest."""
    vendor_schema: Ident = "insite"
    """Where the import table lives (the install script's ``insite`` is replaced by it)."""
    database: Literal["vendor", "source"] = "vendor"
    dsn: SecretStr | None = None
    statement_timeout_ms: int = 10_000
    install: Path | None = None
    """A vendor schema script to run when the import table is missing (the sample:
    ``examples/insite_import.sql``); relative paths are from the project."""

    def install_path(self) -> Path | None:
        if self.install is None:
            return None
        return self.install if self.install.is_absolute() else PROJECT_ROOT / self.install

    state: Literal["topics", "source"] = "topics"
    """Where records are assembled from: a store kept from the compacted topics (no access
    to the source needed; a replay rebuilds it), or read through to the source database."""
