"""The SparkSession every mcq job uses.

pyspark's wheel has no Kafka source/sink and no spark-avro; ``jvm/spark`` resolves them
from Maven Central (matching pyspark's Spark and Scala versions) into the JVM cache,
and they are handed to Spark as ``spark.jars`` (with ``jvm/spark-localfs``, mcq's local
file system that forks no process, see ``_no_fork_files``). Nothing else is assumed about the
driver's machine: the master comes from ``MCQ_SPARK_MASTER`` or the caller
(Spark's ``local[*]`` by default), so the same job runs under ``spark-submit`` on a cluster.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from mcq.config import Settings
from streams.exceptions import SparkSetupError
from streams.jvm_options import java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


LOG_CONFIG = {
    "text": Path(__file__).with_name("log4j2.properties"),
    "json": Path(__file__).with_name("log4j2-json.properties"),
}
"""Spark's JVM log configuration for each ``log.format``: JSON lines like mcq's own under json."""
LOCAL_FS_JAR = "mcq-spark-localfs"
"""mcq's local file system for Spark (jvm/spark-localfs): see ``_no_fork_files``."""
REQUIRED_JARS = (
    "spark-sql-kafka-0-10_",
    "spark-avro_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    LOCAL_FS_JAR,
    "mcq-spark-gate",  # jvm/spark-gate: streams/handover.py, streams/lag.py
)


def connector_jars(settings: Settings) -> list[Path]:
    """The jars Spark needs for Kafka, Avro and local files, from the Maven-resolved cache."""
    directory = settings.stack.jvm_cache / "spark"
    jars = sorted(directory.glob("*.jar"))
    missing = [prefix for prefix in REQUIRED_JARS if not any(j.name.startswith(prefix) for j in jars)]
    if missing:
        raise SparkSetupError(f"{directory}: missing {', '.join(p.rstrip('_-') for p in missing)}; run `make install`")
    return jars


def _no_fork_files(jar: list[Path]) -> dict[str, str]:
    """Local files without forked processes, for a driver JVM this process launches.

    Without Hadoop's native library, its local file system forks `chmod` for every file it
    creates and, through FileContext (Spark's default for checkpoints), `readlink` for every
    rename: ~440 processes forked from the driver's JVM of several GB while a normaliser
    started 17 queries (strace). jvm/spark-localfs sets permissions through java.nio; the
    FileSystem-based checkpoint manager renames without FileContext. The jar goes on the
    JVM's own class path: spark-submit reads ``spark.jars`` through the file system first.
    Under spark-submit (the JVM is running already) or another master, Hadoop's defaults stay.
    """
    return {
        "spark.driver.extraClassPath": os.pathsep.join(str(j) for j in jar),
        "spark.hadoop.fs.file.impl": "mcq.spark.NoForkLocalFileSystem",
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
        ),
    }


INCUBATOR_NOTICE = b"WARNING: Using incubator modules:"
"""What the JVM says at every start because Spark's launcher adds ``jdk.incubator.vector``
(for MLlib's BLAS, which mcq does not use): not news for a user's terminal."""


def _launch_driver_jvm(options: dict[str, str]) -> None:
    """Launch the driver's JVM as pyspark would, its stderr passed on to ours less the
    incubator notice. The pipe is read from before the JVM starts: a JVM that says much
    while it starts never waits on a full pipe. A JVM running already is left as it is."""
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    read_end, write_end = os.pipe()
    threading.Thread(target=_pass_on, args=(read_end,), name="spark-jvm-stderr", daemon=True).start()
    try:
        conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})  # type: ignore[no-untyped-call]
    finally:
        os.close(write_end)  # the JVM holds its own: the reader ends when the JVM does
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm


def _pass_on(fd: int) -> None:
    with os.fdopen(fd, "rb") as jvm_stderr:
        for line in jvm_stderr:
            if not line.startswith(INCUBATOR_NOTICE):
                with contextlib.suppress(OSError):
                    os.write(2, line)


SHORT_RUN_JIT = "-XX:TieredStopAtLevel=1"
"""The JIT of a short run's driver: C1 only, no C2. A short ``--once`` run on 2 cores spends
a third of its JVM's CPU in the C2 compiler (JFR, 8,935 raw rows: C2 the busiest thread,
28 % of the JVM's CPU) on code it runs for seconds. Measured, alternating, one campus
world: 100 records pending 22.7-24.7 s start to exit against 29.8-35.3 s (4 pairs); 8,935
rows 53.6 / 54.6 s against 55.6 / 61.2 s; 178,416 rows 76.4 / 78.8 s against 88.2 / 75.1 s,
even: a longer run keeps C2's faster code (``streams.runner.SHORT_RUN_RECORDS``)."""

BACKLOG_RUN_JIT = "-XX:Tier4InvocationThreshold=40000 -XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=300000"
"""The JIT of a longer bounded run's driver (a ``--once`` run above ``SHORT_RUN_RECORDS``):
C2 compiles a method once it ran 8x as often as its defaults ask (loops 7.5x). A
267,725-row run's JVM made 28,939 compilations, 53.8 s of compiler CPU in a 60.7 s run
(JFR), much of it C2 on code that runs only while the batch is planned (janino, ANTLR,
Java serialisation); a per-record method still passes 40,000 calls in its first 40,000
records. Measured, alternating, one campus world of 267,725 raw rows, start to exit:
52.2 / 53.0 / 52.9 s against 58.5 / 57.8 / 55.3 s with the defaults; on 998,653 rows even
(97.1-106.6 s against 98.4-115.9 s, eight runs)."""

JitProfile = Literal["short", "backlog"]
"""How a bounded run's driver JIT-compiles: ``SHORT_RUN_JIT`` or ``BACKLOG_RUN_JIT``."""
_JIT_OPTIONS: dict[str, str] = {"short": SHORT_RUN_JIT, "backlog": BACKLOG_RUN_JIT}


def spark_session(
    settings: Settings, app_name: str, master: str | None = None, jit: JitProfile | None = None
) -> SparkSession:
    """A SparkSession with the Kafka and Avro connectors on its classpath. ``jit``: a
    bounded run's driver JIT (``SHORT_RUN_JIT``, ``BACKLOG_RUN_JIT``) when this call starts
    the JVM; None, the JVM's defaults (a real-time run's hot code compiled soonest)."""
    from pyspark.logger import PySparkLogger
    from pyspark.sql import SparkSession

    # Python functions a job runs in Spark's workers (a refresh's content rule) need this
    # interpreter and its packages, not whatever `python3` is first on the PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Unset, Spark's own default applies: local[*] from plain python, the --master of
    # spark-submit otherwise.
    chosen = master or os.environ.get("MCQ_SPARK_MASTER")
    if chosen is None or chosen.startswith("local") or _loopback(chosen):
        # in-process Spark (or a cluster on this machine) talks to itself: no host-name
        # lookup (and no notice about it)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if chosen and chosen.startswith("spark://"):
        reach_master(chosen)
    jars = connector_jars(settings)
    options = {
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.sql.shuffle.partitions": os.environ.get("MCQ_SPARK_SHUFFLE_PARTITIONS", "4"),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # our jobs log a line per batch instead
        "spark.sql.session.timeZone": "UTC",
        # errors only on the user's terminal, from the first line (streams/log4j2.properties)
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG_CONFIG[settings.log.format].as_uri()}",
        # the batch jobs stream a million states to the driver; Spark's 1g heap is too small for that
        "spark.driver.memory": os.environ.get("MCQ_SPARK_DRIVER_MEMORY", "4g"),
        # Spark 4.1's micro-batch Kafka source (V2) fails a restarted query whose last
        # batch was cut short: its progress metrics read offsets that a re-run batch never
        # fetched (NPE in KafkaMicroBatchStream.metrics, SPARK-55271 / SPARK-57438). The V1
        # source reads the same topics with the same checkpoint semantics and has no such path.
        # upper() through ICU builds its case tables in a class initialiser the first time a
        # query runs it (2.7 s of CPU while the normaliser's queries start: JFR); the names
        # upper-cased here (an explicit log's TNAME and change type) are ASCII
        "spark.sql.icu.caseMappings.enabled": "false",
        "spark.sql.streaming.disabledV2MicroBatchReaders": "org.apache.spark.sql.kafka010.KafkaSourceProvider",
    }
    launching = "PYSPARK_GATEWAY_PORT" not in os.environ  # not under spark-submit: the JVM is ours to start
    if launching and (chosen is None or chosen.startswith("local")):
        options.update(_no_fork_files([j for j in jars if j.name.startswith(LOCAL_FS_JAR)]))
    if launching and (archive := java_options(settings, jars)):  # its classes mapped, not loaded (jvm_archive)
        options["spark.driver.extraJavaOptions"] += f" {archive}"
    if launching and jit is not None:
        options["spark.driver.extraJavaOptions"] += f" {_JIT_OPTIONS[jit]}"
    if chosen:
        options["spark.master"] = chosen
    if launching:
        _launch_driver_jvm(options)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("MCQ_SPARK_LOG_LEVEL", "ERROR"))
    # pyspark logs every analysis error it raises, as JSON with the JVM's stack trace, to
    # stderr: the command reports the same error in one line (MCQ_SPARK_LOG_LEVEL=DEBUG keeps it)
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):  # made as pyspark makes them
        PySparkLogger.getLogger(name).disabled = os.environ.get("MCQ_SPARK_LOG_LEVEL", "ERROR").upper() != "DEBUG"
    # spark-avro warns once per task that the Avro schema is stricter than Spark's nullable
    # columns: the normaliser gives every required field a non-null expression (streams/normalize.py)
    jvm: Any = spark._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.avro.AvroSerializer", jvm.org.apache.logging.log4j.Level.ERROR
    )
    return spark


def _master_address(master: str) -> tuple[str, int]:
    """``spark://host:port`` -> (host, port); ValueError for anything else (or a list of masters)."""
    parsed = urlsplit(master)
    if parsed.scheme != "spark" or not parsed.hostname or "," in parsed.netloc:
        raise ValueError(master)
    return parsed.hostname, parsed.port or 7077


def _loopback(master: str) -> bool:
    try:
        host, _ = _master_address(master)
    except ValueError:
        return False
    return host in ("127.0.0.1", "localhost", "::1")


def reach_master(master: str, timeout_s: float = 5.0) -> None:
    """A standalone master that answers, or one line naming it: Spark itself would retry
    for a minute and then end the application with "All masters are unresponsive"."""
    try:
        host, port = _master_address(master)
    except ValueError:
        return  # several masters (ZooKeeper recovery): Spark's own retries decide
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SparkSetupError(
            f"the Spark master {master} cannot be reached ({reason.lower()}): start it (`mcq stack up --with "
            "spark` for this machine's), or give another with --master / MCQ_SPARK_MASTER"
        ) from None


def wait_for_slots(spark: SparkSession, needed: int, timeout_s: float) -> int:
    """The task slots the application's executors offer, once they offer NEEDED or after
    TIMEOUT_S: a cluster's executors register seconds after the session starts (until
    then ``defaultParallelism`` is Spark's floor of 2), a local master's are there at once."""
    context = spark.sparkContext
    deadline = time.monotonic() + timeout_s
    if str(context.master).startswith("local"):
        return int(context.defaultParallelism)
    cap = context.getConf().get("spark.cores.max")  # the operator's cap: no more will come
    while True:
        offered = _cores(spark)
        if offered >= needed or (cap and offered >= int(cap)) or time.monotonic() >= deadline:
            return offered
        time.sleep(0.5)


def _cores(spark: SparkSession) -> int:
    """Cores of the executors registered now: a cluster's ``defaultParallelism`` is their
    total (at least 2), so 0 until the first executor (the driver's own entry excluded)."""
    context = spark.sparkContext
    executors = context._jsc.sc().getExecutorMemoryStatus().size() - 1  # type: ignore[union-attr]
    return int(context.defaultParallelism) if executors > 0 else 0


def silence_jvm_log(spark: SparkSession) -> None:
    """No more of Spark's JVM log, from any logger: stopping interrupts real-time tasks,
    which log their aborted writes as errors with a stack trace (expected, not news).
    ``setLogLevel`` alone changes only the root logger, not those our log4j2.properties
    sets a level of (``org.apache.spark.util.Utils``, which logs "Aborting task")."""
    jvm = spark._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setAllLevels(log4j.LogManager.ROOT_LOGGER_NAME, log4j.Level.OFF)
