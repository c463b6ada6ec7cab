"""The SparkSession every mcq job uses.

pyspark's wheel has no Kafka source/sink and no spark-avro; ``jvm/spark`` resolves them
from Maven Central (matching pyspark's Spark and Scala versions) into the JVM cache,
and they are handed to Spark as ``spark.jars`` (with ``jvm/spark-localfs``, mcq's local
file system that forks no process, see ``_no_fork_files``). Nothing else is assumed about the
driver's machine: the master comes from ``MCQ_SPARK_MASTER`` or the caller
(Spark's ``local[*]`` by default), so the same job runs under ``spark-submit`` on a cluster.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcq.config import Settings
from streams.exceptions import SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
LOCAL_FS_JAR = "mcq-spark-localfs"
"""mcq's local file system for Spark (jvm/spark-localfs): see ``_no_fork_files``."""
REQUIRED_JARS = (
    "spark-sql-kafka-0-10_",
    "spark-avro_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    LOCAL_FS_JAR,
)


def connector_jars(settings: Settings) -> list[Path]:
    """The jars Spark needs for Kafka, Avro and local files, from the Maven-resolved cache."""
    directory = settings.stack.jvm_cache / "spark"
    jars = sorted(directory.glob("*.jar"))
    missing = [prefix for prefix in REQUIRED_JARS if not any(j.name.startswith(prefix) for j in jars)]
    if missing:
        raise SparkSetupError(f"{directory}: missing {', '.join(p.rstrip('_-') for p in missing)}; run `make install`")
    return jars


def _no_fork_files(builder: SparkSession.Builder, jar: list[Path]) -> SparkSession.Builder:
    """Local files without forked processes, for a driver JVM this process launches.

    Without Hadoop's native library, its local file system forks `chmod` for every file it
    creates and, through FileContext (Spark's default for checkpoints), `readlink` for every
    rename: ~440 processes forked from the driver's JVM of several GB while a normaliser
    started 17 queries (strace). jvm/spark-localfs sets permissions through java.nio; the
    FileSystem-based checkpoint manager renames without FileContext. The jar goes on the
    JVM's own class path: spark-submit reads ``spark.jars`` through the file system first.
    Under spark-submit (the JVM is running already) or another master, Hadoop's defaults stay.
    """
    return (
        builder.config("spark.driver.extraClassPath", os.pathsep.join(str(j) for j in jar))
        .config("spark.hadoop.fs.file.impl", "mcq.spark.NoForkLocalFileSystem")
        .config(
            "spark.sql.streaming.checkpointFileManagerClass",
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
        )
    )


def spark_session(settings: Settings, app_name: str, master: str | None = None) -> SparkSession:
    """A SparkSession with the Kafka and Avro connectors on its classpath."""
    from pyspark.logger import PySparkLogger
    from pyspark.sql import SparkSession

    # Python functions a job runs in Spark's workers (a refresh's content rule) need this
    # interpreter and its packages, not whatever `python3` is first on the PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Unset, Spark's own default applies: local[*] from plain python, the --master of
    # spark-submit otherwise.
    chosen = master or os.environ.get("MCQ_SPARK_MASTER")
    if chosen is None or chosen.startswith("local"):
        # in-process Spark talks to itself: no host-name lookup (and no notice about it)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    jars = connector_jars(settings)
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.sql.shuffle.partitions", os.environ.get("MCQ_SPARK_SHUFFLE_PARTITIONS", "4"))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # our jobs log a line per batch instead
        .config("spark.sql.session.timeZone", "UTC")
        # errors only on the user's terminal, from the first line (streams/log4j2.properties)
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}")
        # the batch jobs stream a million states to the driver; Spark's 1g heap is too small for that
        .config("spark.driver.memory", os.environ.get("MCQ_SPARK_DRIVER_MEMORY", "4g"))
        # Spark 4.1's micro-batch Kafka source (V2) fails a restarted query whose last
        # batch was cut short: its progress metrics read offsets that a re-run batch never
        # fetched (NPE in KafkaMicroBatchStream.metrics, SPARK-55271 / SPARK-57438). The V1
        # source reads the same topics with the same checkpoint semantics and has no such path.
        # upper() through ICU builds its case tables in a class initialiser the first time a
        # query runs it (2.7 s of CPU while the normaliser's queries start: JFR); the names
        # upper-cased here (an explicit log's TNAME and change type) are ASCII
        .config("spark.sql.icu.caseMappings.enabled", "false")
        .config(
            "spark.sql.streaming.disabledV2MicroBatchReaders",
            "org.apache.spark.sql.kafka010.KafkaSourceProvider",
        )
    )
    if "PYSPARK_GATEWAY_PORT" not in os.environ and (chosen is None or chosen.startswith("local")):
        builder = _no_fork_files(builder, [j for j in jars if j.name.startswith(LOCAL_FS_JAR)])
    if chosen:
        builder = builder.master(chosen)
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


def silence_jvm_log(spark: SparkSession) -> None:
    """No more of Spark's JVM log, from any logger: stopping interrupts real-time tasks,
    which log their aborted writes as errors with a stack trace (expected, not news).
    ``setLogLevel`` alone changes only the root logger, not those our log4j2.properties
    sets a level of (``org.apache.spark.util.Utils``, which logs "Aborting task")."""
    jvm = spark._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setAllLevels(log4j.LogManager.ROOT_LOGGER_NAME, log4j.Level.OFF)
