"""Payload templates: what a ``webhook`` or ``file`` target receives for a change, in the
target's own shape (a Cerebrum mailbox: the account with its owner's name and every
address), written as a Jinja template over the entity.

The template sees:

* ``entity``: the row as a nested document (an entity's ``owner.name`` under
  ``entity.owner.name``, its ``addresses`` as a list); None for a delete;
* ``before``: the same for the state before, when the change carries it;
* ``key`` (the key fields), ``change_type``, ``cause``, ``listener``, ``change``
  (the whole change as the default JSON payload has it).

Templates run in Jinja's immutable sandbox (no attribute of Python objects beyond the
data, no writes), with undefined names an error: a template that names a field an entity
lacks fails for that entity, which is dead-lettered with the reason while the others
flow on. A template that does not compile is the listener's configuration error.
"""

from __future__ import annotations

import json
from typing import Any

from jinja2 import TemplateError
from pydantic import field_validator

from consumers.adapter import AdapterSettings
from consumers.exceptions import ChangeRejected
from mcq.change import Change
from mcq.registry.entities import unflatten
from mcq.registry.model import Registry
from mcq.registry.templates import compile_template

__all__ = ["Payload", "PayloadSettings", "compile_template", "document"]


def document(registry: Registry | None, change: Change, row: dict[str, str | None] | None) -> dict[str, Any] | None:
    """A change's row as the nested document a template reads."""
    if row is None:
        return None
    table = registry.table(change.key.tname, change.key.subtype) if registry is not None else None
    many = table.entity.many_names() if table is not None and table.entity is not None else []
    return unflatten(row, many)


class PayloadSettings(AdapterSettings):
    """The settings of an adapter whose payload a template may shape (``webhook``, ``file``)."""

    template: str | None = None
    """The payload as a Jinja template over the change's entity (this module); it must
    render JSON. Unset: the change as JSON (``Change.as_json``)."""

    @field_validator("template")
    @classmethod
    def _template_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            compile_template(value)
        return value


class Payload:
    """A listener's payload template, rendered per change."""

    def __init__(self, text: str, as_json: bool) -> None:
        self.template = compile_template(text)
        self.as_json = as_json

    def render(self, listener: str, registry: Registry | None, change: Change) -> str:
        """The payload of one change; ChangeRejected (dead-letter, with the reason) when the
        template cannot be rendered for it or, for a JSON payload, does not render JSON."""
        context = {
            "entity": document(registry, change, change.state),
            "before": document(registry, change, change.before),
            "key": change.key.as_dict(),
            "change_type": change.change_type,
            "cause": change.cause,
            "listener": listener,
            "change": change.as_json(),
        }
        try:
            text = str(self.template.render(context))
        except (TemplateError, TypeError, ValueError, ArithmeticError) as exc:
            raise ChangeRejected(f"payload template for {change.key}: {type(exc).__name__}: {exc}") from None
        if self.as_json:
            try:
                text = json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False)
            except ValueError as exc:
                raise ChangeRejected(f"payload template for {change.key} did not render JSON: {exc}") from None
        return text
