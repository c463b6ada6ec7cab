"""Errors of the local stack. Each message is one line: service, reason, log file.

StackError
├── MissingRuntime      a binary or the JVM artifact cache is missing (run `make install`)
├── PortInUse           another process holds a port the stack needs
└── ServiceFailed       a service exited, or did not become healthy in time
"""

from __future__ import annotations

from pathlib import Path

from mcq.errors import McqError


class StackError(McqError):
    """Something the local stack cannot do; ``str()`` is the one line to show."""

    def __init__(self, service: str, reason: str, log: Path | None = None) -> None:
        self.service = service
        self.reason = reason
        self.log = log
        where = f" (log: {log})" if log else ""
        super().__init__(f"{service}: {reason}{where}")


class MissingRuntime(StackError):
    """A program or artifact the service runs from is not installed."""


class PortInUse(StackError):
    """A port of the stack is held by a process the stack did not start."""


class ServiceFailed(StackError):
    """A service died while starting or did not pass its health check in time."""
