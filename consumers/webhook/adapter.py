"""POST each change as JSON, with an ``Idempotency-Key`` header (the change's key and source
position: the same change always carries the same key, so the receiver can drop a
repeat).

A 2xx accepts the change. A timeout, 408, 429 or 5xx fails it for now (retried, parked,
dead-lettered after N attempts); any other 4xx rejects it for good: dead-lettered at
once with the response body. A refused connection means the target is down: the
listener waits for it.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx

from consumers.adapter import Adapter
from consumers.exceptions import ChangeFailed, ChangeRejected, ListenerConfigError, TargetUnavailable
from consumers.payload import Payload
from consumers.webhook.settings import WebhookSettings
from mcq.change import Change
from mcq.config import Settings
from mcq.registry.model import Listener

RETRYABLE = {408, 425, 429}


class WebhookAdapter(Adapter):
    kind = "webhook"
    settings_model = WebhookSettings
    settings: WebhookSettings
    _client: httpx.Client | None = None

    def __init__(self, listener: Listener, settings: Settings) -> None:
        super().__init__(listener, settings)
        self.payload = Payload(self.settings.template, as_json=True) if self.settings.template else None
        try:  # at start: a CA or client certificate that cannot be used is a configuration error
            self._verify = self.settings.ssl_context()
        except (OSError, ssl.SSLError) as exc:
            raise ListenerConfigError(
                f"listener {listener.name}: adapter webhook: TLS files (ca_file, client_cert, client_key): {exc}"
            ) from None

    def open(self) -> None:
        if self._client is None:
            headers = dict(self.settings.headers)
            if self.settings.bearer_token is not None:
                headers["Authorization"] = f"Bearer {self.settings.bearer_token.get_secret_value()}"
            self._client = httpx.Client(timeout=self.settings.timeout_s, headers=headers, verify=self._verify)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def body(self, change: Change) -> str:
        """What is POSTed for a change (ChangeRejected when its template fails for it)."""
        if self.payload is not None:
            return self.payload.render(self.listener.name, self.registry, change)
        body: dict[str, Any] = {"listener": self.listener.name, **change.as_json()}
        return json.dumps(body)

    def preview(self, change: Change) -> str:
        return json.dumps(json.loads(self.body(change)), indent=2, sort_keys=True, ensure_ascii=False)

    def apply(self, change: Change) -> None:
        body = self.body(change)
        self.open()
        assert self._client is not None
        url = str(self.settings.url)
        headers = {"Idempotency-Key": change.idempotency_key, "Content-Type": "application/json"}
        try:
            response = self._client.post(url, content=body.encode(), headers=headers)
        except httpx.ConnectError as exc:
            raise TargetUnavailable(f"webhook {url}: {exc}") from None
        except httpx.TimeoutException:
            raise ChangeFailed(f"webhook {url}: no answer within {self.settings.timeout_s:.0f} s") from None
        except httpx.HTTPError as exc:
            raise ChangeFailed(f"webhook {url}: {exc}") from None
        if response.is_success:
            return
        text = response.text[:2000]
        message = f"webhook {url}: HTTP {response.status_code} for {change.key}: {text}"
        if response.status_code >= 500 or response.status_code in RETRYABLE:
            raise ChangeFailed(message)
        raise ChangeRejected(message)
