"""Settings of the ``file`` adapter (a listener's ``adapter.settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from consumers.adapter import AdapterSettings


class FileSettings(AdapterSettings):
    directory: Path
    """Where batch files appear (created when missing); relative to the working directory."""
    format: Literal["jsonl", "xml"] = "jsonl"
