"""Errors of ``mcq.acl``.

AclError                   the broker refused or could not answer an ACL or user request
├── AclUnsupported         the broker has no authorizer (``SECURITY_DISABLED``): nothing to plan against
└── LoginRefused           the broker refused a client's login (SASL credentials, TLS): retrying cannot help
"""

from __future__ import annotations

from mcq.errors import EXIT_CONFIG, McqError


class AclError(McqError):
    """An ACL or SCRAM request the broker refused or did not answer; the message names it."""


class AclUnsupported(AclError):
    """The cluster runs without an authorizer: ACLs cannot be read or written."""

    exit_code = EXIT_CONFIG


class LoginRefused(AclError):
    """The broker refused this process's login: wrong or unknown SASL credentials, or a TLS
    handshake that failed; the message names the broker, the user and the broker's reason."""

    exit_code = EXIT_CONFIG
