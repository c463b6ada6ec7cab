"""An Active Directory domain controller: Samba's AD DC from Debian's packages, provisioned
by the local stack when asked (``mcq stack up --with ad``), reached over LDAPS with the
stack's CA. Only its LDAP server runs (``server services = ldap``), in one process.

Samba's LDAP ports are fixed (389, 636, and the global catalog's 3268, 3269): the DC
listens on 127.0.0.1 only. Provisioning needs root (Samba sets the sysvol's ACLs), and
takes a few seconds, once per stack home.
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
from pathlib import Path
from typing import Any

from mcq.config import LOOPBACK, Settings
from mcq.stack.exceptions import MissingRuntime
from mcq.stack.process import EXE_MARKER
from mcq.stack.services.base import NotReady, Service
from mcq.stack.tls import stack_tls

REALM = "MCQ.TEST"
DOMAIN = "MCQ"
BASE_DN = "DC=mcq,DC=test"
ADMIN_DN = f"CN=Administrator,CN=Users,{BASE_DN}"
LDAPS_PORT = 636
SEARCH = "/usr/sbin:/usr/bin:/sbin:/bin"


def ad_password(settings: Settings) -> str:
    """The domain administrator's password: the stack's LDAP password made to pass AD's
    complexity rules (upper and lower case, a digit, a symbol)."""
    return f"Ad-{settings.ldap.password.get_secret_value()}-1"


def ad_directory(settings: Settings) -> dict[str, Any]:
    """The local AD as a named target's settings (``targets.<name>``, ``type: ldap``)."""
    return {
        "type": "ldap",
        "url": f"ldaps://{LOOPBACK}:{LDAPS_PORT}",
        "base_dn": BASE_DN,
        "bind_dn": ADMIN_DN,
        "password": ad_password(settings),
        "ca_file": str(stack_tls(settings).ca_cert),
    }


class ActiveDirectory(Service):
    """Samba's AD DC, LDAP only, one process."""

    name = "ad"
    stop_signal = signal.SIGTERM

    @property
    def marker(self) -> str:
        # Samba writes its process title over its command line: its executable it is
        return f"{EXE_MARKER}{os.path.realpath(self.samba)}"

    @property
    def ports(self) -> tuple[int, ...]:
        return (389, LDAPS_PORT, 3268, 3269)

    @property
    def address(self) -> str:
        return f"ldaps://{LOOPBACK}:{LDAPS_PORT}"

    @property
    def samba(self) -> Path:
        return Path(shutil.which("samba", path=SEARCH) or "/usr/sbin/samba")

    @property
    def samba_tool(self) -> Path:
        return Path(shutil.which("samba-tool", path=SEARCH) or "/usr/bin/samba-tool")

    def _conf(self) -> str:
        tls = stack_tls(self.settings).ensure()
        data, run = self.data_dir, self.home / "run" / "ad"
        return f"""[global]
\tnetbios name = DC1
\tworkgroup = {DOMAIN}
\trealm = {REALM}
\tserver role = active directory domain controller
\tserver services = ldap
\tinterfaces = {LOOPBACK}
\tbind interfaces only = yes
\tprivate dir = {data}/private
\tlock directory = {data}
\tstate directory = {data}/state
\tcache directory = {data}/cache
\tbinddns dir = {data}/bind-dns
\tpid directory = {run}
\tncalrpc dir = {run}/ncalrpc
\twinbindd socket directory = {run}/winbindd
\tntp signd socket directory = {run}/ntp_signd
\tlog file = {self.home}/logs/ad.%m.log
\tidmap_ldb:use rfc2307 = yes
\ttls enabled = yes
\ttls keyfile = {tls.server_key}
\ttls certfile = {tls.server_cert}
\ttls cafile = {tls.ca_cert}
"""

    def prepare(self) -> None:
        self._require(self.samba, "Samba's AD DC (samba; `make install` installs it)")
        tool = self._require(self.samba_tool, "samba-tool")
        if os.geteuid() != 0:
            raise MissingRuntime(self.name, "provisioning an AD domain controller needs root", self.handle.log_file)
        (self.home / "run" / "ad").mkdir(parents=True, exist_ok=True)
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        if not (self.data_dir / "private" / "sam.ldb").exists():
            if self.data_dir.exists():
                shutil.rmtree(self.data_dir)  # a provision that did not finish
            self.data_dir.mkdir(parents=True)
            empty = self.conf_dir / "provision.conf"
            empty.write_text("[global]\n")  # nothing of /etc/samba/smb.conf is inherited
            password = ad_password(self.settings)
            self._run(
                [str(tool), "domain", "provision", "-s", str(empty), f"--targetdir={self.data_dir}",
                 f"--realm={REALM}", f"--domain={DOMAIN}", "--server-role=dc", "--dns-backend=NONE",
                 "--use-rfc2307", "--host-name=dc1", f"--adminpass={password}", f"--option=interfaces={LOOPBACK}",
                 "--option=bind interfaces only=yes"],
                hide=(password,),
            )  # fmt: skip
        (self.conf_dir / "smb.conf").write_text(self._conf())

    def argv(self) -> list[str]:
        # -i: in the foreground, logging to the service log; -M single: one process
        return [str(self.samba), "-i", "-M", "single", "-s", str(self.conf_dir / "smb.conf")]

    def check(self) -> None:
        from ldap3 import BASE, Connection, Server, Tls
        from ldap3.core.exceptions import LDAPException

        tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=str(stack_tls(self.settings).ca_cert),
                  version=ssl.PROTOCOL_TLS_CLIENT)  # fmt: skip
        try:
            server = Server(self.address, connect_timeout=3, tls=tls)
            conn = Connection(server, ADMIN_DN, ad_password(self.settings), receive_timeout=5, raise_exceptions=True)
            conn.bind()
            conn.search(BASE_DN, "(objectClass=*)", BASE, attributes=["1.1"])
            conn.unbind()
        except (LDAPException, OSError) as exc:
            raise NotReady(f"ldaps bind as the domain administrator: {exc}") from None
