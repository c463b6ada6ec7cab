"""Under ``log.format: json`` Spark's JVM log comes out as the JSON lines mcq's own log
writes (streams/log4j2-json.properties): a log collector reads one format from a pod."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

DRIVER = """
import logging
from mcq.config import load_settings
from mcq.logs import configure
from streams.session import spark_session
settings = load_settings()
configure(settings.log)
spark = spark_session(settings, "test-spark-log")
assert spark.range(3).count() == 3
logging.getLogger("streams.test").warning("our own line")
"""


@pytest.mark.long
def test_spark_s_jvm_lines_are_json_lines_like_ours_under_the_json_format(tmp_path: object) -> None:
    env = {**os.environ, "MCQ_LOG__FORMAT": "json", "MCQ_SPARK_LOG_LEVEL": "INFO"}
    done = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"a line on stderr is not JSON: {line[:300]}")
    spark = [r for r in records if r["logger"].startswith("org.apache.spark")]
    assert spark, f"no Spark line at INFO: {lines[:5]}"
    ours = [r for r in records if r["logger"] == "streams.test"]
    assert [r["message"] for r in ours] == ["our own line"]
    for r in (spark[0], ours[0]):
        assert {"time", "level", "logger", "pid", "message"} <= set(r), r
