"""The local stack: every service up and really answering; `up` idempotent; a taken
port is one clear line; `down` leaves no process."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import ldap3
import psycopg
import pytest

from mcq.config import Settings
from mcq.stack import Stack
from mcq.stack.services import DEBEZIUM_POSTGRES_CONNECTOR
from mcq.stack.services.kafka import _argfile_quoted
from tests.integration.net import free_port

MCQ = [sys.executable, "-m", "mcq.cli"]


def _isolated_env(home: Path, ports: dict[str, int]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCQ_")}
    env["MCQ_HOME"] = str(home)
    for name, port in ports.items():
        env[f"MCQ_STACK__PORTS__{name.upper()}"] = str(port)
    return env


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            pids.append(int(proc.name))
    return pids


def test_status_shows_every_service_up_with_address_and_pid(stack: Stack) -> None:
    out = subprocess.run([*MCQ, "stack", "status"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    for row in stack.status():
        assert row.up, row
        assert row.pid is not None
        assert row.name in out.stdout and str(row.pid) in out.stdout and row.address in out.stdout


def test_up_is_idempotent_on_a_running_stack(stack: Stack) -> None:
    # the stack as a new process sees it: with the optional AD when a test started it
    running = Stack(stack.settings)
    before = {r.name: r.pid for r in running.status()}
    out = subprocess.run([*MCQ, "stack", "up"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("already running") == len(before)
    assert {r.name: r.pid for r in running.status()} == before


def test_postgres_source_has_logical_wal_and_the_vendor_database_exists(stack: Stack, settings: Settings) -> None:
    with psycopg.connect(settings.source.dsn()) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
    with psycopg.connect(settings.vendor.dsn()) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (settings.vendor.dbname,)


def test_postgres_asks_every_login_for_its_password_on_the_socket_too(stack: Stack, settings: Settings) -> None:
    db = settings.source
    socket_dir = stack.service("postgres").socket_dir  # type: ignore[attr-defined]
    where = f"host={socket_dir} port={settings.stack.ports.postgres} dbname={db.dbname} user={db.user}"
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(where, passfile=os.devnull, connect_timeout=5).close()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(where, password="not-the-password", passfile=os.devnull, connect_timeout=5).close()
    with psycopg.connect(where, password=db.password.get_secret_value(), connect_timeout=5) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (db.user,)


def test_connect_lists_the_debezium_postgres_plugin(stack: Stack, settings: Settings) -> None:
    plugins = httpx.get(f"{settings.connect.url}/connector-plugins", auth=settings.connect.auth(), timeout=10).json()
    assert DEBEZIUM_POSTGRES_CONNECTOR in {p["class"] for p in plugins}


def test_the_connect_rest_api_answers_only_the_stacks_login(stack: Stack, settings: Settings) -> None:
    url = f"{settings.connect.url}/connectors"
    login = settings.connect.auth()
    assert login is not None and login[0] == "mcq-connect-rest"
    password = settings.stack.password_file("mcq-connect-rest")
    assert password.stat().st_mode & 0o777 == 0o600
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, auth=(login[0], "not-the-password"), timeout=10).status_code == 401
    assert httpx.post(url, json={"name": "x", "config": {}}, timeout=10).status_code == 401
    assert httpx.get(url, auth=login, timeout=10).status_code == 200


def test_ldap_binds_and_has_people_and_groups(stack: Stack, settings: Settings) -> None:
    conn = ldap3.Connection(
        ldap3.Server(settings.ldap.url),
        settings.ldap.bind_dn,
        settings.ldap.password.get_secret_value(),
        auto_bind=True,
    )
    assert conn.search(settings.ldap.base_dn, "(objectClass=organizationalUnit)", attributes=["ou"])
    assert {str(e.ou) for e in conn.entries} >= {"people", "groups"}
    conn.unbind()


def test_wrong_ldap_password_is_refused(stack: Stack, settings: Settings) -> None:
    conn = ldap3.Connection(ldap3.Server(settings.ldap.url), settings.ldap.bind_dn, "not-the-password")
    assert conn.bind() is False


def test_a_taken_port_fails_at_once_in_one_line_naming_service_port_and_log(tmp_path: Path) -> None:
    ports = {
        n: free_port()
        for n in ("postgres", "kafka", "kafka_controller", "kafka_sasl", "connect", "registry", "ldap", "ldaps")
    }
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        ports["ldap"] = squatter.getsockname()[1]
        out = subprocess.run(
            [*MCQ, "stack", "up"], capture_output=True, text=True, env=_isolated_env(tmp_path, ports), timeout=60
        )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "ldap" in lines[0] and str(ports["ldap"]) in lines[0] and "already in use" in lines[0]
    assert str(tmp_path / "logs" / "ldap.log") in lines[0]
    assert _processes_mentioning(str(tmp_path)) == []  # nothing was started


@pytest.fixture
def world_readable_home() -> Iterator[Path]:
    """An MCQ_HOME that PostgreSQL's own user can reach when the tests run as root
    (pytest's tmp_path lives under a directory only its owner may enter)."""
    home = Path(tempfile.mkdtemp(prefix="mcq-test-home-", dir="/tmp"))
    home.chmod(0o755)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_up_then_down_leaves_no_process_behind(world_readable_home: Path) -> None:
    """A separate small stack (PostgreSQL and OpenLDAP) in its own MCQ_HOME and ports."""
    tmp_path = world_readable_home
    ports = {n: free_port() for n in ("postgres", "ldap", "ldaps")}
    env = _isolated_env(tmp_path, ports)
    up = subprocess.run(
        [*MCQ, "stack", "up", "--only", "postgres,ldap"], capture_output=True, text=True, env=env, timeout=180
    )
    assert up.returncode == 0, up.stdout + up.stderr
    assert "stack up in" in up.stdout
    assert len(_processes_mentioning(str(tmp_path))) >= 2
    status = subprocess.run(
        [*MCQ, "stack", "status", "--only", "postgres,ldap"], capture_output=True, text=True, env=env
    )
    assert status.returncode == 0, status.stdout
    down = subprocess.run(
        [*MCQ, "stack", "down", "--only", "postgres,ldap"], capture_output=True, text=True, env=env, timeout=120
    )
    assert down.returncode == 0
    assert _processes_mentioning(str(tmp_path)) == []
    status = subprocess.run(
        [*MCQ, "stack", "status", "--only", "postgres,ldap"], capture_output=True, text=True, env=env
    )
    assert status.returncode == 3


def test_an_argument_file_hands_java_every_character_of_a_secret(settings: Settings, tmp_path: Path) -> None:
    """kafka-storage gets the admin's SCRAM password from a private argument file (not on a
    command line): quotes, backslashes and spaces reach the program exactly."""
    echo = tmp_path / "Echo.java"
    echo.write_text(
        "public class Echo { public static void main(String[] a) { for (String s : a) System.out.println(s); } }"
    )
    args = ['SCRAM-SHA-512=[name=mcq-admin,password="a b\\c\'d"e"]', "-t", "x y", ""]
    argfile = tmp_path / "echo.args"
    argfile.write_text(f"{echo}\n" + "".join(f"{_argfile_quoted(a)}\n" for a in args))
    shown = subprocess.run(
        [settings.stack.java, f"@{argfile}"], capture_output=True, text=True, check=True, timeout=120
    )
    assert shown.stdout.split("\n")[:-1] == args
