"""The root of every error mcq raises on purpose, and what a caller does with one.

Every error a user can meet derives from :class:`McqError`. Its message is one line that
says what and where (file:line, topic[partition]@offset, a service and its log); two
class attributes tell the caller what to do with it:

- ``retriable``: the same call may succeed later (a broker or target that is down, a
  leader election); a runtime retries with back-off, a command says "try again".
  Otherwise retrying is pointless: fix what the message names (confluent-kafka's
  ``KafkaError.retriable()`` answers the same question for the broker's errors).
- ``exit_code``: what the command line exits with when the error reaches it: 2 for
  configuration or usage that is not right (click's own convention), 1 for a step that
  failed.

Each package keeps its own root under this one, drawn in its own module::

    McqError
    ├── ConfigError                      mcq.config            settings that cannot be used (exit 2)
    ├── SecretUnresolved                 mcq.secrets           a secret reference that does not resolve (exit 2)
    ├── RegistryError                    mcq.registry.exceptions   mcq's registry (file, rules, store)
    ├── ContractError                    mcq.contract          the *schema* registry and the change contract
    │   ├── SchemaRefused                                      a schema refused (incompatible, invalid)
    │   └── SchemaRegistryUnavailable                          it did not answer (retriable)
    ├── BadChange                        mcq.change            a record that is not a change (dead-letter it)
    ├── TopicError                       mcq.topics            Kafka topics
    │   ├── TopicSettingsError                                 settings the cluster cannot satisfy
    │   └── TopicReadError                                     a topic not read to its end (retriable or not)
    ├── CaptureError                     mcq.capture           the source refused what capture needs
    │   └── SlotReadError                                      replication slots could not be read
    ├── ConnectError                     mcq.connect_rest      Kafka Connect refused a request
    ├── AclError                         mcq.acl.exceptions    ACLs, SCRAM users, a refused login
    ├── StackError                       mcq.stack.exceptions  the local stack of services
    ├── HealthAddressTaken               mcq.health            a health endpoint's port is taken (exit 2)
    ├── StreamsError                     streams.exceptions    the Spark jobs (normaliser, refresh, ...)
    └── ConsumerError                    consumers.exceptions  listeners, adapters, dead letters

This module imports nothing: any module may raise these without pulling in the rest.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_FAILED = 1
EXIT_CONFIG = 2


class McqError(Exception):
    """Base of every error mcq raises on purpose; ``str()`` is the line to show."""

    retriable: bool = False
    """The same call may succeed later; otherwise fix what the message names (an instance
    may know better than its class: :class:`mcq.topics.TopicReadError`)."""

    exit_code: ClassVar[int] = EXIT_FAILED
    """What ``mcq`` exits with when this error ends a command."""


def first_line(exc: BaseException) -> str:
    """The first line of an error's message, or its type's name when it has none."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
