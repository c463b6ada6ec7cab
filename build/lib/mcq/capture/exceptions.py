"""Errors of ``mcq.capture``.

::

    CaptureError          the source database refused what capture needs; the message says
    │                     what and how to fix it (the statement to run, the setting to change)
    └── SlotReadError     the source could not be asked about its replication slots
"""

from __future__ import annotations

from mcq.errors import McqError


class CaptureError(McqError):
    """The source database refused what capture needs; the message says what and how to fix it."""
