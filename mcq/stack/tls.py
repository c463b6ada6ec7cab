"""The local stack's own certificate authority: one CA and one server certificate (for
127.0.0.1 and localhost) that PostgreSQL and OpenLDAP present, so the TLS paths of mcq
(``sslmode=verify-full``, ``ldaps://``, StartTLS) are tested against real servers.
Made once under ``<MCQ_HOME>/tls``; ``ca.crt`` is what a client trusts."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mcq.config import Settings
from mcq.stack.files import write_private

VALID_DAYS = 3650
_CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


@dataclass(frozen=True)
class StackTls:
    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    def ensure(self) -> StackTls:
        """Make the CA and the server certificate unless both are there."""
        if self.ca_cert.exists() and self.server_cert.exists() and self.server_key.exists():
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        ca_key, ca = make_ca("mcq local stack CA")
        key, cert = make_server_cert(ca_key, ca, hosts=["localhost", "127.0.0.1"])
        write_private(self.server_key, _key_pem(key))
        self.server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        return self


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)


def make_ca(name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA (also what the tests use as a CA nobody trusts)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_server_cert(
    ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, hosts: list[str], *, client: bool = False
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A server certificate for HOSTS (names and IP addresses), signed by CA (``client``: a
    client certificate instead, for mutual TLS)."""
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([usage]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def write_pair(
    directory: Path, name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> tuple[Path, Path]:
    """Write NAME.key and NAME.crt into DIRECTORY (tests: certificates of an untrusted CA)."""
    directory.mkdir(parents=True, exist_ok=True)
    key_path, cert_path = directory / f"{name}.key", directory / f"{name}.crt"
    write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


def stack_tls(settings: Settings) -> StackTls:
    """The local stack's TLS material, under its home."""
    return StackTls(settings.stack.home / "tls")
