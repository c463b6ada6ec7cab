"""Settings of the ``webhook`` adapter (a listener's ``adapter.settings``)."""

from __future__ import annotations

from pydantic import AnyHttpUrl

from consumers.adapter import AdapterSettings
from mcq.secrets import ResolvedSecret, ResolvedText


class WebhookSettings(AdapterSettings):
    url: AnyHttpUrl
    timeout_s: float = 10.0
    headers: dict[str, ResolvedText] = {}
    """Extra headers; a value may be a reference (``Authorization: ${env:HOOK_AUTH}``)."""
    bearer_token: ResolvedSecret | None = None
    """Sent as ``Authorization: Bearer ...``; a reference (``${env:NAME}``, ``${file:PATH}``)
    resolved when the listener starts; never printed."""
