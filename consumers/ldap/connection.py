"""A bound connection to the LDAP directory, over ``ldaps://`` or StartTLS when configured,
with the server's certificate and host name always verified (``ldap.ca_file`` or the
system's CAs). Every failure is one line naming the server and the reason; a certificate
that is not trusted also says which setting fixes it."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from urllib.parse import urlsplit

from ldap3 import ASYNC, NONE, SYNC, Connection, Server
from ldap3.core.exceptions import LDAPException, LDAPSocketOpenError, LDAPStartTLSError

from consumers.exceptions import ConsumerError
from consumers.ldap.tls import LockedTls
from mcq.targets import LdapSettings


class LdapConnectError(ConsumerError):
    """The directory cannot be reached, its certificate is not trusted, or the bind was refused."""


def _tls(ldap: LdapSettings) -> LockedTls | None:
    if not (ldap.start_tls or ldap.url.lower().startswith("ldaps://")):
        return None
    # verifies the certificate and checks the host name against it
    return LockedTls(ssl.create_default_context(cafile=str(ldap.ca_file) if ldap.ca_file else None))


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("certificate verify failed:", "CERTIFICATE_VERIFY_FAILED]"):
        if marker in text:
            detail = text.split(marker, 1)[1].split("(_ssl.c")[0].strip(" ]:,'\")")
            return f"its TLS certificate is not trusted ({detail or 'verify failed'})"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def connect(
    ldap: LdapSettings, *, connect_timeout: float = 5, receive_timeout: float = 15, pipelined: bool = False
) -> Connection:
    """Open, secure (StartTLS when asked) and bind a connection to ``ldap.url``;
    ``pipelined``: ldap3's ASYNC strategy, whose operations return a message id and whose
    results are not raised (consumers/ldap/pipeline.py)."""
    where = urlsplit(ldap.url).netloc or ldap.url
    if pipelined and ldap.start_tls:
        # ldap3's ASYNC strategy upgrades to TLS in its receiving thread, where a certificate
        # that is not trusted is an exception no caller sees (the caller waits for a timeout):
        # a round-trip connection first says it in one line, or shows it is trusted
        connect(ldap, connect_timeout=connect_timeout, receive_timeout=receive_timeout).unbind()
    try:
        server = Server(ldap.url, connect_timeout=connect_timeout, get_info=NONE, tls=_tls(ldap))
        conn = Connection(
            server,
            user=ldap.bind_dn,
            password=ldap.bind_password().get_secret_value(),
            raise_exceptions=not pipelined,
            receive_timeout=receive_timeout,
            client_strategy=ASYNC if pipelined else SYNC,
        )
    except LDAPException as exc:
        raise LdapConnectError(f"ldap server {where}: {_reason(exc)}") from None
    try:
        conn.open()
        if ldap.start_tls:
            conn.start_tls()
    except (LDAPSocketOpenError, LDAPStartTLSError, ssl.SSLError) as exc:
        close(conn)
        reason = _reason(exc)
        fix = " (set MCQ_LDAP__CA_FILE to the CA that signed it)" if "not trusted" in reason else ""
        raise LdapConnectError(f"ldap server {where}: {reason}{fix}") from None
    except LDAPException as exc:
        close(conn)
        raise LdapConnectError(f"ldap server {where}: {_reason(exc)}") from None
    try:
        bound = conn.bind()
    except LDAPException as exc:
        close(conn)
        raise LdapConnectError(f"ldap server {where}: bind as {ldap.bind_dn} refused: {_reason(exc)}") from None
    if not bound:  # refused without raising (a pipelined connection)
        result = conn.result or {}
        reason = f"{result.get('description', 'refused')}: {result.get('message', '')}".rstrip(": ")
        close(conn)
        raise LdapConnectError(f"ldap server {where}: bind as {ldap.bind_dn} refused: {reason}")
    return conn


def close(conn: Connection, timeout: float = 15) -> None:
    """Close a connection so that nothing of it runs on. A pipelined one's receiving thread
    must see the end of the stream first: ldap3's ``unbind`` drops the socket under it, and
    its loop then fails with every read and spins at full CPU for the rest of the process.
    A shut-down socket reads as the end: the thread leaves its loop and closes the
    connection itself."""
    receiver = getattr(conn.strategy, "receiver", None)
    if isinstance(receiver, threading.Thread) and receiver is not threading.current_thread():
        with contextlib.suppress(OSError, AttributeError):  # already closed by the server's side
            conn.socket.shutdown(socket.SHUT_RDWR)
        receiver.join(timeout=timeout)
    if not conn.closed:
        with contextlib.suppress(LDAPException, OSError):
            conn.unbind() if receiver is None else conn.strategy.close()
