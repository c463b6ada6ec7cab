"""Errors of the Spark jobs: the normaliser, refresh, reconcile, rebuild and the report.

::

    StreamsError                  (mcq.errors.McqError)
    ├── SparkSetupError           Spark cannot start as configured: what is missing
    │   └── ArchiveError          the driver JVM's class-data archive could not be built;
    │                             Spark starts without it (streams/jvm_archive.py)
    ├── NormalizeError            the normaliser cannot run as configured: what to change
    ├── SelectionError            a refresh's selection is not right (unknown table, a rule that
    │                             does not parse, a key file's bad line at file:line); exit 2
    ├── SourceReadError           the source cannot be read as the registry describes it
    ├── RefreshError              a refresh did not finish; running it again is the recovery
    └── ReportError               a report that cannot be made as asked (a period it cannot
                                  read); exit 2

A rebuild's refused changes are :class:`streams.jobs.rebuild.RebuildFailed`, a
:class:`consumers.exceptions.ConsumerError`: they come from a listener's target.
"""

from __future__ import annotations

from mcq.errors import EXIT_CONFIG, McqError


class StreamsError(McqError):
    """Base of every error of the Spark jobs; the message says what and where."""


class SparkSetupError(StreamsError):
    """Spark cannot be started as configured; the message says what is missing."""


class ArchiveError(SparkSetupError):
    """The driver JVM's class-data archive could not be built: Spark starts without one
    (seconds slower, nothing else); the message says which run failed and its last lines."""


class NormalizeError(StreamsError):
    """The normaliser cannot run as configured; the message says what to change."""


class SelectionError(StreamsError):
    """The selection is not right (unknown table, a rule that does not parse, a bad line in
    a key file): the message names what and where. Nothing was done."""

    exit_code = EXIT_CONFIG


class SourceReadError(StreamsError):
    """The source cannot be read as the registry describes it: the database is not
    reachable, or a feed's table or column is not there (named schema.table.column)."""


class RefreshError(StreamsError):
    """The refresh did not finish; what was written to the bulk lane stays (it is state:
    applying it twice is harmless), so running the command again is the recovery."""


class ReportError(StreamsError):
    """A report that cannot be made as asked; the message says why."""

    exit_code = EXIT_CONFIG
