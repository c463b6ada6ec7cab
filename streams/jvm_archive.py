"""A class-data archive for the Spark driver's JVM: every Spark start in about half the time.

A JVM loads, parses and verifies each of Spark's classes from its jar at every start
(~15,000 for a normaliser). The JDK's application class-data sharing (AppCDS, a dynamic
archive: ``-XX:ArchiveClassesAtExit``) saves the classes one JVM loaded in a file that the
next JVM maps instead. Measured on 2 cores: a SparkSession 9.7-10.5 -> 5.5-6.6 s, its first query
4.3-5.2 -> 2.3-2.7 s (``BENCHMARKS.md``). Every ``mcq streams`` command, the normaliser's every
start and every Spark test pays that.

``make install`` builds it once per machine (``python -m streams.jvm_archive``): a JVM
runs a small Spark workload (a session, the example campus registry's real-time plans
where the checkout has it, a batch query with the normaliser's functions) and writes its
classes at exit. The file name is a digest of the ``java`` that Spark's launcher picks
and of the class path (pyspark's jars and the connector jars): after a JDK upgrade or a
changed jar no archive matches, and Spark starts as it did without one until the next
``make install``. The archive is written to a temporary name, mapped by a check run (a
Spark start that must map it and run a query), then renamed: a JVM given a partial
archive crashes (SIGBUS). A failed build warns and leaves Spark without an archive.
A JVM that cannot use a matching archive (another heap size, ``-XX`` flags) starts
without it, silently.

Only for a driver JVM mcq launches itself (``streams/session.py``); under ``spark-submit``
the JVM is the cluster's.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcq.config import Settings, load_settings
from streams.exceptions import ArchiveError
from streams.jvm_options import CHECK_ENV, DUMP_ENV, archive_path

log = logging.getLogger(__name__)


def _train() -> None:
    """The training run's workload (its JVM writes the archive at exit): what the normaliser
    and the batch jobs load on their way to a first record."""
    from pyspark import SparkContext
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    from mcq.registry import parse_registry
    from mcq.resources import read_text
    from streams.normalize import NormalizeJob
    from streams.realtime import realtime_records
    from streams.session import spark_session

    settings = load_settings()
    spark = spark_session(settings, "mcq-jvm-archive")
    # the sample campus ships with the package: the image trains on it too
    campus = parse_registry(read_text("examples", "campus.yaml"), "examples/campus.yaml")
    job = NormalizeJob(settings, campus, Path("/nonexistent"))
    outputs = [*job.plan.logical_topics, job.plan.refresh_topic, job.plan.withheld_topic]
    job.schema_ids.update({t: (1, 2) for t in outputs})  # ids only shape the plan: nothing is written
    jvm = spark._jvm
    assert jvm is not None
    simple = getattr(jvm.org.apache.spark.sql.execution, "SimpleMode$").__getattr__("MODULE$")
    for _, _, records in realtime_records(job, spark)[:3]:  # analysis, optimizer, planning (no broker needed)
        records._jdf.queryExecution().explainString(simple)
    rows = spark.range(200).select(
        F.to_json(F.struct(F.col("id"), F.lit("x").alias("name"))).alias("json"), F.col("id")
    )
    parsed = rows.select(F.from_json("json", "id BIGINT, name STRING").alias("e"), "id")
    out = parsed.select(
        F.posexplode_outer(F.array(F.col("e"), F.col("e"))).alias("pos", "r"),
        F.expr(
            "transform(array(id, id + 1), x -> CASE WHEN x > 3 THEN concat_ws(', ', 'a', CAST(x AS STRING)) END)"
        ).alias("t"),
    ).select(to_avro(F.col("r")).alias("value"), "t")
    out.collect()  # code generation, tasks, Avro
    _kafka_clients(spark)
    spark.stop()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is not None:  # the JVM ends when our end of its stdin closes, then writes the archive
        proc.stdin.close()
        proc.wait(300)


def _check() -> None:
    """The check run: a Spark start with the new archive, which must map it and run a query
    (a truncated or damaged archive crashes the JVM, or is not mapped)."""
    from streams.session import spark_session

    spark = spark_session(load_settings(), "mcq-jvm-archive-check")
    if spark.range(3).count() != 3:
        raise SystemExit("a query on the new archive counted wrong")
    jvm: Any = spark._jvm
    maps = Path(f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/maps")
    if maps.exists() and os.environ[CHECK_ENV] not in maps.read_text():
        raise SystemExit("the JVM started without mapping the new archive")
    spark.stop()


def _kafka_clients(spark: Any) -> None:
    """Kafka's client classes (a consumer, a producer, an admin) as the normaliser's sources
    and sink load them: each made, asked for a topic of a broker that is not there, closed."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    props = jvm.java.util.Properties()
    for key, value in {
        "bootstrap.servers": "127.0.0.1:9",  # discard: refused at once
        "group.id": "mcq-jvm-archive",
        "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
        "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
        "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
        "value.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
        "max.block.ms": "500",
        "default.api.timeout.ms": "500",
        "request.timeout.ms": "500",
    }.items():
        props.setProperty(key, value)
    kafka = jvm.org.apache.kafka.clients
    short = jvm.java.time.Duration.ofMillis(500)
    clients: list[tuple[Any, Callable[[Any], Any]]] = [
        (kafka.consumer.KafkaConsumer, lambda c: c.partitionsFor("mcq", short)),
        (kafka.producer.KafkaProducer, lambda p: p.partitionsFor("mcq")),
        (
            kafka.admin.AdminClient.create,
            lambda a: a.listTopics().names().get(500, jvm.java.util.concurrent.TimeUnit.MILLISECONDS),
        ),
    ]
    for make, ask in clients:
        client = make(props)
        try:
            ask(client)
        except Py4JJavaError:
            pass  # no broker: expected
        finally:
            client.close(short)


def _run(flag: str, env_key: str, partial: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """The training (``--train``) or check (``--check``) run, a Python process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "streams.jvm_archive", flag],
        env={**os.environ, env_key: str(partial)},
        cwd=partial.parent,  # a crashed JVM's hs_err file lands beside the archives, not in the user's directory
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def _tail(done: subprocess.CompletedProcess[str]) -> str:
    return " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])


def build(settings: Settings) -> Path | None:
    """Build the archive for this machine unless it is there; returns its path (None without
    java). Raises ``ArchiveError`` when the training run or the check run on its archive fails."""
    from streams.session import connector_jars

    path = archive_path(settings, connector_jars(settings))
    if path is None or path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    started = time.monotonic()
    log.info(f"jvm-archive: building {path} (a Spark start that saves its classes: about a minute) ...")
    try:
        done = _run("--train", DUMP_ENV, partial, 600)
        if done.returncode != 0 or not partial.is_file():
            raise ArchiveError(f"the training run failed ({done.returncode}): {_tail(done)}")
        checked = _run("--check", CHECK_ENV, partial, 300)
        if checked.returncode != 0:
            raise ArchiveError(f"a Spark start on the new archive failed ({checked.returncode}): {_tail(checked)}")
        partial.replace(path)  # whole and checked, or not at all: a JVM never maps a partial archive
    finally:
        partial.unlink(missing_ok=True)
    for old in path.parent.glob("spark-*.jsa"):  # archives of another java or class path
        if old != path:
            old.unlink(missing_ok=True)
    size = path.stat().st_size / 1e6
    log.info(f"jvm-archive: {path.name}, {size:.0f} MB, in {time.monotonic() - started:.0f} s")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m streams.jvm_archive", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.train or args.check:
        (_train if args.train else _check)()
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)  # `make install`'s lines
    try:
        if build(load_settings()) is None:
            log.warning("jvm-archive: no java found (JAVA_HOME or PATH): Spark starts without an archive")
    except ArchiveError as exc:  # an accelerator: its failure must not stop an install
        log.warning(f"jvm-archive: {exc}; Spark starts without an archive (seconds slower)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
