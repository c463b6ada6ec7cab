"""A PostgreSQL target that cannot be reached answers with outcomes the runtime waits on; it never raises."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

from pydantic import SecretStr

from consumers.exceptions import TargetUnavailable
from consumers.postgres import PgTarget
from mcq.change import Change, ChangeKey, Position
from mcq.config import Settings


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def a_change(pid: int) -> Change:
    return Change(
        key=ChangeKey("PHONE", None, pid),
        change_type="UPDATE",
        position=Position(10 + pid, 11 + pid),
        entry_time=datetime.now(UTC),
        source_table="campus.directory_telephone",
        after={"person_id": str(pid)},
        origin="table campus.directory_telephone",
    )


def test_a_target_that_cannot_connect_answers_unavailable_for_every_change_of_the_batch() -> None:
    dsn = SecretStr(f"host=127.0.0.1 port={closed_port()} dbname=x user=x password=x")
    target = PgTarget("table t.s", Settings(), "vendor", dsn, 1000, lambda conn: None)
    outcomes = target.apply_batch([a_change(1), a_change(2)], lambda conn, change: None)
    assert len(outcomes) == 2
    assert all(isinstance(o, TargetUnavailable) and "cannot connect" in str(o) for o in outcomes)
    assert not target.ready()
