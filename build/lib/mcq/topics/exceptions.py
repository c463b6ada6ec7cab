"""Errors of ``mcq.topics``: Kafka topics planned, created and read.

::

    TopicError
    ├── TopicSettingsError    settings the cluster cannot satisfy (more replicas than brokers)
    └── TopicReadError        a topic not read to its end; ``retriable`` when the broker was
                              unreachable or electing leaders, so asking again later may succeed
"""

from __future__ import annotations

from mcq.errors import EXIT_CONFIG, McqError


class TopicError(McqError):
    """Base of every topic error; the message names the topic and why."""


class TopicSettingsError(TopicError):
    """Topic settings the cluster cannot satisfy (more replicas than brokers)."""

    exit_code = EXIT_CONFIG


class TopicReadError(TopicError):
    """The topic could not be read to its end; the message names it and why.
    ``retriable``: the broker was unreachable or still electing leaders (a restart), so
    asking again later may succeed; otherwise asking again is pointless."""

    def __init__(self, message: str, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable
