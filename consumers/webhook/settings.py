"""Settings of the ``webhook`` adapter (a listener's ``adapter.settings``)."""

from __future__ import annotations

from pydantic import AnyHttpUrl, SecretStr

from consumers.adapter import AdapterSettings


class WebhookSettings(AdapterSettings):
    url: AnyHttpUrl
    timeout_s: float = 10.0
    headers: dict[str, str] = {}
    bearer_token: SecretStr | None = None
    """Sent as ``Authorization: Bearer ...``; never printed."""
