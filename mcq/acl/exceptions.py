"""Errors of ``mcq.acl``.

AclError                   the broker refused or could not answer an ACL or user request
└── AclUnsupported         the broker has no authorizer (``SECURITY_DISABLED``): nothing to plan against
"""

from __future__ import annotations


class AclError(Exception):
    """An ACL or SCRAM request the broker refused or did not answer; the message names it."""

    retriable = False


class AclUnsupported(AclError):
    """The cluster runs without an authorizer: ACLs cannot be read or written."""
