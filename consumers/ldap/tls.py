"""TLS for ldap3 connections that one thread reads while another writes.

ldap3's ASYNC strategy (the adapter's pipelined writes) reads in a receiving thread while
the caller writes. On an ``ssl.SSLSocket`` both run OpenSSL on one SSL object at once,
which OpenSSL does not allow, and OpenSSL reads through the socket's descriptor *number*
(a receiving thread still reading after its socket closed reads another connection's
bytes). Against the stack's slapd with both cores busy, 3 of 150 pipelined ldaps
connections lost a request or their socket ("no response from server", "socket is not
open"); none of 300 with this (tests/integration/test_tls.py).

Here TLS runs on memory buffers (``ssl.SSLObject``): only this object touches the socket,
the SSL object is used under a lock, bytes go out in the order it made them, and a closed
socket reads as the end of the stream (so ldap3's receiving thread ends)."""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Any

from ldap3 import Tls

READ = 64 * 1024


class LockedTlsSocket:
    """A client TLS socket safe for one reading and several writing threads."""

    def __init__(self, raw: socket.socket, context: ssl.SSLContext, server_hostname: str) -> None:
        self._raw = raw
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname)
        self._tls_lock = threading.Lock()  # the SSL object and its buffers
        self._send_lock = threading.Lock()  # the socket's sending side: bytes in the order they were made
        self._closed = False

    # ------------------------------------------------------------------ TLS

    def do_handshake(self) -> None:
        while True:
            try:
                with self._tls_lock:
                    self._tls.do_handshake()
                self._flush(wait=True)
                return
            except ssl.SSLWantReadError:
                self._flush(wait=True)
            except ssl.SSLError:
                self._flush(wait=True)  # the alert that tells the server why
                raise
            if not self._fill():
                raise ssl.SSLEOFError(ssl.SSL_ERROR_EOF, "the server closed the connection during the TLS handshake")

    def getpeercert(self, binary_form: bool = False) -> Any:
        return self._tls.getpeercert(binary_form)

    def version(self) -> str | None:
        return self._tls.version()

    # ------------------------------------------------------------------ socket

    def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes of the server's data; ``b""`` at the end of the stream or
        once closed. (A timeout of the socket is raised as the socket raises it.)"""
        while not self._closed:
            try:
                with self._tls_lock:
                    data = self._tls.read(size)
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            else:
                self._flush(wait=False)  # what reading made (a reply to the server's key update)
                return data
            self._flush(wait=False)
            if not self._fill():
                with self._tls_lock:
                    self._incoming.write_eof()
        return b""

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            with self._tls_lock:
                self._tls.write(data)
                out = self._outgoing.read()
            if out:
                self._raw.sendall(out)

    def send(self, data: bytes) -> int:
        self.sendall(data)
        return len(data)

    def shutdown(self, how: int) -> None:
        self._raw.shutdown(how)

    def close(self) -> None:
        self._closed = True
        self._raw.close()

    def __getattr__(self, name: str) -> Any:  # settimeout, setsockopt, getpeername, fileno
        return getattr(self._raw, name)

    # ------------------------------------------------------------------ inside

    def _fill(self) -> bool:
        """Feed what the socket has (outside the SSL lock: the writers go on); False at its end."""
        if self._closed:
            return False
        data = self._raw.recv(READ)
        if not data:
            return False
        with self._tls_lock:
            self._incoming.write(data)
        return True

    def _flush(self, *, wait: bool) -> None:
        """Send what the SSL object made. A reader does not wait for a writer busy sending:
        the writer's next send takes these bytes along, in order."""
        if not self._send_lock.acquire(blocking=wait):
            return
        try:
            with self._tls_lock:
                out = self._outgoing.read()
            if out:
                self._raw.sendall(out)
        finally:
            self._send_lock.release()


class LockedTls(Tls):  # type: ignore[misc]  # ldap3 ships no types
    """ldap3's TLS settings whose sockets are ``LockedTlsSocket``: the server's certificate
    verified against ``context`` and its name checked against the server's host."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__(validate=ssl.CERT_REQUIRED)
        self.context = context

    def wrap_socket(self, connection: Any, do_handshake: bool = False) -> None:
        wrapped = LockedTlsSocket(connection.socket, self.context, connection.server.host)
        if do_handshake:
            wrapped.do_handshake()
        connection.socket = wrapped
