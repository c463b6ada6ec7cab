"""The console's batch actions, without servers: each form becomes the command line an
operator would type (a value that cannot be one is refused before anything runs), and a
job runs that command in its own process, its output kept for the job's page."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException

from mcq.console.jobs import Jobs
from mcq.console.metrics import ConsoleMetrics
from mcq.console.pages.jobs import command


def test_each_action_is_the_command_an_operator_would_type(tmp_path: Path) -> None:
    form = FormData({"tname": "PERSON", "subtype": "PEOPLE", "where": "status = 'active'", "source": "source"})
    assert command("LDAP", "refresh", form, str(tmp_path)) == [
        "refresh", "LDAP", "--tname", "PERSON", "--subtype", "PEOPLE", "--where", "status = 'active'",
        "--from", "source",
    ]  # fmt: skip
    keys = command("LDAP", "refresh", FormData({"keys": "tname,person_id\nPERSON,8"}), str(tmp_path))
    assert keys[:3] == ["refresh", "LDAP", "--keys"] and Path(keys[3]).read_text() == "tname,person_id\nPERSON,8\n"
    assert command("LDAP", "flush", FormData({"before": "2026-11-25T12:00:00Z"}), "") == [
        "flush", "LDAP", "--yes", "--before", "2026-11-25T12:00:00Z",
    ]  # fmt: skip
    assert command("LDAP", "replay", FormData({}), "") == ["replay", "LDAP", "--from", "earliest"]
    assert command("LDAP", "reconcile", FormData({"repair": "on"}), "") == ["reconcile", "LDAP", "--repair"]


@pytest.mark.parametrize(
    ("action", "form"),
    [("flush", {"before": "yesterday; rm -rf /"}), ("replay", {"from": "--registry=/etc/passwd"}), ("drop", {})],
)
def test_a_value_that_is_not_the_commands_is_refused(action: str, form: dict[str, str]) -> None:
    with pytest.raises(HTTPException) as caught:
        command("LDAP", action, FormData(form), "")
    assert caught.value.status_code in (400, 404)


def test_a_job_runs_the_command_and_keeps_its_output_and_exit(tmp_path: Path) -> None:
    jobs = Jobs(tmp_path / "jobs")
    job = jobs.start("ann", "refresh", "LDAP", ["refresh", "--help"])
    assert job.state == "running" and jobs.of("LDAP") == [job] and jobs.get(job.id) is job
    deadline = time.monotonic() + 60
    while job.returncode is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.state == "done", job.output()
    assert job.output().startswith("$ mcq refresh --help") and "Usage: mcq refresh" in job.output()
    failed = jobs.start("ann", "replay", "LDAP", ["replay", "LDAP"])  # --from is required: exit 2
    while failed.returncode is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert failed.state == "failed (exit 2)" and "--from" in failed.output()
    metrics = generate_latest(ConsoleMetrics(jobs).registry).decode()
    assert 'mcq_console_jobs{action="refresh",state="done"} 1.0' in metrics
    assert 'mcq_console_jobs{action="replay",state="failed"} 1.0' in metrics
