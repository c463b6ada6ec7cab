"""Shared fixtures.

The real stack is started once per test session (two cores: the JVMs start once) and
reused when it is already running; it is stopped at the end only if this session
started it. Tests isolate themselves by unique names: topic prefixes, group ids,
subjects, database schemas.

Where a Docker engine answers, testcontainers could provide these services; on our
machines none does, so the process stack (`mcq stack`) is what runs.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from mcq.config import KAFKA_ADMIN, KAFKA_CONNECT, Settings, load_settings
from mcq.stack import Stack
from mcq.testing.logs import log_lines

pytest_plugins = [
    "tests.hang_guard",  # a test stuck past its timeout ends the session, with tracebacks
    "tests.time_budget",  # under CI's deadline, a scenario of the suites starts only while it can end
]

# The property tests explore the same inputs on every run (a submission's CI never fails on
# an input no earlier run tried); `HYPOTHESIS_PROFILE=explore pytest ...` searches afresh.
hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
hypothesis_settings.register_profile("explore", max_examples=5000, database=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = str(item.path).replace("\\", "/")
        if "tests/integration/" in where or "tests/package/" in where or "tests/cluster/" in where:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm, as ``make helm`` builds it from its Go module into ``.cache/helm-<version>/``
    (a version change builds it again); ``MCQ_HELM`` names another."""
    root = Path(__file__).resolve().parents[1]
    found = Path(os.environ.get("MCQ_HELM") or max(root.glob(".cache/helm-*/helm"), default=root / ".cache/helm"))
    if not found.exists():
        pytest.fail(f"{found} is missing: `make helm` builds it from its Go module (make test does)")
    return found


@contextmanager
def _up_for_session(st: Stack) -> Iterator[Stack]:
    """ST's services up for the rest of the session: started here when they are not all
    running, and then stopped after, also after a failed start (left running when they were)."""
    if st.is_up():
        yield st
        return
    try:
        with log_lines("mcq.stack") as lines:
            try:
                st.up()
            finally:
                print("".join(f"[stack] {line}\n" for line in lines), end="")
        yield st
    finally:  # also after a failed start: leave no process behind
        # Kafka clients the tests dropped are closed while the broker is still up: freed
        # after it stopped, each would print librdkafka's "Connect failed" lines
        gc.collect()
        with log_lines("mcq.stack") as lines:
            st.down()
        print("".join(f"[stack] {line}\n" for line in lines), end="")


@contextmanager
def _optional_services(settings: Settings, name: str) -> Iterator[Stack]:
    """Optional services of the local stack (``mcq stack up --with NAME``: a service or a group)."""
    from mcq.stack.services import GROUPS

    with _up_for_session(Stack(settings, only=GROUPS.get(name, (name,)), with_=[name])) as st:
        yield st


@pytest.fixture(scope="module")
def kubernetes(settings: Settings) -> Iterator[Path]:
    """The local stack's Kubernetes API server and its etcd (``--with kubernetes``); the
    administrator's kubeconfig. Up for the module that uses it, then stopped (when it started
    them): a session that goes on with other suites carries no idle API server."""
    from mcq.stack.services import KUBERNETES, kubeconfig

    with _optional_services(settings, KUBERNETES):
        yield kubeconfig(settings)


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings()


@pytest.fixture(scope="session")
def stack(settings: Settings) -> Iterator[Stack]:
    """The real local stack, up and healthy for the whole session."""
    with _up_for_session(Stack(settings)) as st:
        yield st


@pytest.fixture(scope="session")
def active_directory(stack: Stack, settings: Settings) -> Iterator[Stack]:
    """Samba's AD domain controller of the local stack (``--with ad``)."""
    with _optional_services(settings, "ad") as st:
        _forget_earlier_sessions(settings)
        yield st


@pytest.fixture(scope="module")
def spark_cluster(stack: Stack, settings: Settings) -> Iterator[str]:
    """The local stack's standalone Spark cluster (``--with spark``: a master and two
    workers); its master's URL. Up for the module that uses it, then stopped (when it started
    them): a session that goes on with the fault scenarios carries no idle cluster."""
    from mcq.stack.services import SPARK, master_url

    with _optional_services(settings, SPARK):
        yield master_url(settings)


def _forget_earlier_sessions(settings: Settings) -> None:
    """The OUs an earlier, interrupted session left in the AD: their users would hold
    sAMAccountNames (unique in the whole domain) that this session's tests use again."""
    import ssl

    from ldap3 import LEVEL, Connection, Server, Tls

    from mcq.stack.services.ad import BASE_DN, ad_directory

    target = ad_directory(settings)
    tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=target["ca_file"], version=ssl.PROTOCOL_TLS_CLIENT)
    conn = Connection(Server(target["url"], tls=tls), target["bind_dn"], target["password"], auto_bind=True)
    conn.search(BASE_DN, "(objectClass=organizationalUnit)", LEVEL, attributes=["1.1"])
    for ou in [e.entry_dn for e in conn.entries if e.entry_dn.lower() != f"ou=domain controllers,{BASE_DN}".lower()]:
        conn.delete(ou, controls=[("1.2.840.113556.1.4.805", True, None)])  # the tree delete control
    conn.unbind()


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_the_sessions_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Nothing written to a log during the session holds a secret value of the stack's: the
    services' logs (what they gained since the session started) and every ``*.log`` the
    tests wrote (the normaliser's and listeners' own, under pytest's temporary directories).
    A value found fails the session, naming the secret's setting and the file. (Not the
    ``settings`` fixture: a parametrized test may have an argument of that name.)"""
    settings = load_settings()
    logs = settings.stack.home / "logs"
    start = {p: p.stat().st_size for p in logs.glob("*")} if logs.is_dir() else {}
    yield
    secrets = {
        "stack.kafka_admin_password": settings.stack.local_password(KAFKA_ADMIN),
        "stack.kafka_connect_password": settings.stack.local_password(KAFKA_CONNECT),
        "source.password": settings.source.password,
        "vendor.password": settings.vendor.password,
        "ldap.password": settings.ldap.password,
    }
    values = {name: secret.get_secret_value().encode() for name, secret in secrets.items()}
    files = [*(logs.glob("*") if logs.is_dir() else []), *tmp_path_factory.getbasetemp().rglob("*.log")]
    found = []
    for path in files:
        if not path.is_file():
            continue
        with path.open("rb") as fh:
            fh.seek(start.get(path, 0))
            text = fh.read()
        found += [f"{name} in {path}" for name, value in values.items() if value and value in text]
    if found:
        pytest.fail("a secret value was written to a log during the session: " + "; ".join(found), pytrace=False)


@pytest.fixture
def token() -> str:
    """A short unique token for names that must not collide with other tests."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def topic(token: str) -> str:
    return f"test-{token}"


@pytest.fixture
def group_id(token: str) -> str:
    return f"test-group-{token}"


@pytest.fixture
def pg_schema(stack: Stack, settings: Settings, token: str) -> Iterator[str]:
    """A database schema of the source database of this test's own, dropped after."""
    import psycopg

    name = f"test_{token}"
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield name
    with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def kafka_conf(stack: Stack, settings: Settings) -> dict[str, Any]:
    return settings.kafka.client_config()
