"""Bring the local stack up, down, and report on it.

`up` is idempotent: a service already running and healthy is left alone. Ports are
checked for every service before anything starts, so a taken port fails at once in one
line instead of after half the stack is up.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from mcq.config import LOOPBACK, Settings
from mcq.stack.exceptions import PortInUse, ServiceFailed
from mcq.stack.services import GROUPS, OPTIONAL, SERVICES, NotReady, Service

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceStatus:
    """What `mcq stack status` shows for one service."""

    name: str
    address: str
    pid: int | None
    up: bool
    detail: str
    log: str


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


class Stack:
    """The local stack's services, in start order."""

    def __init__(self, settings: Settings, only: Iterable[str] | None = None, with_: Iterable[str] = ()) -> None:
        """All services, or only those named (their dependencies must be among them); the
        optional ones (``ad``) when named in ``with_`` or running."""
        self.settings = settings
        self.services: list[Service] = [cls(settings) for cls in SERVICES]
        extra = {name for given in with_ for name in GROUPS.get(given, (given,))}
        unknown = extra - {cls.name for cls in OPTIONAL}
        if unknown:
            names = ", ".join([*GROUPS, *(c.name for c in OPTIONAL)])
            raise KeyError(f"no optional service {sorted(unknown)}; optional: {names}")
        for cls in OPTIONAL:
            svc = cls(settings)
            if svc.name in extra or svc.handle.pid() is not None or (only is not None and svc.name in set(only)):
                self.services.append(svc)
        if only is not None:
            wanted = set(only)
            unknown = wanted - {s.name for s in self.services}
            if unknown:
                raise KeyError(f"no service {sorted(unknown)}; services: {', '.join(s.name for s in self.services)}")
            self.services = [s for s in self.services if s.name in wanted]

    def __iter__(self) -> Iterator[Service]:
        return iter(self.services)

    def service(self, name: str) -> Service:
        for svc in self.services:
            if svc.name == name:
                return svc
        raise KeyError(f"no service {name!r}; services: {', '.join(s.name for s in self.services)}")

    # -------------------------------------------------------------- queries

    def healthy(self, svc: Service) -> tuple[bool, str]:
        try:
            svc.check()
        except NotReady as exc:
            return False, str(exc)
        return True, "ok"

    def is_up(self) -> bool:
        """True when every service is running (started from this MCQ_HOME) and healthy."""
        return all(s.up for s in self.status())

    def status(self) -> list[ServiceStatus]:
        rows = []
        for svc in self.services:
            pid = svc.handle.pid()
            ok, detail = self.healthy(svc) if pid is not None else (False, "not running")
            rows.append(ServiceStatus(svc.name, svc.address, pid, ok, detail, str(svc.handle.log_file)))
        return rows

    # -------------------------------------------------------------- up

    def preflight(self) -> None:
        """Fail before starting anything when a port we need is held by someone else."""
        for svc in self.services:
            if svc.handle.pid() is not None:
                continue
            for port in svc.ports:
                if not _port_free(port):
                    raise PortInUse(
                        svc.name,
                        f"port {port} on {LOOPBACK} is already in use by another process",
                        svc.handle.log_file,
                    )

    def up(self) -> float:
        """Start what is not running and wait until every service is healthy.

        Returns the seconds it took. Services start in waves: those whose dependencies
        are healthy start together, so the JVMs overlap their warm-up.
        """
        started_at = time.monotonic()
        for sub in ("run", "logs", "data", "conf"):
            (self.settings.stack.home / sub).mkdir(parents=True, exist_ok=True)
        self.preflight()
        healthy: set[str] = set()
        pending = list(self.services)
        while pending:
            chosen = {s.name for s in self.services}
            wave = [s for s in pending if all(d in healthy or d not in chosen for d in s.depends_on)]
            if not wave:
                raise ServiceFailed(pending[0].name, f"dependencies never became healthy: {pending[0].depends_on}")
            fresh = []
            for svc in wave:
                if svc.handle.pid() is None:
                    pid = svc.start()
                    log.info(f"{svc.name}: started (pid {pid}), log {svc.handle.log_file}")
                    fresh.append(svc)
                else:
                    log.info(f"{svc.name}: already running (pid {svc.handle.pid()})")
            self._wait_healthy(wave)
            for svc in wave:
                if svc in fresh or svc.name == "postgres":
                    svc.after_start()
                for warning in svc.warnings():
                    log.warning(f"{svc.name}: warning: {warning}")
                healthy.add(svc.name)
                pending.remove(svc)
        elapsed = time.monotonic() - started_at
        log.info(f"stack up in {elapsed:.1f} s")
        return elapsed

    def _wait_healthy(self, wave: list[Service]) -> None:
        deadline = time.monotonic() + self.settings.stack.start_timeout_s
        waiting = {s.name: s for s in wave}
        reasons: dict[str, str] = {}
        t0 = time.monotonic()
        while waiting:
            for name, svc in list(waiting.items()):
                if svc.handle.pid() is None:
                    last = next((ln for ln in reversed(svc.handle.tail(30)) if ln.strip()), "no output")
                    raise ServiceFailed(
                        name, f"exited while starting; last log line: {last.strip()[:300]}", svc.handle.log_file
                    )
                ok, why = self.healthy(svc)
                if ok:
                    log.info(f"{name}: healthy at {svc.address} after {time.monotonic() - t0:.1f} s")
                    del waiting[name]
                else:
                    reasons[name] = why
            if not waiting:
                return
            if time.monotonic() > deadline:
                name, svc = next(iter(waiting.items()))
                raise ServiceFailed(
                    name,
                    f"not healthy after {self.settings.stack.start_timeout_s:.0f} s: {reasons.get(name, '?')}",
                    svc.handle.log_file,
                )
            time.sleep(1.0)

    # -------------------------------------------------------------- down

    def down(self) -> None:
        """Stop every service the stack started, dependants first; leave no process."""
        for svc in reversed(self.services):
            pid = svc.handle.pid()
            if svc.handle.stop(svc.stop_signal):
                log.info(f"{svc.name}: stopped (pid {pid})")
            else:
                log.info(f"{svc.name}: was not running")
