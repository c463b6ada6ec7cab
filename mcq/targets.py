"""Connections to targets: the deployment's LDAP directory (``ldap``), its databases
(``vendor``, ``source``) and any number of named ones (``targets``), which a listener's
adapter settings refer to by name (``target: ad``), so that two listeners can write to two
directories -- ADSI to Active Directory and LDAP to OpenLDAP, as in the MCQ paper's campus::

    targets:
      ad:     {type: ldap, url: "ldaps://ad.example:636", base_dn: "dc=ad,dc=example",
               bind_dn: "cn=mcq,ou=services,dc=ad,dc=example", password: "${env:MCQ_SECRET_AD_PASSWORD}"}
      hr:     {type: postgres, host: hr-db, port: 5432, dbname: hr, user: mcq,
               password: "${file:/run/secrets/hr}"}

A password may be a reference (``${env:MCQ_SECRET_NAME}``, ``${file:PATH}``), resolved when the
connection is made or the listener using it starts (:meth:`LdapSettings.bind_password`,
:meth:`DatabaseSettings.dsn`), so a process that never uses a target needs none of its
secrets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote, urlencode

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from mcq.errors import EXIT_CONFIG, McqError
from mcq.secrets import resolve

LOOPBACK = "127.0.0.1"


class TargetError(McqError):
    """A listener names a target the configuration does not have, or one of another type."""

    exit_code = EXIT_CONFIG


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatabaseSettings(_Section):
    """A PostgreSQL database (the capture source or the vendor target)."""

    host: str = LOOPBACK
    port: int = 0
    dbname: str = ""
    user: str = "mcq"
    password: SecretStr = SecretStr("mcq-local")
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = None
    """TLS to the server (libpq's ``sslmode``; unset: libpq's default, ``prefer``). ``verify-full``
    checks the server's certificate against ``sslrootcert`` and its name against ``host``."""
    sslrootcert: Path | None = None
    """The CA bundle (PEM) that signed the server's certificate (the local stack's:
    ``<MCQ_HOME>/tls/ca.crt``)."""

    def _tls_params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.sslmode is not None:
            params["sslmode"] = self.sslmode
        if self.sslrootcert is not None:
            params["sslrootcert"] = str(self.sslrootcert)
        return params

    def dsn(self) -> str:
        """A libpq URI, password included: hand it to a driver, never to a log."""
        pw = quote(resolve(self.password.get_secret_value(), f"{self}: password").get_secret_value(), safe="")
        query = urlencode(self._tls_params(), quote_via=quote)
        return f"postgresql://{quote(self.user, safe='')}:{pw}@{self.host}:{self.port}/{self.dbname}" + (
            f"?{query}" if query else ""
        )

    def jdbc_url(self) -> str:
        """The same database for PostgreSQL's JDBC driver (Spark's reads), TLS settings included."""
        query = urlencode(self._tls_params(), quote_via=quote)
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.dbname}" + (f"?{query}" if query else "")

    def jdbc_options(self) -> dict[str, str]:
        """What Spark's JDBC reader needs to read this database: URL, user, password (a
        reference resolved) and driver. Hand it to Spark, never to a log."""
        password = resolve(self.password.get_secret_value(), f"{self}: password").get_secret_value()
        return {"url": self.jdbc_url(), "user": self.user, "password": password, "driver": "org.postgresql.Driver"}

    def debezium_config(self) -> dict[str, str]:
        """The connector's ``database.ssl*`` entries (Debezium's names for the same settings)."""
        return {f"database.{k}": v for k, v in self._tls_params().items()}

    def __str__(self) -> str:  # what logs may show
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"


class LdapSettings(_Section):
    """The LDAP directory target."""

    url: str = ""
    base_dn: str = "dc=mcq,dc=example"
    bind_dn: str = ""
    password: SecretStr = SecretStr("mcq-local")
    ca_file: Path | None = None
    """The CA bundle (PEM) that signed the server's certificate, for ``ldaps://`` and
    StartTLS (unset: the system's CAs). The certificate is always verified, its host too."""
    start_tls: bool = False
    """Upgrade an ``ldap://`` connection with StartTLS before binding."""

    @model_validator(mode="after")
    def _tls_once(self) -> LdapSettings:
        if self.start_tls and self.url.lower().startswith("ldaps://"):
            raise ValueError("start_tls is for ldap:// URLs; an ldaps:// connection is TLS from the start")
        return self

    def bind_password(self) -> SecretStr:
        """The password to bind with (a reference resolved now)."""
        return resolve(self.password.get_secret_value(), f"ldap server {self.url}: password")

    @property
    def people_dn(self) -> str:
        return f"ou=people,{self.base_dn}"

    @property
    def groups_dn(self) -> str:
        return f"ou=groups,{self.base_dn}"


class LdapTarget(LdapSettings):
    """A named LDAP directory (``targets.<name>``, ``type: ldap``)."""

    type: Literal["ldap"]
    url: str = Field(min_length=1)
    bind_dn: str = Field(min_length=1)


class PostgresTarget(DatabaseSettings):
    """A named PostgreSQL database (``targets.<name>``, ``type: postgres``)."""

    type: Literal["postgres"]
    port: int = Field(gt=0)
    dbname: str = Field(min_length=1)


TargetConnection = Annotated[LdapTarget | PostgresTarget, Field(discriminator="type")]


def find_target(targets: dict[str, LdapTarget | PostgresTarget], name: str, kind: str) -> LdapTarget | PostgresTarget:
    """The target NAME (compared without case: environment variables are), of type KIND."""
    found = next((t for n, t in targets.items() if n.lower() == name.lower()), None)
    if found is None:
        known = ", ".join(f"{n} ({t.type})" for n, t in sorted(targets.items())) or "none configured"
        raise TargetError(f"no target named {name!r} in the configuration's targets (known: {known})")
    if found.type != kind:
        raise TargetError(f"target {name!r} is a connection of type {found.type}, not {kind}")
    return found


def jdbc_options_from_dsn(dsn: str) -> dict[str, str] | None:
    """A libpq connection string (key=value or URI) as Spark JDBC reader options; None
    when it names what PostgreSQL's JDBC driver cannot reach the same way (a Unix socket,
    several hosts, a service file, settings JDBC has no name for)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    except Exception:  # a malformed string: the adapter's own connection says what is wrong
        return None
    host = params.pop("host", "localhost")
    port = params.pop("port", "5432")
    if host.startswith("/") or "," in host or "," in port or "hostaddr" in params or "service" in params:
        return None
    dbname = params.pop("dbname", params.get("user", ""))
    out = {"driver": "org.postgresql.Driver"}
    for name in ("user", "password"):
        if name in params:
            out[name] = params.pop(name)
    params.pop("connect_timeout", None)
    params.pop("application_name", None)
    tls: dict[str, str] = {k: params.pop(k) for k in ("sslmode", "sslrootcert") if k in params}
    if params:  # a client certificate among them: JDBC wants its key in another format
        return None
    query = urlencode(tls, quote_via=quote)
    out["url"] = f"jdbc:postgresql://{host}:{port}/{quote(dbname, safe='')}" + (f"?{query}" if query else "")
    return out
