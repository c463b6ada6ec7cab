"""How the ``ldap`` adapter knows its own entries: the marker it sets, the LDAP assertion
control (RFC 4528) that makes a write happen only while the marker is there, what the
listener holds (key <-> DN), and DNs as compared."""

from __future__ import annotations

from typing import Any

from ldap3.core.exceptions import LDAPInvalidDnError
from ldap3.operation.search import compile_filter, parse_filter
from ldap3.protocol.controls import build_control
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import safe_dn
from pyasn1.codec.ber import encoder

ASSERTION_OID = "1.3.6.1.1.12"
NO_SUCH_OBJECT, ALREADY_EXISTS, ASSERTION_FAILED = 32, 68, 122


def assertion(attribute: str, value: str) -> Any:
    """An LDAP assertion control: the operation is done only when the entry has ``value``."""
    node = parse_filter(f"({attribute}={escape_filter_chars(value)})", None, True, True, None, False)
    return build_control(ASSERTION_OID, True, encoder.encode(compile_filter(node.elements[0])), False)


class Held:
    """The entries this listener holds: key text <-> DN (lower-cased for lookups)."""

    def __init__(self, found: dict[str, str]) -> None:
        self._dn: dict[str, str] = {}
        self._key: dict[str, str] = {}
        for key, dn in found.items():
            self.hold(key, dn)

    def held_keys(self) -> list[str]:
        return list(self._dn)

    def dn_of(self, key: str) -> str | None:
        return self._dn.get(key)

    def key_at(self, dn: str) -> str | None:
        return self._key.get(normal(dn))

    def hold(self, key: str, dn: str) -> None:
        self.forget(key)
        self._dn[key], self._key[normal(dn)] = dn, key

    def forget(self, key: str) -> None:
        dn = self._dn.pop(key, None)
        if dn is not None:
            self._key.pop(normal(dn), None)


def normal(dn: str) -> str:
    """A DN as compared: its parts as ldap3 writes them, lower-cased."""
    try:
        return str(safe_dn(dn)).lower()
    except LDAPInvalidDnError:
        return dn.lower()


def unescape_rdn(value: str) -> str:
    """An RDN value as written in a DN (RFC 4514: ``\\,`` or ``\\2C``) back to its text."""
    out, i, raw = [], 0, value.encode()
    data = bytearray()
    while i < len(raw):
        if raw[i : i + 1] == b"\\" and i + 1 < len(raw):
            pair = raw[i + 1 : i + 3]
            if len(pair) == 2 and all(chr(c) in "0123456789abcdefABCDEF" for c in pair):
                data.append(int(pair, 16))
                i += 3
                continue
            data += raw[i + 1 : i + 2]
            i += 2
            continue
        data += raw[i : i + 1]
        i += 1
    out.append(data.decode("utf-8", "replace"))
    return "".join(out)
