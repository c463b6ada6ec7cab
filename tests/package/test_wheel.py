"""The wheel, as a user installs it: built from the checkout, installed into a fresh
virtualenv in a temporary directory, and run from there (no checkout on its path) against
the local stack. The base install runs every setup command and a listener, carries no
Spark, and says in one line which extra the normaliser needs; with ``[spark]`` the
normaliser runs too, and the listener's target ends equal to the source's last state,
read with SQL."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from mcq.capture.connector import raw_topic
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.worlds import wait_raw_records
from tests import PROJECT_ROOT
from tests.integration.pipeline import Accounts, Workload, accounts
from tests.package.conftest import ok, run, user_env
from tests.support.capture import raw_events, settle

pytestmark = pytest.mark.package


@pytest.fixture
def world(stack: Stack, settings: Settings, tmp_path: Path) -> Iterator[Accounts]:
    with accounts(settings, tmp_path, "wheel", 300, seed=53) as w:
        yield w


@pytest.mark.timeout(1500)
def test_the_wheel_installed_outside_the_checkout_runs_setup_normaliser_and_listener(
    world: Accounts, wheel: Path, tmp_path: Path
) -> None:
    home = tmp_path / "elsewhere"  # a user's directory: no checkout, no examples/
    home.mkdir()
    venv = home / "venv"
    ok(run([sys.executable, "-m", "venv", venv], timeout=300))
    pip, python, mcq = venv / "bin" / "pip", venv / "bin" / "python", venv / "bin" / "mcq"
    ok(run([pip, "install", "-q", wheel], timeout=900))
    env = user_env(world.settings, **world.env)

    def cli(*args: str | Path, timeout: float = 600) -> str:
        return ok(run([mcq, *args], timeout=timeout, cwd=home, env=env))

    # the package's own files, not the checkout's; a listener-only install carries no Spark
    where = ok(run([python, "-c", "import mcq.resources as r; print(r.__file__)"], timeout=60, cwd=home, env=env))
    assert Path(where.strip()).is_relative_to(venv) and not Path(where.strip()).is_relative_to(PROJECT_ROOT)
    assert run([python, "-c", "import pyspark"], timeout=60, cwd=home, env=env).returncode != 0
    assert "0.1.0" in cli("--version")
    assert "listen" in cli("--help")

    registry = world.registry_file
    cli("topics", "apply", "--registry", registry)
    cli("schemas", "apply", "--registry", registry)
    cli("connect", "apply", "--registry", registry, timeout=900)

    # the normaliser needs the spark extra: one line that says so, never a traceback
    done = run([mcq, "streams", "normalize", "--once", "--registry", registry], timeout=300, cwd=home, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "meta-change-queue[spark]" in done.stderr and "Traceback" not in done.stderr + done.stdout, done.stderr

    # changes after the snapshot, then wait for all of them in the raw topic (--once reads to its end)
    source = world.registry.sources[0]
    topic = raw_topic(source, f"{world.schema}.accounts")
    wait_raw_records(world.settings, topic, 300)
    workload = Workload(world.settings, world.schema, seed=7, next_id=300)
    rnd = random.Random(11)
    with psycopg.connect(world.settings.source.dsn(), autocommit=True) as conn:
        before = raw_events(world.settings, topic)
        for _ in range(200):
            workload._one(conn)
        # a key deleted and inserted again in one go
        key = rnd.randrange(300)
        conn.execute(f"DELETE FROM {world.schema}.accounts WHERE id = %s", (key,))
        conn.execute(f"INSERT INTO {world.schema}.accounts VALUES (%s, 'back', 'active', 1)", (key,))
    ok(run([pip, "install", "-q", f"{wheel}[spark]"], timeout=1200))
    wait_raw_records(world.settings, topic, before + 1)
    settle(world.settings, topic)

    cli("streams", "normalize", "--once", "--registry", registry, "--checkpoint", home / "checkpoint", timeout=900)
    cli("listen", world.listener, "--until-caught-up", "--registry", registry, timeout=600)

    assert target_state(world.settings, world.target) == world.source_view()
