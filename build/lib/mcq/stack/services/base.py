"""What every service of the local stack is (:class:`Service`: prepare, start, check, stop) and
what the Java ones share (:class:`JvmService`: the Maven-resolved classpath, heap, log4j2)."""

from __future__ import annotations

import os
import signal
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from mcq.config import Settings
from mcq.stack.exceptions import MissingRuntime, ServiceFailed
from mcq.stack.process import ProcessHandle, as_user

if TYPE_CHECKING:
    pass


class NotReady(Exception):
    """A health check that did not pass (yet); the message says why."""


class Service(ABC):
    """One server of the stack."""

    name: ClassVar[str]
    depends_on: ClassVar[tuple[str, ...]] = ()
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = settings.stack.home
        self.handle = ProcessHandle(
            name=self.name,
            pid_file=self.home / "run" / f"{self.name}.pid",
            log_file=self.home / "logs" / f"{self.name}.log",
            marker=self.marker,
        )

    @property
    def data_dir(self) -> Path:
        return self.home / "data" / self.name

    @property
    def conf_dir(self) -> Path:
        return self.home / "conf" / self.name

    @property
    @abstractmethod
    def marker(self) -> str:
        """A string of the command line that identifies this service's process."""

    @property
    @abstractmethod
    def ports(self) -> tuple[int, ...]:
        """Ports the service listens on (all on 127.0.0.1)."""

    @property
    @abstractmethod
    def address(self) -> str:
        """Where clients reach the service."""

    def prepare(self) -> None:  # noqa: B027 - a hook: most services need no preparation
        """Create configuration and one-time state; safe to run on every start."""

    @abstractmethod
    def argv(self) -> list[str]:
        """The command that runs the service in the foreground."""

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def run_as(self) -> str | None:
        return None

    @abstractmethod
    def check(self) -> None:
        """Raise :class:`NotReady` unless the service answers a real request."""

    def after_start(self) -> None:  # noqa: B027 - a hook: most services need nothing after start
        """Work that needs the running service (databases, base entries)."""

    def warnings(self) -> list[str]:
        """What the user should know before the service fails on it (said by ``stack up``)."""
        return []

    def start(self) -> int:
        self.prepare()
        return self.handle.spawn(self.argv(), self.env(), cwd=self.home, user=self.run_as())

    def _require(self, path: Path, what: str) -> Path:
        if not path.exists():
            raise MissingRuntime(self.name, f"{what} not found at {path}; run `make install`", self.handle.log_file)
        return path

    def _run(self, argv: list[str], user: str | None = None, hide: tuple[str, ...] = ()) -> None:
        """Run a preparation command, its output into the service log (the HIDE values masked
        in its logged command line); fail in one line."""
        self.handle.log_file.parent.mkdir(parents=True, exist_ok=True)
        shown = " ".join(argv)
        for secret in hide:
            shown = shown.replace(secret, "**********")
        with self.handle.log_file.open("ab") as log:
            log.write(f"\n=== mcq: {shown}\n".encode())
            log.flush()
            rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False, **as_user(user)).returncode
        if rc != 0:
            raise ServiceFailed(self.name, f"`{Path(argv[0]).name}` exited with {rc}", self.handle.log_file)


LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
logger.debezium.name = io.debezium
logger.debezium.level = INFO
logger.tasks.name = org.apache.kafka.connect.runtime.Worker
logger.tasks.level = INFO
logger.started.name = kafka.server.BrokerServer
logger.started.level = INFO
"""
# WARN and up, but for what an operator reads the log for: Debezium's own lines (snapshot,
# streaming, slot and WAL positions), Connect starting and stopping tasks, the broker
# started. The broker's INFO lines are several per partition created or loaded: 77 MB at
# the start of a broker holding a test run's topics.


class JvmService(Service, ABC):
    """A Java server run from the Maven-resolved cache."""

    heap: ClassVar[str]
    main_class: ClassVar[str]
    gc: ClassVar[tuple[str, ...]] = ("-XX:+UseSerialGC",)
    """Two cores: no parallel GC threads fighting the pipeline, unless a service needs better."""

    @property
    def libs(self) -> Path:
        return self.settings.stack.jvm_cache / "kafka"

    @property
    def marker(self) -> str:
        return f"-Dmcq.service={self.name}"

    def jvm_flags(self) -> list[str]:
        return [
            self.marker,
            *getattr(self.settings.stack, self.heap).split(),
            *self.gc,
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.conf_dir / 'log4j2.properties'}",
        ]

    def prepare(self) -> None:
        self._require(self.libs, "the JVM artifact cache (jvm/pom.xml)")
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "log4j2.properties").write_text(LOG4J2)

    def argv(self) -> list[str]:
        return [self.settings.stack.java, *self.jvm_flags(), "-cp", f"{self.libs}/*", self.main_class, *self.args()]

    def args(self) -> list[str]:
        return [str(self.conf_dir / f"{self.name}.properties")]


def _properties(values: dict[str, object]) -> str:
    """A Java properties file; a backslash in a value is written escaped, as the format wants."""
    escaped = {k: str(v).replace("\\", "\\\\") for k, v in values.items()}
    return "".join(f"{k}={v}\n" for k, v in escaped.items())
