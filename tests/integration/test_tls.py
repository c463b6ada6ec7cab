"""TLS to every target, against the stack's real servers (which present a certificate of
the stack's own CA, <MCQ_HOME>/tls/ca.crt): verified when configured, refused with one
line naming the server and the reason when the certificate is not trusted."""

from __future__ import annotations

import dataclasses
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from ldap3.core.exceptions import LDAPException

from consumers.adapter import make_adapter
from consumers.exceptions import TargetUnavailable
from consumers.ldap.adapter import LdapAdapter
from consumers.ldap.connection import LdapConnectError, close, connect
from mcq.config import Settings
from mcq.stack import Stack
from mcq.stack.tls import make_ca, make_server_cert, stack_tls, write_pair
from mcq.testing.listeners import World, make_world, running, wait_for
from tests.support.changes import ch, send_changes
from tests.support.ldap_world import ADA, entry, world  # noqa: F401 - the LDAP world fixture


@pytest.fixture(scope="module")
def foreign_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA nobody configured: what a client given the wrong bundle trusts."""
    _, ca = make_ca("somebody else's CA")
    path = tmp_path_factory.mktemp("foreign") / "ca.crt"
    path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return path


def _with(settings: Settings, section: str, **changes: object) -> Settings:
    return settings.model_copy(update={section: getattr(settings, section).model_copy(update=changes)})


def test_postgres_verify_full_trusts_the_configured_ca_and_refuses_another(
    stack: Stack, settings: Settings, foreign_ca: Path
) -> None:
    ca = stack_tls(settings).ca_cert
    verified = _with(settings, "source", sslmode="verify-full", sslrootcert=ca).source
    with psycopg.connect(verified.dsn(), connect_timeout=5) as conn:
        row = conn.execute("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
    assert row is not None and row[0] is True and str(row[1]).startswith("TLS"), row
    assert verified.jdbc_url().endswith(f"?sslmode=verify-full&sslrootcert={str(ca).replace('/', '%2F')}")
    wrong = _with(settings, "source", sslmode="verify-full", sslrootcert=foreign_ca).source
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(wrong.dsn(), connect_timeout=5).close()


def test_a_table_target_over_verified_tls_applies_and_an_untrusted_one_waits_with_the_reason(
    stack: Stack, settings: Settings, foreign_ca: Path, token: str, tmp_path: Path
) -> None:
    ca = stack_tls(settings).ca_cert
    for sslrootcert, trusted in ((ca, True), (foreign_ca, False)):
        vendor = _with(settings, "vendor", sslmode="verify-full", sslrootcert=sslrootcert)
        w = make_world(vendor, token, tmp_path)
        adapter = make_adapter(w.registry.listener(w.name), w.settings)  # type: ignore[arg-type]
        try:
            if trusted:
                adapter.open()
                assert adapter.ready()
            else:
                with pytest.raises(TargetUnavailable, match="certificate verify failed"):
                    adapter.open()
        finally:
            adapter.close()


def test_ldaps_and_starttls_verify_the_certificate_and_name_the_server_when_it_is_not_trusted(
    stack: Stack, settings: Settings, foreign_ca: Path
) -> None:
    ca = stack_tls(settings).ca_cert
    ldaps = f"ldaps://127.0.0.1:{settings.stack.ports.ldaps}"
    trusted = [
        _with(settings, "ldap", url=ldaps, ca_file=ca).ldap,
        _with(settings, "ldap", start_tls=True, ca_file=ca).ldap,
    ]
    for ldap in trusted:
        conn = connect(ldap)
        assert conn.search(ldap.people_dn, "(objectClass=organizationalUnit)", "BASE")
        assert conn.server.ssl or conn.tls_started
        conn.unbind()
        pipelined = connect(ldap, pipelined=True)  # the adapter's writes: ldap3's ASYNC strategy
        _, result = pipelined.get_response(pipelined.search(ldap.people_dn, "(objectClass=organizationalUnit)", "BASE"))
        assert result["result"] == 0 and (pipelined.server.ssl or pipelined.tls_started), result
        close(pipelined)
    untrusted = [
        _with(settings, "ldap", url=ldaps, ca_file=foreign_ca).ldap,
        _with(settings, "ldap", url=ldaps, ca_file=None).ldap,  # the system's CAs do not know the stack's
        _with(settings, "ldap", start_tls=True, ca_file=foreign_ca).ldap,
    ]
    for ldap in untrusted:
        for pipelined in (False, True):
            with pytest.raises(LdapConnectError) as caught:
                connect(ldap, pipelined=pipelined)
            [line] = str(caught.value).splitlines()
            host = ldap.url.split("//", 1)[1]
            assert line.startswith(f"ldap server {host}: its TLS certificate is not trusted"), (pipelined, line)
            assert "MCQ_LDAP__CA_FILE" in line, line


def test_pipelined_tls_connections_answer_every_request_while_their_thread_reads(
    stack: Stack, settings: Settings
) -> None:
    """The adapter's writes: one thread writes while ldap3's receiving thread reads the same
    TLS stream; connection after connection, every request gets its answer and no thread
    of a closed connection runs on."""
    ca = stack_tls(settings).ca_cert
    ldaps = f"ldaps://127.0.0.1:{settings.stack.ports.ldaps}"
    lost: list[str] = []
    for ldap in (
        _with(settings, "ldap", url=ldaps, ca_file=ca).ldap,
        _with(settings, "ldap", start_tls=True, ca_file=ca).ldap,
    ):
        for attempt in range(100):
            try:
                conn = connect(ldap, pipelined=True)
                sent = [conn.search(ldap.people_dn, "(objectClass=organizationalUnit)", "BASE") for _ in range(30)]
                answers = [conn.get_response(message, timeout=15)[1]["result"] for message in sent]
                close(conn)
            except (LdapConnectError, LDAPException) as exc:
                lost.append(f"{ldap.url} connection {attempt}: {exc}")
                continue
            if answers != [0] * len(sent):
                lost.append(f"{ldap.url} connection {attempt}: answers {answers}")
    assert not lost, lost
    running_on = [t for t in threading.enumerate() if type(t).__name__ == "ReceiverSocketThread"]
    assert not running_on, running_on


def test_the_ldap_listener_writes_over_ldaps(world: World, settings: Settings) -> None:
    secure = _with(
        world.settings, "ldap", url=f"ldaps://127.0.0.1:{settings.stack.ports.ldaps}",
        ca_file=stack_tls(settings).ca_cert,
    )  # fmt: skip
    world = dataclasses.replace(world, settings=secure)
    adapter = make_adapter(world.registry.listener("LDAP"), secure)  # type: ignore[arg-type]
    assert isinstance(adapter, LdapAdapter)
    adapter.close()
    send_changes(world, ch("PERSON/PEOPLE", "INSERT", ADA, person_id=1))
    dn = f"employeeNumber=1,ou=people,{world.table}"
    with running(world):
        wait_for("Ada over ldaps", lambda: (entry(settings, dn) or {}).get("sn") == ["Lovelace"], 60)


@pytest.fixture
def https_hook(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, list[bytes], Path, Path]]:
    """An HTTPS endpoint with the stack's server certificate that asks for a client certificate
    of the stack's CA; yields its URL, the bodies it accepted, and a client certificate/key."""
    tls = stack_tls(settings)
    accepted: list[bytes] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            accepted.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.server_cert, tls.server_key)
    context.load_verify_locations(tls.ca_cert)
    context.verify_mode = ssl.CERT_REQUIRED  # mutual TLS
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # a client certificate signed by the stack's CA: the CA's key is not kept, so a client CA
    # of the test's own is added to what the server trusts
    client_ca_key, client_ca = make_ca("test clients")
    client_ca_path = tmp_path / "client-ca.crt"
    client_ca_path.write_bytes(client_ca.public_bytes(serialization.Encoding.PEM))
    context.load_verify_locations(client_ca_path)
    key, cert = make_server_cert(client_ca_key, client_ca, hosts=["listener.test"], client=True)
    key_path, cert_path = write_pair(tmp_path, "client", key, cert)
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/hook", accepted, cert_path, key_path
    finally:
        server.shutdown()


def test_a_webhook_over_mutual_tls_posts_and_one_without_the_ca_is_unavailable(
    stack: Stack, settings: Settings, https_hook: tuple[str, list[bytes], Path, Path], token: str, tmp_path: Path
) -> None:
    url, accepted, cert, key = https_hook
    ca = stack_tls(settings).ca_cert
    change = ch("PERSON/Telephone", "INSERT", {"person_id": "1", "phone_number": "+1"}, person_id=1)
    trusting = (
        f"{{type: webhook, settings: {{url: '{url}', ca_file: '{ca}', client_cert: '{cert}', client_key: '{key}'}}}}"
    )
    for adapter_yaml, trusted in ((trusting, True), (f"{{type: webhook, settings: {{url: '{url}'}}}}", False)):
        w = make_world(settings, token, tmp_path, adapter=adapter_yaml)
        adapter = make_adapter(w.registry.listener(w.name), w.settings)  # type: ignore[arg-type]
        try:
            if trusted:
                adapter.apply(change)
                assert accepted and b'"person_id"' in accepted[-1]
            else:
                with pytest.raises(TargetUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
                    adapter.apply(change)
        finally:
            adapter.close()


def test_debezium_captures_over_verified_tls_when_the_source_asks_for_it(stack: Stack, settings: Settings) -> None:
    """MCQ_SOURCE__SSLMODE/SSLROOTCERT reach the connector (database.sslmode, database.sslrootcert):
    its replication connection is TLS, verified against the stack's CA."""
    from tests.integration.typed import typed_world

    verified = _with(settings, "source", sslmode="verify-full", sslrootcert=stack_tls(settings).ca_cert)
    with typed_world(verified) as typed, psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
        slot = typed.registry.sources[0].slot_name
        row = conn.execute(
            "SELECT s.ssl FROM pg_replication_slots r JOIN pg_stat_ssl s ON s.pid = r.active_pid WHERE slot_name = %s",
            (slot,),
        ).fetchone()
        assert row == (True,), f"the connector's replication connection for slot {slot} is not TLS: {row}"
