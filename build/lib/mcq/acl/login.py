"""A process's first question to Kafka: does the broker accept its login?

A client whose SASL credentials the broker refuses is told so only through librdkafka's
error callback; every request it then makes ends in "all broker connections are down",
which names neither the user nor the reason. A process asks once at its start, and stops
with one line that says both.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException

from mcq.acl.exceptions import LoginRefused
from mcq.config import Settings
from mcq.topics.named import metadata_admin

LOGIN_PROBE = "__consumer_offsets"
"""The topic a login check asks about: every cluster has it, and an answer that it may not
be described is still an answer."""
REFUSALS = (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED)


def check_login(settings: Settings, timeout_s: float = 15.0) -> None:
    """Return when the broker answers ``settings.kafka``'s client; raise :class:`LoginRefused`
    when it refused the login. A broker that does not answer at all is left to the caller's
    own waiting (it may be restarting)."""
    errors: list[KafkaError] = []
    admin = metadata_admin(settings, error_cb=errors.append)
    deadline = time.monotonic() + timeout_s
    refused = None
    while refused is None and time.monotonic() < deadline:
        try:
            # one topic by name, whatever the answer about it: all of a cluster's took 0.1-0.3 s
            admin.list_topics(topic=LOGIN_PROBE, timeout=1.0)
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
