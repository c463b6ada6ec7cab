"""What can go wrong while a listener applies changes, and what the runtime does about it.

::

    ConsumerError                    (mcq.errors.McqError)
     ├── AdapterError                 raised by an adapter's apply()
     │    ├── TargetUnavailable       the target is down: retry the same change with back-off,
     │    │                           forever; nothing parks, lag grows, readiness goes false
     │    ├── ChangeFailed            this change failed, may succeed later: retry in place, then
     │    │                           park in the retry lane, dead-letter after N attempts
     │    └── ChangeRejected          the target will never take this change: dead-letter now
     ├── KafkaUnavailable             a read the broker could not answer now (a restart,
     │                                leaders being elected): wait for it and ask again
     ├── ListenerConfigError          unknown listener or adapter, bad adapter settings
     ├── LdapConnectError             the directory cannot be reached or refused the bind
     │                                (consumers.ldap.connection)
     └── DeadLetterError              a dead-letter entry that cannot be found or requeued

An undecodable record is :class:`mcq.change.BadChange`; the runtime dead-letters it.
Messages name the listener and the record (topic[partition]@offset) where there is one.
"""

from __future__ import annotations

from mcq.errors import EXIT_CONFIG, McqError


class ConsumerError(McqError):
    """Base of everything the listener runtime raises."""


class AdapterError(ConsumerError):
    """An adapter could not apply a change."""


class TargetUnavailable(AdapterError):
    """The target cannot be reached at all (connection refused, authentication, timeout)."""

    retriable = True


class ChangeFailed(AdapterError):
    """This change failed and may succeed on a later attempt (lock, constraint, 5xx)."""

    retriable = True


class ChangeRejected(AdapterError):
    """The target refused this change for good (4xx, a business rule that will not change)."""


class KafkaUnavailable(ConsumerError):
    """The broker could not answer a read now (a restart, leaders still being elected): the
    runtime waits for it and asks again (``consumers.runtime.outage``)."""


class ListenerConfigError(ConsumerError):
    """A listener cannot run as configured."""

    exit_code = EXIT_CONFIG


class DeadLetterError(ConsumerError):
    """A dead-letter console operation failed."""
