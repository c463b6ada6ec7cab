"""PostgreSQL from Debian's packages: the source database (logical decoding on), the vendor
database and the schema registry's storage."""

from __future__ import annotations

import os
import pwd
import re
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcq.config import LOOPBACK
from mcq.stack.exceptions import ServiceFailed
from mcq.stack.files import write_private
from mcq.stack.process import as_user
from mcq.stack.services.base import NotReady, Service
from mcq.stack.tls import stack_tls

if TYPE_CHECKING:
    import psycopg


class Postgres(Service):
    """One PostgreSQL cluster (wal_level=logical) holding the source, the vendor
    target and the schema registry's storage, each its own database."""

    name = "postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown: roll back clients, checkpoint, exit

    @property
    def marker(self) -> str:
        return str(self.data_dir)

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.postgres,)

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.settings.stack.ports.postgres}"

    @property
    def socket_dir(self) -> Path:
        return self.home / "run" / "postgres"

    @property
    def databases(self) -> list[str]:
        return [self.settings.source.dbname, self.settings.vendor.dbname, "mcq_registry"]

    def run_as(self) -> str | None:
        # PostgreSQL refuses to run as root; as anyone else it runs as that user.
        return self.settings.stack.postgres_os_user if os.geteuid() == 0 else None

    def _own(self, *paths: Path) -> None:
        user = self.run_as()
        if user is None:
            return
        pw = pwd.getpwnam(user)
        for path in paths:
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def _bin(self, prog: str) -> str:
        return str(self._require(self.settings.stack.postgres_bin / prog, f"PostgreSQL's {prog}"))

    def _check_reachable(self) -> None:
        """As root, PostgreSQL runs as another user, who must be able to reach MCQ_HOME."""
        user = self.run_as()
        if user is None:
            return
        probe = subprocess.run(["test", "-x", str(self.home)], check=False, **as_user(user))
        if probe.returncode != 0:
            raise ServiceFailed(
                self.name,
                f"user {user!r} (PostgreSQL refuses to run as root) cannot reach {self.home}; "
                "choose an MCQ_HOME whose parent directories others may traverse (chmod o+x)",
                self.handle.log_file,
            )

    @property
    def tls_key(self) -> Path:
        """The server key, PostgreSQL's own copy (it must belong to the server's user, mode 0600)."""
        return self.data_dir.parent / "postgres-server.key"

    def prepare(self) -> None:
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._check_reachable()
        self._own(self.socket_dir)
        tls = stack_tls(self.settings).ensure()
        write_private(self.tls_key, tls.server_key.read_bytes())
        self._own(self.tls_key)
        if (self.data_dir / "PG_VERSION").exists():
            _no_trust(self.data_dir / "pg_hba.conf")  # a stack made when local logins were trusted
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        self._own(self.data_dir)
        pwfile = self.data_dir.parent / ".pg-initial-password"
        write_private(pwfile, self.settings.source.password.get_secret_value() + "\n")
        self._own(pwfile)
        try:
            self._run(
                [
                    self._bin("initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    self.settings.source.user,
                    f"--pwfile={pwfile}",
                    "--auth-local=scram-sha-256",  # no login without the password, on the socket too
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                ],
                user=self.run_as(),
            )
        finally:
            pwfile.unlink(missing_ok=True)
        with (self.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 scram-sha-256\n")

    def argv(self) -> list[str]:
        s = self.settings.stack
        conf = {
            "listen_addresses": LOOPBACK,
            "port": s.ports.postgres,
            "unix_socket_directories": self.socket_dir,
            "wal_level": "logical",
            "max_wal_senders": 20,
            "max_replication_slots": 40,
            "max_connections": 200,
            "shared_buffers": "128MB",
            "logging_collector": "off",
            # TLS offered (clients choose: libpq's default sslmode=prefer takes it, verify-full
            # checks it against the stack's CA, <MCQ_HOME>/tls/ca.crt)
            "ssl": "on",
            "ssl_cert_file": stack_tls(self.settings).server_cert,
            "ssl_key_file": self.tls_key,
        }
        flags = [f"--{k}={v}" for k, v in conf.items()]
        return [self._bin("postgres"), "-D", str(self.data_dir), *flags]

    def _connect(self, dbname: str) -> psycopg.Connection[tuple[Any, ...]]:
        import psycopg

        db = self.settings.source
        return psycopg.connect(
            host=LOOPBACK,
            port=self.settings.stack.ports.postgres,
            dbname=dbname,
            user=db.user,
            password=db.password.get_secret_value(),
            connect_timeout=3,
            autocommit=True,
        )

    def after_start(self) -> None:
        with self._connect("postgres") as conn:
            existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()}
            for db in self.databases:
                if db not in existing:
                    conn.execute(f'CREATE DATABASE "{db}"')
            vendor = self.settings.vendor
            if vendor.user != self.settings.source.user:
                if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (vendor.user,)).fetchone():
                    conn.execute(f"CREATE ROLE \"{vendor.user}\" LOGIN PASSWORD '{vendor.password.get_secret_value()}'")
                conn.execute(f'GRANT ALL ON DATABASE "{vendor.dbname}" TO "{vendor.user}"')

    def check(self) -> None:
        import psycopg

        try:
            with self._connect("postgres") as conn:
                row = conn.execute("SHOW wal_level").fetchone()
        except psycopg.OperationalError as exc:
            raise NotReady(str(exc).strip().splitlines()[0]) from None
        wal = row[0] if row else None
        if wal != "logical":
            raise NotReady(f"wal_level is {wal}, logical decoding needs 'logical'")


def _no_trust(hba: Path) -> None:
    """Every ``trust`` rule of ``pg_hba.conf`` asks for the password instead."""
    lines = hba.read_text().splitlines(keepends=True)
    changed = [
        re.sub(r"\btrust(\s*)$", r"scram-sha-256\1", line) if not line.lstrip().startswith("#") else line
        for line in lines
    ]
    if changed != lines:
        hba.write_text("".join(changed))
