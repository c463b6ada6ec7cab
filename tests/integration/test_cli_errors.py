"""What a user sees when something fails under a command: one line, an exit code, and
where the details are -- never a traceback (the traceback is in the log file)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


def _mcq(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "MCQ_HOME": str(tmp_path / "home"), "MCQ_TOPIC_PREFIX": "cli-errors", **env}
    return subprocess.run(
        [sys.executable, "-m", "mcq.cli", *args], capture_output=True, text=True, env=environ, timeout=180
    )


def test_a_kafka_failure_is_one_line_naming_the_broker_and_the_log(tmp_path: Path) -> None:
    broker = f"127.0.0.1:{_closed_port()}"
    run = _mcq(tmp_path, "withheld", "list", MCQ_KAFKA__BOOTSTRAP_SERVERS=broker)
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    log = tmp_path / "home" / "logs" / "mcq.log"
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"mcq withheld list: Kafka at {broker}: ")
    assert "try again once it is up" in lines[0]
    assert lines[0].endswith(f"(details: {log})")
    assert "Traceback" not in run.stderr + run.stdout
    assert "Traceback" in log.read_text()  # the details are where the line says


def test_json_logs_put_every_line_on_stderr_as_one_object(tmp_path: Path) -> None:
    registry = tmp_path / "registry.yaml"
    registry.write_text("sources: []\ntables:\n  - tname: PHONE\n    key: [nope]\n")
    run = _mcq(tmp_path, "registry", "validate", str(registry), MCQ_LOG__FORMAT="json")
    assert run.returncode == 1
    assert run.stdout == ""
    records = [json.loads(line) for line in run.stderr.strip().splitlines()]
    assert records, run.stderr
    assert {r["level"] for r in records} == {"WARNING"}
    assert all(r["logger"] == "mcq.cli" and str(registry) in r["message"] for r in records)


def test_bad_settings_are_one_line_and_exit_2(tmp_path: Path) -> None:
    run = _mcq(tmp_path, "config", MCQ_TOPIC_PREFIX="not a prefix!")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [run.stderr.strip()]
    assert run.stderr.startswith("mcq: invalid configuration (environment): topic_prefix")
