"""A Spark driver that mcq launches maps the class-data archive `make install` built
(streams/jvm_archive.py), and says nothing about it on the user's terminal."""

from __future__ import annotations

import subprocess
import sys

from mcq.config import Settings
from streams.jvm_archive import build

DRIVER = """
from mcq.config import load_settings
from streams.session import spark_session
spark = spark_session(load_settings(), "test-jvm-archive")
assert spark.range(3).count() == 3
pid = spark._jvm.java.lang.ProcessHandle.current().pid()
print("MAPS", open(f"/proc/{pid}/maps").read().replace(chr(10), " | "))
"""


def test_a_spark_driver_maps_the_archive_and_prints_nothing_about_it(settings: Settings) -> None:
    archive = build(settings)  # `make install` built it: then nothing to do
    assert archive is not None and archive.is_file()
    # a JVM of its own: this test process may have one started already
    done = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    maps = next(line for line in done.stdout.splitlines() if line.startswith("MAPS"))
    assert str(archive) in maps  # its classes come from the archive, not from the jars
    assert "cds" not in done.stderr.lower() and "shared archive" not in done.stderr.lower(), done.stderr
