"""Payload templates in the registry: a listener's ``adapter.settings.template`` (Jinja, in
its immutable sandbox, undefined names an error), checked with the registry so that a
template that does not compile is refused at its line, before anything is applied.
Rendering is the adapters' (consumers/payload.py)."""

from __future__ import annotations

from typing import Any

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ENVIRONMENT = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
ENVIRONMENT.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False}


def compile_template(text: str) -> Any:
    """A compiled template; ValueError naming the line of a syntax error."""
    try:
        return ENVIRONMENT.from_string(text)
    except TemplateError as exc:
        line = getattr(exc, "lineno", None)
        raise ValueError(f"template{f' line {line}' if line else ''}: {exc}") from None


def template_problems(settings: dict[str, Any], here: tuple[str | int, ...]) -> list[tuple[tuple[str | int, ...], str]]:
    """A listener's payload template that does not compile, at its path."""
    text = settings.get("template")
    if not isinstance(text, str):
        return []
    try:
        compile_template(text)
    except ValueError as exc:
        return [((*here, "template"), str(exc))]
    return []
