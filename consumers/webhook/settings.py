"""Settings of the ``webhook`` adapter (a listener's ``adapter.settings``)."""

from __future__ import annotations

import ssl
from pathlib import Path

from pydantic import AnyHttpUrl, model_validator

from consumers.payload import PayloadSettings
from mcq.secrets import ResolvedSecret, ResolvedText


class WebhookSettings(PayloadSettings):
    """``template``: the body (consumers/payload.py); unset, the change as JSON with ``listener``."""

    url: AnyHttpUrl
    timeout_s: float = 10.0
    headers: dict[str, ResolvedText] = {}
    """Extra headers; a value may be a reference (``Authorization: ${env:MCQ_SECRET_HOOK_AUTH}``)."""
    bearer_token: ResolvedSecret | None = None
    """Sent as ``Authorization: Bearer ...``; a reference (``${env:MCQ_SECRET_NAME}``, ``${file:PATH}``)
    resolved when the listener starts; never printed."""
    ca_file: Path | None = None
    """The CA bundle (PEM) that signed the endpoint's certificate (unset: the system's CAs).
    The certificate and host name are always verified."""
    client_cert: Path | None = None
    """A client certificate (PEM) for mutual TLS; ``client_key`` is its key (or in the same file)."""
    client_key: Path | None = None

    @model_validator(mode="after")
    def _key_needs_cert(self) -> WebhookSettings:
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("client_key without client_cert")
        return self

    def ssl_context(self) -> ssl.SSLContext:
        """Verification against ca_file (or the system's CAs), with the client certificate if any;
        a file that cannot be read or is not PEM raises ``ssl.SSLError``/``OSError`` naming it."""
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        if self.client_cert is not None:
            context.load_cert_chain(str(self.client_cert), str(self.client_key) if self.client_key else None)
        return context
