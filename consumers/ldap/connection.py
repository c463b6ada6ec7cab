"""A bound connection to the LDAP directory, over ``ldaps://`` or StartTLS when configured,
with the server's certificate and host name always verified (``ldap.ca_file`` or the
system's CAs). Every failure is one line naming the server and the reason; a certificate
that is not trusted also says which setting fixes it."""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

from ldap3 import NONE, Connection, Server, Tls
from ldap3.core.exceptions import LDAPException, LDAPSocketOpenError, LDAPStartTLSError

from consumers.exceptions import ConsumerError
from mcq.targets import LdapSettings


class LdapConnectError(ConsumerError):
    """The directory cannot be reached, its certificate is not trusted, or the bind was refused."""


def _tls(ldap: LdapSettings) -> Tls | None:
    if not (ldap.start_tls or ldap.url.lower().startswith("ldaps://")):
        return None
    return Tls(
        validate=ssl.CERT_REQUIRED,
        ca_certs_file=str(ldap.ca_file) if ldap.ca_file else None,
        version=ssl.PROTOCOL_TLS_CLIENT,  # checks the host name against the certificate
    )


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("certificate verify failed:", "CERTIFICATE_VERIFY_FAILED]"):
        if marker in text:
            detail = text.split(marker, 1)[1].split("(_ssl.c")[0].strip(" ]:,'\")")
            return f"its TLS certificate is not trusted ({detail or 'verify failed'})"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def connect(ldap: LdapSettings, *, connect_timeout: float = 5, receive_timeout: float = 15) -> Connection:
    """Open, secure (StartTLS when asked) and bind a connection to ``ldap.url``."""
    where = urlsplit(ldap.url).netloc or ldap.url
    try:
        server = Server(ldap.url, connect_timeout=connect_timeout, get_info=NONE, tls=_tls(ldap))
        conn = Connection(
            server,
            user=ldap.bind_dn,
            password=ldap.bind_password().get_secret_value(),
            raise_exceptions=True,
            receive_timeout=receive_timeout,
        )
        conn.open()
        if ldap.start_tls:
            conn.start_tls()
    except (LDAPSocketOpenError, LDAPStartTLSError, ssl.SSLError) as exc:
        reason = _reason(exc)
        fix = " (set MCQ_LDAP__CA_FILE to the CA that signed it)" if "not trusted" in reason else ""
        raise LdapConnectError(f"ldap server {where}: {reason}{fix}") from None
    except LDAPException as exc:
        raise LdapConnectError(f"ldap server {where}: {_reason(exc)}") from None
    try:
        conn.bind()
    except LDAPException as exc:
        raise LdapConnectError(f"ldap server {where}: bind as {ldap.bind_dn} refused: {_reason(exc)}") from None
    return conn
