"""Settings of the ``file`` adapter (a listener's ``adapter.settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import model_validator

from consumers.payload import PayloadSettings


class FileSettings(PayloadSettings):
    """``template``: each change's line (consumers/payload.py; ``jsonl`` only)."""

    directory: Path
    """Where batch files appear (created when missing); relative to the working directory."""
    format: Literal["jsonl", "xml"] = "jsonl"

    @model_validator(mode="after")
    def _template_is_jsonl(self) -> FileSettings:
        if self.template is not None and self.format != "jsonl":
            raise ValueError("template needs format jsonl (each change one JSON line)")
        return self
