"""A process's first question to Kafka: does the broker accept its login?

A client whose SASL credentials the broker refuses is told so only through librdkafka's
error callback; every request it then makes ends in "all broker connections are down",
which names neither the user nor the reason. A process asks once at its start, and stops
with one line that says both.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from mcq.acl.exceptions import LoginRefused
from mcq.config import Settings

REFUSALS = (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED)


def check_login(settings: Settings, timeout_s: float = 15.0) -> None:
    """Return when the broker answers ``settings.kafka``'s client; raise :class:`LoginRefused`
    when it refused the login. A broker that does not answer at all is left to the caller's
    own waiting (it may be restarting)."""
    errors: list[KafkaError] = []
    conf: dict[str, Any] = {**settings.kafka.client_config(), "error_cb": errors.append}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout_s
    refused = None
    while refused is None and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1.0)
            return
        except KafkaException:
            admin.poll(0.2)  # serves the error callbacks
        refused = next((e for e in errors if e.code() in REFUSALS), None)
    if refused is None:
        return
    kafka = settings.kafka
    who = f"the login of {kafka.sasl_username!r}" if kafka.sasl_username else "this client's connection"
    hint = ""
    if settings.stack.secure:
        hint = "; on the secure local stack, `mcq acl apply` makes the users of the registry's principals"
    raise LoginRefused(f"Kafka at {kafka.bootstrap_servers} refused {who}: {refused.str()}{hint}")
