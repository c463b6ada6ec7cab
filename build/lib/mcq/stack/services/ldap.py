"""OpenLDAP (slapd) from Debian's packages: the directory the LDAP listeners write to, over
ldap:// and ldaps:// with the stack's CA."""

from __future__ import annotations

import base64
import hashlib
import secrets
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from mcq.config import LOOPBACK, Settings
from mcq.stack.exceptions import ServiceFailed
from mcq.stack.services.base import NotReady, Service
from mcq.stack.tls import stack_tls

if TYPE_CHECKING:
    pass


def _ssha(secret: str) -> str:
    salt = secrets.token_bytes(8)
    digest = hashlib.sha1(secret.encode() + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


SECOND_BASE_DN = "dc=second,dc=example"
"""The local directory's second database: a second directory for a second LDAP listener
(the campus wrote to Active Directory beside OpenLDAP), reached as a named target."""


def second_directory(settings: Settings) -> dict[str, str]:
    """The local stack's second directory as a named target's settings (``targets.<name>``):
    same server, its own suffix and administrator (same password as the first)."""
    return {
        "type": "ldap",
        "url": f"ldap://{LOOPBACK}:{settings.stack.ports.ldap}",
        "base_dn": SECOND_BASE_DN,
        "bind_dn": f"cn=admin,{SECOND_BASE_DN}",
        "password": settings.ldap.password.get_secret_value(),
    }


class Ldap(Service):
    """OpenLDAP's slapd with two mdb databases (the deployment's base DN, and
    :data:`SECOND_BASE_DN`), each with people and groups."""

    name = "ldap"
    stop_signal = signal.SIGINT

    @property
    def marker(self) -> str:
        return str(self.conf_dir)

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.ldap, self.settings.stack.ports.ldaps)

    @property
    def address(self) -> str:
        return f"ldap://{LOOPBACK}:{self.settings.stack.ports.ldap}"

    @property
    def tls_address(self) -> str:
        return f"ldaps://{LOOPBACK}:{self.settings.stack.ports.ldaps}"

    def _tls_ldif(self) -> str:
        """cn=config's TLS attributes: the stack's certificate for ldaps:// and StartTLS."""
        tls = stack_tls(self.settings).ensure()
        return (
            f"olcTLSCACertificateFile: {tls.ca_cert}\n"
            f"olcTLSCertificateFile: {tls.server_cert}\n"
            f"olcTLSCertificateKeyFile: {tls.server_key}\n"
        )

    def _add_tls(self) -> None:
        """A directory made before the stack had TLS: add it to cn=config (offline, slapmodify)."""
        if "olcTLSCertificateFile" in (self.conf_dir / "cn=config.ldif").read_text():
            return
        slapmodify = self._require(self.settings.stack.slapd.parent / "slapmodify", "OpenLDAP's slapmodify")
        ldif = self.conf_dir.parent / "ldap-tls.ldif"
        lines = self._tls_ldif().splitlines()
        changes = "".join(f"add: {line.split(':')[0]}\n{line}\n-\n" for line in lines)
        ldif.write_text(f"dn: cn=config\nchangetype: modify\n{changes}")
        self._run([str(slapmodify), "-n", "0", "-F", str(self.conf_dir), "-l", str(ldif)])

    def _directories(self) -> list[tuple[int, str, str, Path]]:
        """(database number, suffix, root DN, data directory) of each directory."""
        ldap = self.settings.ldap
        return [
            (1, ldap.base_dn, ldap.bind_dn, self.data_dir),
            (2, SECOND_BASE_DN, f"cn=admin,{SECOND_BASE_DN}", self.data_dir.with_name("ldap-second")),
        ]

    def _database_ldif(self, number: int, suffix: str, root: str, data: Path) -> str:
        return f"""\
dn: olcDatabase={{{number}}}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {{{number}}}mdb
olcSuffix: {suffix}
olcRootDN: {root}
olcRootPW: {_ssha(self.settings.ldap.password.get_secret_value())}
olcDbDirectory: {data}
olcDbMaxSize: 1073741824
olcDbIndex: objectClass eq
olcDbIndex: uid,cn,mail,memberUid eq
olcAccess: {{0}}to * by anonymous auth by * read
"""

    @staticmethod
    def _base_ldif(suffix: str) -> str:
        first_rdn_value = suffix.split(",")[0].split("=", 1)[1]
        return f"""\
dn: {suffix}
objectClass: top
objectClass: dcObject
objectClass: organization
o: {first_rdn_value}
dc: {first_rdn_value}

dn: ou=people,{suffix}
objectClass: organizationalUnit
ou: people

dn: ou=groups,{suffix}
objectClass: organizationalUnit
ou: groups
"""

    def _slapadd(self, database: int, name: str, ldif: str) -> None:
        slapadd = self._require(self.settings.stack.slapd.parent / "slapadd", "OpenLDAP's slapadd")
        path = self.conf_dir.parent / name
        path.write_text(ldif)
        self._run([str(slapadd), "-n", str(database), "-F", str(self.conf_dir), "-l", str(path)])

    def prepare(self) -> None:
        self._require(self.settings.stack.slapd.parent / "slapadd", "OpenLDAP's slapadd")
        self._require(self.settings.stack.slapd, "OpenLDAP's slapd")
        directories = self._directories()
        if (self.conf_dir / "cn=config.ldif").exists():
            if all((self.conf_dir / "cn=config" / f"olcDatabase={{{n}}}mdb.ldif").exists() for n, *_ in directories):
                self._add_tls()
                return
            # a directory made with fewer databases (cn=config takes none offline): its
            # configuration is derived, so it is made anew; the data of its databases is kept
            shutil.rmtree(self.conf_dir)
        else:
            for *_, data in directories:
                shutil.rmtree(data, ignore_errors=True)
        schema = self.settings.stack.ldap_schema_dir
        run = self.home / "run"
        self.conf_dir.mkdir(parents=True)
        run.mkdir(parents=True, exist_ok=True)
        includes = "".join(
            f"include: file://{self._require(schema / f'{s}.ldif', f'LDAP schema {s}')}\n\n"
            for s in ("core", "cosine", "nis", "inetorgperson")
        )
        config = f"""\
dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: {run}/slapd.pid
olcArgsFile: {run}/slapd.args
{self._tls_ldif()}
dn: cn=module{{0}},cn=config
objectClass: olcModuleList
cn: module{{0}}
olcModulePath: {self.settings.stack.ldap_module_dir}
olcModuleLoad: back_mdb

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

{includes}dn: olcDatabase={{-1}}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {{-1}}frontend
olcSizeLimit: unlimited

dn: olcDatabase={{0}}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {{0}}config
olcAccess: {{0}}to * by * none
"""
        config += "".join("\n" + self._database_ldif(*d) for d in directories)
        kept = {number for number, *_, data in directories if (data / "data.mdb").exists()}
        for *_, data in directories:
            data.mkdir(parents=True, exist_ok=True)
        try:
            self._slapadd(0, "ldap-config.ldif", config)
            for number, suffix, *_ in directories:
                if number not in kept:
                    self._slapadd(number, f"ldap-base-{number}.ldif", self._base_ldif(suffix))
        except ServiceFailed:
            shutil.rmtree(self.conf_dir, ignore_errors=True)  # so the next `up` starts over
            raise

    def argv(self) -> list[str]:
        # -d keeps slapd in the foreground (it would fork otherwise), level 0 = quiet
        urls = f"{self.address}/ {self.tls_address}/"  # StartTLS on the first, TLS from the start on the second
        return [str(self.settings.stack.slapd), "-h", urls, "-F", str(self.conf_dir), "-d", "0"]

    def check(self) -> None:
        import ldap3
        from ldap3.core.exceptions import LDAPException

        ldap = self.settings.ldap
        server = ldap3.Server(self.address, connect_timeout=3)
        try:
            conn = ldap3.Connection(
                server, ldap.bind_dn, ldap.password.get_secret_value(), auto_bind=True, receive_timeout=5
            )
            found = conn.search(ldap.people_dn, "(objectClass=organizationalUnit)", search_scope=ldap3.BASE)
            conn.unbind()
        except LDAPException as exc:
            raise NotReady(f"bind as {ldap.bind_dn}: {exc}") from None
        if not found:
            raise NotReady(f"{ldap.people_dn} is missing")
