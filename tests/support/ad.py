"""A connection to the local stack's Active Directory (Samba's domain controller) over LDAPS,
as its administrator."""

from __future__ import annotations

import ssl

from ldap3 import Connection, Server, Tls

from mcq.config import Settings
from mcq.stack.services.ad import ad_directory


def ad(settings: Settings) -> Connection:
    target = ad_directory(settings)
    tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=target["ca_file"], version=ssl.PROTOCOL_TLS_CLIENT)
    return Connection(Server(target["url"], tls=tls), target["bind_dn"], target["password"], auto_bind=True)
