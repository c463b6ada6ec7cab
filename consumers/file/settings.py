"""Settings of the ``file`` adapter (a listener's ``adapter.settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import field_validator, model_validator

from consumers.adapter import AdapterSettings
from consumers.payload import compile_template


class FileSettings(AdapterSettings):
    directory: Path
    """Where batch files appear (created when missing); relative to the working directory."""
    format: Literal["jsonl", "xml"] = "jsonl"
    template: str | None = None
    """Each change's line as a Jinja template over its entity (consumers/payload.py), which
    must render JSON (``jsonl`` only). Unset: the change as JSON."""

    @field_validator("template")
    @classmethod
    def _template_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            compile_template(value)
        return value

    @model_validator(mode="after")
    def _template_is_jsonl(self) -> FileSettings:
        if self.template is not None and self.format != "jsonl":
            raise ValueError("template needs format jsonl (each change one JSON line)")
        return self
