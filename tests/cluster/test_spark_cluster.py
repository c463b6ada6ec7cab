"""The normaliser and the batch jobs on a Spark standalone cluster (``mcq stack up --with
spark``: a master and two workers, executors in processes of their own), not ``local[*]``.

A user's own table (``tests.integration.pipeline``), changed by a random workload; the
expected target state is read from the source with SQL. Each job is run as the user runs
it, ``--master spark://…``, and the master's own account (its ``/json/``) shows that it ran
there with executors, not in the driver.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcq.capture.apply import apply_capture
from mcq.config import Settings
from mcq.stack.services.spark import cluster_status
from mcq.testing.listeners import target_state
from mcq.testing.worlds import wait_slot_active
from tests.integration.pipeline import Accounts, Proc, Workload, accounts, start_pipeline

pytestmark = pytest.mark.cluster

ROWS = 200
START_S = 300  # capture, the driver and its executors started, the snapshot through
CONVERGE_S = 300
TEARDOWN_S = 120


def _mcq(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcq.cli", *args], env={**os.environ, **env}, text=True,
                          capture_output=True, timeout=timeout, check=False)  # fmt: skip


def _apps(settings: Settings) -> dict[str, list[dict[str, object]]]:
    status = cluster_status(settings)
    return {"active": status.get("activeapps", []), "completed": status.get("completedapps", [])}


def _executor_pids(settings: Settings, worker: str) -> list[int]:
    """The executors a worker runs now: its JVM's children running Spark's executor backend."""
    from mcq.stack import Stack

    parent = Stack(settings, only=[worker], with_=["spark"]).service(worker).handle.pid()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"CoarseGrainedExecutorBackend" in cmdline:
            found.append(int(proc.name))
    return found


def _converge(w: Accounts, procs: dict[str, Proc], what: str) -> dict[str, dict[str, str | None]]:
    expected = w.source_view()
    deadline = time.monotonic() + CONVERGE_S
    while (got := target_state(w.settings, w.target)) != expected:
        for p in procs.values():
            p.running()
        if time.monotonic() > deadline:
            missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
            different = [k for k in expected.keys() & got.keys() if expected[k] != got[k]]
            raise AssertionError(
                f"{what}: {len(missing)} missing, {len(extra)} extra, {len(different)} different, e.g. "
                f"{sorted(missing)[:3]} {sorted(extra)[:3]} {different[:3]}\n"
                + procs["normalize"].log.read_text()[-3000:]
            )
        time.sleep(3)
    return expected


@pytest.mark.timeout(START_S + 60 + CONVERGE_S + TEARDOWN_S + 120)
def test_a_listeners_target_equals_the_source_with_the_real_time_normaliser_on_the_cluster_and_an_executor_killed(
    spark_cluster: str, settings: Settings, tmp_path: Path
) -> None:
    with accounts(settings, tmp_path, "cluster", ROWS, seed=57) as w:
        procs = {
            "normalize": Proc(["streams", "normalize", "--master", spark_cluster, "--http-port", "0",
                               "--registry", str(w.registry_file), "--checkpoint-interval", "5 seconds",
                               "--checkpoint", str(tmp_path / "ckpt")], w.env, tmp_path / "normalize.log"),
            "listen": Proc(["listen", w.listener, "--registry", str(w.registry_file), "--http-port", "0"], w.env,
                           tmp_path / "listen.log"),
        }  # fmt: skip
        try:
            start_pipeline(w, procs.values(), START_S)
            log = procs["normalize"].log.read_text()
            assert re.search(rf"task slots needed, \d+ offered by {re.escape(spark_cluster)}", log), log[-2000:]
            running = [a for a in _apps(settings)["active"] if a.get("name") == "mcq-normalize"]
            assert running and int(str(running[0]["cores"])) > 0, _apps(settings)
            killed = _executor_pids(settings, "spark-worker-1")
            assert killed, "no executor on spark-worker-1: the normaliser is not running on the cluster"
            workload = Workload(w.settings, w.schema, seed=58, next_id=ROWS)
            with workload.running():
                time.sleep(8)  # changes flowing through both executors
                for pid in killed:
                    os.kill(pid, signal.SIGKILL)
                time.sleep(20)  # the worker starts a new executor; the lost tasks run again
            assert workload.committed > 200, (workload.committed, workload.failures)
            expected = _converge(w, procs, f"after executors {killed} of spark-worker-1 were SIGKILLed")
            counted = procs["listen"].metrics()
            assert counted["dead_lettered"] == 0, procs["listen"].log.read_text()[-3000:]
            print(f"cluster: executors {killed} SIGKILLed under {workload.committed} changes; target equal to the "
                  f"source ({len(expected)} rows); listener applied {counted['applied']}")  # fmt: skip
        finally:
            for p in procs.values():
                p.stop()


@pytest.mark.timeout(START_S + 5 * 240 + TEARDOWN_S)
def test_the_micro_batch_normaliser_refresh_rebuild_reconcile_and_report_run_on_the_cluster(
    spark_cluster: str, settings: Settings, tmp_path: Path
) -> None:
    with accounts(settings, tmp_path, "clusterjobs", ROWS, seed=59) as w:
        apply_capture(w.registry, w.settings)
        wait_slot_active(w.settings, w.slot)
        reg = ["--registry", str(w.registry_file)]
        master = ["--master", spark_cluster]
        ckpt = ["--checkpoint", str(tmp_path / "ckpt")]
        listen = ["listen", w.listener, *reg, "--until-caught-up", "--no-http"]
        deadline = time.monotonic() + START_S
        while True:  # the snapshot may reach the raw topic after the first run
            done = _mcq(["streams", "normalize", "--once", "--mode", "microbatch", *master, *reg, *ckpt, "--no-http"],
                        w.env)  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
            assert _mcq(listen, w.env).returncode == 0
            if target_state(w.settings, w.target) == w.source_view():
                break
            assert time.monotonic() < deadline, "the target never equalled the source"
            time.sleep(3)
        with psycopg_connect(w) as conn:  # drift the target behind mcq's back
            keys = f"(SELECT change_key FROM {w.target} ORDER BY change_key LIMIT 5)"
            conn.execute(f"DELETE FROM {w.target} WHERE change_key IN {keys}")
            conn.execute(f"UPDATE {w.target} SET state = state || '{{\"owner\": \"drifted\"}}' "
                         f"WHERE change_key IN {keys}")  # fmt: skip
        drift = _mcq(["reconcile", w.listener, *reg, *master, "--repair"], w.env)
        assert drift.returncode in (0, 1), drift.stderr[-3000:]
        assert _mcq(listen, w.env).returncode == 0
        assert target_state(w.settings, w.target) == w.source_view(), drift.stdout + drift.stderr[-2000:]

        refresh = _mcq(["refresh", w.listener, *reg, *master], w.env)
        assert refresh.returncode == 0, refresh.stderr[-3000:]
        assert _mcq(listen, w.env).returncode == 0
        assert target_state(w.settings, w.target) == w.source_view()

        rebuild = _mcq(["rebuild", w.listener, "--truncate", "--engine", "spark", *reg, *master], w.env)
        assert rebuild.returncode == 0, rebuild.stderr[-3000:]
        assert target_state(w.settings, w.target) == w.source_view()

        report = _mcq(["report", "--since", "1h", "--out", str(tmp_path / "report.html"), *reg, *master], w.env)
        assert report.returncode == 0, report.stderr[-3000:]
        assert (tmp_path / "report.html").read_text().count(w.listener) > 0

        names = {str(a.get("name")) for a in _apps(settings)["completed"]}
        for job in ("mcq-normalize", f"mcq-refresh-{w.listener}", f"mcq-rebuild-{w.listener}",
                    f"mcq-reconcile-{w.listener}", "mcq-report"):  # fmt: skip
            assert job in names, f"{job} did not run on the cluster: {sorted(names)}"


def psycopg_connect(w: Accounts):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(w.settings.vendor.dsn(), autocommit=True)


def test_a_master_that_cannot_be_reached_is_one_line_naming_it(settings: Settings) -> None:
    done = _mcq(["streams", "normalize", "--once", "--master", "spark://127.0.0.1:9", "--no-http"], {}, timeout=120)
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "spark://127.0.0.1:9 cannot be reached" in lines[0], done.stderr


@pytest.mark.timeout(300)
def test_a_cluster_with_too_few_cores_for_real_time_is_one_line_saying_how_many_are_needed(
    spark_cluster: str, settings: Settings, tmp_path: Path
) -> None:
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.cores.max 2\n")  # the operator's own cap
    with accounts(settings, tmp_path, "fewcores", 5, seed=60) as w:
        done = _mcq(["streams", "normalize", "--master", spark_cluster, "--registry", str(w.registry_file),
                     "--checkpoint", str(tmp_path / "ckpt"), "--no-http"],
                    {**w.env, "SPARK_CONF_DIR": str(conf)}, timeout=240)  # fmt: skip
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    found = re.search(r"needs (\d+) task slots .* offers (\d+)", lines[0])
    assert found and int(found.group(2)) == 2 and int(found.group(1)) > 2, lines[0]
    assert spark_cluster in lines[0]
