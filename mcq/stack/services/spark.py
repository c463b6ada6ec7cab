"""A Spark standalone cluster on this machine: one master and two workers,
each a process of its own from the pyspark distribution (``bin/spark-class``; the package has
no ``sbin/`` scripts), started when asked (``mcq stack up --with spark``).

The normaliser and the batch jobs run there with ``--master spark://127.0.0.1:27077`` (or
``MCQ_SPARK_MASTER``): their executors are the workers' children, one per worker, their logs
in the worker's work directory under ``MCQ_HOME/data/spark-worker-N``. The daemons log to
the stack's logs like every other service.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

from mcq.config import LOOPBACK, Settings
from mcq.stack.services.base import NotReady, Service

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
SPARK = "spark"
"""The name ``mcq stack up --with`` takes for the whole cluster."""

LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.master.name = org.apache.spark.deploy.master.Master
logger.master.level = info
logger.worker.name = org.apache.spark.deploy.worker.Worker
logger.worker.level = info
logger.runner.name = org.apache.spark.deploy.worker.ExecutorRunner
logger.runner.level = info
"""
"""Warnings, and what an operator reads a daemon's log for: workers registering,
applications and executors granted, started, lost."""


def spark_home() -> Path:
    """The Spark distribution pyspark ships (``bin/spark-class``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).parent


def master_url(settings: Settings) -> str:
    """The local cluster's master, as ``--master`` takes it."""
    return f"spark://{LOOPBACK}:{settings.stack.ports.spark_master}"


def cluster_status(settings: Settings, timeout_s: float = 3.0) -> dict[str, Any]:
    """The master's own account of its cluster (its web UI's ``/json/``): workers, cores, apps."""
    url = f"http://{LOOPBACK}:{settings.stack.ports.spark_master_ui}/json/"
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:
        status: dict[str, Any] = json.load(answer)
    return status


class _SparkDaemon(Service):
    """A master or a worker: Spark's launcher, our log configuration and marker."""

    main_class: ClassVar[str]

    @property
    def marker(self) -> str:
        return f"-Dmcq.service={self.name}"

    def prepare(self) -> None:
        self._require(spark_home() / "bin" / "spark-class", "pyspark's Spark distribution")
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "log4j2.properties").write_text(LOG4J2)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_CONF_DIR=str(self.conf_dir),  # no spark-defaults.conf of the machine's leaks in
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_DAEMON_MEMORY=self.settings.stack.spark_daemon_heap,
            SPARK_DAEMON_JAVA_OPTS=f"{self.marker} -XX:+UseSerialGC "
            f"-Dlog4j2.configurationFile={(self.conf_dir / 'log4j2.properties').as_uri()}",
            SPARK_WORKER_DIR=str(self.data_dir),
            SPARK_LOG_DIR=str(self.home / "logs"),
        )
        env.pop("PYSPARK_GATEWAY_PORT", None)
        return env

    def _launch(self, *args: str) -> list[str]:
        return [str(spark_home() / "bin" / "spark-class"), self.main_class, *args]

    def _status(self) -> dict[str, Any]:
        try:
            return cluster_status(self.settings)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise NotReady(f"the master's /json/: {exc}") from None


class SparkMaster(_SparkDaemon):
    """The standalone master: schedules executors on the workers."""

    name = "spark-master"
    main_class = MASTER_CLASS

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.spark_master, self.settings.stack.ports.spark_master_ui)

    @property
    def address(self) -> str:
        return master_url(self.settings)

    def argv(self) -> list[str]:
        ports = self.settings.stack.ports
        return self._launch("--host", LOOPBACK, "--port", str(ports.spark_master), "--webui-port",
                            str(ports.spark_master_ui))  # fmt: skip

    def check(self) -> None:
        status = self._status()
        if status.get("status") != "ALIVE":
            raise NotReady(f"master status {status.get('status')!r}")


class SparkWorker(_SparkDaemon):
    """One worker: offers ``stack.spark_worker_cores`` cores and runs the executors."""

    depends_on = ("spark-master",)
    main_class = WORKER_CLASS
    number: ClassVar[int]

    @property
    def port(self) -> int:
        return self.settings.stack.ports.spark_worker + self.number - 1

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.port, self.settings.stack.ports.spark_master_ui + self.number)

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def argv(self) -> list[str]:
        stack = self.settings.stack
        return self._launch(
            master_url(self.settings), "--host", LOOPBACK, "--port", str(self.port),
            "--webui-port", str(stack.ports.spark_master_ui + self.number), "--cores", str(stack.spark_worker_cores),
            "--memory", stack.spark_worker_memory, "--work-dir", str(self.data_dir),
        )  # fmt: skip

    def check(self) -> None:
        for worker in self._status().get("workers", []):
            if worker.get("host") == LOOPBACK and worker.get("port") == self.port and worker.get("state") == "ALIVE":
                return
        raise NotReady(f"not registered with the master at {master_url(self.settings)} (yet)")


class SparkWorker1(SparkWorker):
    name = "spark-worker-1"
    number = 1


class SparkWorker2(SparkWorker):
    name = "spark-worker-2"
    number = 2


SPARK_SERVICES: tuple[type[Service], ...] = (SparkMaster, SparkWorker1, SparkWorker2)
"""The cluster ``--with spark`` starts: a master and two workers (executors on two JVMs, so a
test can kill one and see the other carry on)."""
