"""Entries written with a round of operations in flight at once (ldap3's ASYNC strategy:
requests go out without waiting, results are collected by message id), so that Python
encoding the next request and the server working on the last overlap on two cores: a
modify a round trip at a time ran at 700 entries/s against the stack's slapd, pipelined
at 1,340/s (700 µs of that is ldap3's BER encoding in Python either way).

An entry is made with no read before the write, in up to three rounds:

- round 1 tries the write the caller knows is right (``there``: the entries it holds, read
  when it opened, are modified, the others added), or else the write the previous batch
  found right: a modify while the entries written were there (the steady state), an add
  once most were missing (an initial load, a new OU);
- a modify refused with noSuchObject becomes an add in the next round, an add refused with
  entryAlreadyExists (another instance made it) a modify; a delete of an entry already
  gone is done;
- anything else the server refuses is that entry's failure, with the server's reason.

Writes of different entries do not depend on each other, and each entry is written once
per call, so their order within a round does not matter.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal

from ldap3 import MODIFY_REPLACE, Connection
from ldap3.core.exceptions import LDAPResponseTimeoutError, LDAPSessionTerminatedByServerError

from consumers.ldap.connection import close
from consumers.ldap.entry import Entry

NO_SUCH_OBJECT = 32
ALREADY_EXISTS = 68
WINDOW = 256
"""Requests in flight at most: the server's and the socket's buffers stay small."""
ROUNDS = 3
WAIT_SLICE_S = 0.2

Op = Literal["add", "modify", "delete"]


@dataclass
class _Write:
    dn: str
    entry: Entry | None
    op: Op
    controls: list[Any] | None = None
    """Sent with a modify or a delete (an assertion that the entry is ours)."""


class Pipeline:
    """Pipelined writes on one connection opened with ``client_strategy=ASYNC`` and
    ``raise_exceptions=False``; a lost connection raises ldap3's communication errors."""

    def __init__(self, conn: Connection, timeout: float, adding: bool = False, replace_classes: bool = True) -> None:
        self.conn = conn
        self.timeout = timeout
        self.adding = adding
        """The last batch found most entries missing: try adds first."""
        self.replace_classes = replace_classes
        """A modify REPLACEs objectClass too (False: object classes are set when the entry is added)."""

    def close(self) -> None:
        """Close the connection so that ldap3's receiving thread ends (connection.close)."""
        close(self.conn, timeout=self.timeout)

    def make_all(
        self,
        entries: Mapping[str, Entry | None],
        controls: Mapping[str, list[Any]] | None = None,
        new: frozenset[str] | set[str] = frozenset(),
        there: AbstractSet[str] | None = None,
    ) -> dict[str, tuple[int, str]]:
        """Make the directory hold each entry at its dn (None: nothing there), a modify or a
        delete of a dn sent with its ``controls``; a dn in ``new`` is only added (an entry
        already there is refused with ALREADY_EXISTS, never modified). ``there``: the dn's
        believed to hold an entry, modified first, every other one added first (a wrong
        belief costs a second round, never a wrong entry); None: the last batch's guess. The
        dn's the server refused, each with the result code and its reason."""
        failed: dict[str, tuple[int, str]] = {}
        first: Op = "add" if self.adding else "modify"
        guards = controls or {}

        def op(dn: str, entry: Entry | None) -> Op:
            if entry is None:
                return "delete"
            if dn in new:
                return "add"
            if there is not None:
                return "modify" if dn in there else "add"
            return first

        todo = [_Write(dn, entry, op(dn, entry), guards.get(dn)) for dn, entry in entries.items()]
        for round_ in range(ROUNDS):
            if not todo:
                break
            results = self._send(todo)
            again: list[_Write] = []
            done = refused = 0
            for write, (code, reason) in zip(todo, results, strict=True):
                if code == 0 or (write.op == "delete" and code == NO_SUCH_OBJECT):
                    done += write.op != "delete"
                    continue
                other = None if write.dn in new else _other(write.op, code)
                if other is not None:
                    refused += 1
                    if round_ < ROUNDS - 1:
                        again.append(_Write(write.dn, write.entry, other, write.controls))
                        continue
                failed[write.dn] = (code, reason)
            if round_ == 0 and refused and there is None:  # most of what round 1 tried was the wrong write: switch
                self.adding = (first == "modify") == (refused > done)
            todo = again
        return failed

    def _send(self, todo: list[_Write]) -> list[tuple[int, str]]:
        """Every write of ``todo`` sent, at most WINDOW awaiting their result; the results
        (code, reason) in the same order."""
        results: list[tuple[int, str]] = [(0, "")] * len(todo)
        pending: deque[tuple[int, int]] = deque()
        for i, write in enumerate(todo):
            if len(pending) >= WINDOW:
                self._collect(*pending.popleft(), results)
            pending.append((i, self._request(write)))
        while pending:
            self._collect(*pending.popleft(), results)
        return results

    def _request(self, write: _Write) -> int:
        conn, entry = self.conn, write.entry
        if write.op == "delete" or entry is None:
            return int(conn.delete(write.dn, controls=write.controls))
        if write.op == "add":
            return int(conn.add(write.dn, list(entry.object_classes), {k: v for k, v in entry.attributes.items() if v}))
        changes = {k: [(MODIFY_REPLACE, v)] for k, v in entry.attributes.items()}
        if self.replace_classes:
            changes["objectClass"] = [(MODIFY_REPLACE, list(entry.object_classes))]
        return int(conn.modify(write.dn, changes, controls=write.controls))

    def _collect(self, index: int, message_id: int, results: list[tuple[int, str]]) -> None:
        """The result of ``message_id``, waited for in slices: a connection the server
        dropped (its receiving thread has closed it) is said at once, not after the timeout."""
        waited = 0.0
        while True:
            try:
                _, result = self.conn.get_response(message_id, timeout=WAIT_SLICE_S)
                break
            except LDAPResponseTimeoutError:
                waited += WAIT_SLICE_S
                if self.conn.closed:
                    raise LDAPSessionTerminatedByServerError("the server closed the connection") from None
                if waited >= self.timeout:
                    raise
        code = int(result["result"])
        results[index] = (code, "" if code == 0 else f"{result['description']}: {result['message']}".rstrip(": "))


def _other(op: Op, code: int) -> Op | None:
    """The write to try instead, when the server refused ``op`` because the entry is, or is
    not, there."""
    if op == "modify" and code == NO_SUCH_OBJECT:
        return "add"
    if op == "add" and code == ALREADY_EXISTS:
        return "modify"
    return None
