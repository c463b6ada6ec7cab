"""The images `make image` built, started through testcontainers (podman's Docker-compatible
API) with the host's network, against the local stack, as a pod runs them: a read-only root
file system, the non-root user, writable space only where the chart mounts it. The slim
listener image runs the setup commands and the listener and has no Java and no Spark; the
full image runs the normaliser; the listener's target ends equal to the source's last state,
read with SQL."""

from __future__ import annotations

import os
import subprocess
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
import psycopg
import pytest
from testcontainers.core.container import DockerContainer

from mcq.capture.connector import raw_topic
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.worlds import wait_raw_records
from tests import PROJECT_ROOT
from tests.integration.pipeline import Accounts, Workload, accounts
from tests.support.capture import settle

pytestmark = pytest.mark.package

VERSION = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["version"]
LISTENER = f"localhost/mcq-listener:{VERSION}"
FULL = f"localhost/mcq:{VERSION}"
CONTAINERS_CONF = PROJECT_ROOT / "scripts" / "image" / "containers.conf"


@pytest.fixture(scope="module")
def docker_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """podman's Docker-compatible API on a socket of the session's own, for testcontainers."""
    sock = tmp_path_factory.mktemp("podman") / "podman.sock"
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert service.poll() is None, f"podman system service exited {service.returncode}"
            assert time.monotonic() < deadline, "podman system service: no socket after 30 s"
            time.sleep(0.2)
        host = f"unix://{sock}"
        saved = {k: os.environ.get(k) for k in ("DOCKER_HOST", "TESTCONTAINERS_RYUK_DISABLED")}
        # no registry is reachable here for testcontainers' reaper image: the test removes its containers
        os.environ.update(DOCKER_HOST=host, TESTCONTAINERS_RYUK_DISABLED="true")
        try:
            for image in (LISTENER, FULL):
                try:
                    docker.DockerClient(base_url=host).images.get(image)
                except docker.errors.ImageNotFound:
                    pytest.fail(f"{image}: not built (make image; make package builds it first)")
            yield host
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    finally:
        service.terminate()
        service.wait(30)


@dataclass(frozen=True)
class Ran:
    code: int
    out: str


def run_image(
    image: str, *args: str, env: dict[str, str], mount: Path | None = None, state: Path | None = None,
    timeout: float = 600,
) -> Ran:  # fmt: skip
    """One ``mcq`` command in a container of ``image``, as a pod runs it: the registry file's
    directory at /config (read-only), ``state`` as the writable volumes a pod mounts
    (``/var/lib/mcq``, ``/var/lib/mcq-checkpoint``); its exit code and output."""
    container = DockerContainer(
        image,
        command=list(args),
        env=env,
        network_mode="host",
        read_only=True,  # writable only where a pod mounts volumes
        ulimits=[
            docker.types.Ulimit(name="nofile", soft=4096, hard=4096),
            docker.types.Ulimit(name="nproc", soft=4096, hard=4096),
        ],
    )
    container.with_tmpfs_mount("/tmp", "size=2g")  # its options, as given
    if state is not None:  # volumes, as a pod's: podman's API ignores a tmpfs mode, and its owner is root
        for name, inside in (("home", "/var/lib/mcq"), ("checkpoint", "/var/lib/mcq-checkpoint")):
            (state / name).mkdir(parents=True, exist_ok=True)
            os.chmod(state / name, 0o777)
            container.with_volume_mapping(str(state / name), inside, "rw")
    if mount is not None:
        container.with_volume_mapping(str(mount), "/config", "ro")
    container.start()
    try:
        wrapped = container.get_wrapped_container()
        status = wrapped.wait(timeout=timeout)
        out = wrapped.logs(stdout=True, stderr=True).decode(errors="replace")
        return Ran(int(status["StatusCode"]), out)
    finally:
        container.stop()


def ok(ran: Ran) -> str:
    assert ran.code == 0, f"exit {ran.code}:\n{ran.out[-4000:]}"
    return ran.out


@contextmanager
def _world(settings: Settings, tmp_path: Path) -> Iterator[Accounts]:
    with accounts(settings, tmp_path, "image", 300, seed=57) as w:
        os.chmod(tmp_path, 0o755)
        os.chmod(w.registry_file, 0o644)  # the image's user (10001) reads it
        yield w


def test_both_images_answer_version_and_help_as_a_non_root_user(docker_host: str) -> None:
    for image in (LISTENER, FULL):
        assert VERSION in ok(run_image(image, "--version", env={}))
        assert "listen" in ok(run_image(image, "--help", env={}))
        assert ok(run_image(image, env={})).startswith("Usage: mcq")  # the default command
        user = docker.DockerClient(base_url=docker_host).images.get(image).attrs["Config"]["User"]
        assert user.split(":")[0] == "10001"


def test_the_listener_image_carries_no_java_and_no_spark(docker_host: str, settings: Settings) -> None:
    ran = run_image(LISTENER, "streams", "normalize", "--once", env={})
    assert ran.code == 1 and "meta-change-queue[spark]" in ran.out and "Traceback" not in ran.out, ran.out


@pytest.mark.timeout(1500)
def test_the_images_run_setup_normaliser_and_listener_against_the_stack(
    docker_host: str, stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    with _world(settings, tmp_path) as world:
        login = settings.connect.auth()
        assert login is not None
        # as a pod gets it: the Connect REST login from the deployment (the stack's own here)
        env = {**world.env, "MCQ_CONNECT__USERNAME": login[0], "MCQ_CONNECT__PASSWORD": login[1]}
        state = tmp_path / "volumes"
        registry = f"/config/{world.registry_file.name}"
        for command in (["topics", "apply"], ["schemas", "apply"], ["connect", "apply"]):
            ok(
                run_image(
                    LISTENER, *command, "--registry", registry, env=env, mount=world.registry_file.parent, state=state
                )
            )

        topic = raw_topic(world.registry.sources[0], f"{world.schema}.accounts")
        wait_raw_records(world.settings, topic, 300)
        workload = Workload(world.settings, world.schema, seed=9, next_id=300)
        with psycopg.connect(world.settings.source.dsn(), autocommit=True) as conn:
            for _ in range(200):
                workload._one(conn)
        settle(world.settings, topic)

        ok(run_image(FULL, "streams", "normalize", "--once", "--registry", registry,
                     "--checkpoint", "/var/lib/mcq-checkpoint/normalize",
                     env=env, mount=world.registry_file.parent, state=state, timeout=900))  # fmt: skip
        ok(run_image(LISTENER, "listen", world.listener, "--until-caught-up", "--registry", registry,
                     env=env, mount=world.registry_file.parent, state=state))  # fmt: skip

        assert target_state(world.settings, world.target) == world.source_view()

        # the same normaliser as Spark on Kubernetes starts it: the entrypoint's `driver`, with the
        # arguments the Spark operator gives (spark-submit's, the application file, its options)
        with psycopg.connect(world.settings.source.dsn(), autocommit=True) as conn:
            for _ in range(100):
                workload._one(conn)
        settle(world.settings, topic)
        # the pod's IP, and the address executors reach the driver at (the operator's properties
        # file gives spark.driver.host: the driver's Service)
        driver_env = {**env, "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"}
        ok(run_image(FULL, "driver", "--master", "local[4]", "--name", "mcq-normalize",
                     "--conf", "spark.driver.host=127.0.0.1",
                     "local:///opt/mcq/submit.py", "--once", "--registry", registry,
                     "--checkpoint", "/var/lib/mcq-checkpoint/normalize",
                     env=driver_env, mount=world.registry_file.parent, state=state, timeout=900))  # fmt: skip
        ok(run_image(LISTENER, "listen", world.listener, "--until-caught-up", "--registry", registry,
                     env=env, mount=world.registry_file.parent, state=state))  # fmt: skip
        assert target_state(world.settings, world.target) == world.source_view()


def test_the_full_images_executor_is_sparks_kubernetes_executor_backend(docker_host: str) -> None:
    """`executor`, with the variables a Spark driver on Kubernetes sets on its executor pods:
    Spark's KubernetesExecutorBackend starts from the image's jars and asks its driver for its
    configuration (here a driver that is not there: it says so and exits non-zero)."""
    env = {"SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:9", "SPARK_EXECUTOR_ID": "1",
           "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "spark-mcq", "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
           "SPARK_EXECUTOR_MEMORY": "512m", "SPARK_JAVA_OPT_0": "-Dmcq.test=1"}  # fmt: skip
    ran = run_image(FULL, "executor", env=env, timeout=180)
    assert ran.code != 0
    assert "Failed to connect to /127.0.0.1:9" in ran.out, ran.out[-3000:]
    assert "ClassNotFoundException" not in ran.out and "Could not find or load main class" not in ran.out
    missing = run_image(FULL, "executor", env={}, timeout=60)
    assert missing.code == 2 and "SPARK_DRIVER_URL is not set" in missing.out, missing.out
    slim = run_image(LISTENER, "driver", "--version", env={}, timeout=60)
    assert slim.code == 2 and "this image has no Spark" in slim.out, slim.out
