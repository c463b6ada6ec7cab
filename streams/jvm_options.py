"""Which class-data archive a Spark driver's JVM maps, and the JVM options that say so
(``streams/jvm_archive.py`` builds it; ``streams/session.py`` starts the JVM with these).

The archive's name is a digest of the ``java`` Spark's launcher picks and of the class path,
so after a JDK upgrade or a changed jar no archive matches and Spark starts without one."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from mcq.config import Settings

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""The JVM's notes about the archive (classes it skips, e.g. from signed jars) are not news."""


DUMP_ENV = "MCQ_SPARK_ARCHIVE_DUMP"
"""Set (to a file) in the training run only: its JVM writes the archive there at exit."""


CHECK_ENV = "MCQ_SPARK_ARCHIVE_CHECK"
"""Set (to a file) in the check run only: its JVM maps that archive before it is put in place."""


def _java() -> Path | None:
    """The java Spark's launcher runs (bin/spark-class: ``$JAVA_HOME/bin/java``, else PATH's)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path(settings: Settings, jars: list[Path]) -> Path | None:
    """Where the archive for this java and class path is (whether built or not); None without java."""
    import pyspark

    java = _java()
    if java is None:
        return None
    digest = hashlib.sha256()
    libjvm = list(java.parent.parent.glob("lib/server/libjvm.so"))  # the JVM itself, beside its launcher
    for f in [java, *libjvm, *sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")), *jars]:
        st = f.stat()
        digest.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return settings.stack.jvm_cache / "cds" / f"spark-{digest.hexdigest()[:16]}.jsa"


def java_options(settings: Settings, jars: list[Path]) -> str:
    """The driver's JVM options for the archive: use it when built, write it in the training run."""
    if dump := os.environ.get(DUMP_ENV):
        return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
    if candidate := os.environ.get(CHECK_ENV):
        return f"-XX:SharedArchiveFile={candidate} {QUIET}"
    path = archive_path(settings, jars)
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path is not None and path.is_file() else ""
