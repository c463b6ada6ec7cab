"""Capture's keeper (mcq/capture/keeper.py): which failed source tasks it starts again, and when."""

from __future__ import annotations

import logging
from typing import Any

from mcq.capture.keeper import Backoff, CaptureKeeper, failures, lost_connection
from mcq.connect_rest import ConnectError

# the trace of stop 70's red CI: Connect started the task while PostgreSQL was still down
REFUSED_AT_START = (
    "io.debezium.DebeziumException: Couldn't get timestamp utils from underlying connection\n"
    "\tat io.debezium.connector.postgresql.connection.PostgresConnection.getTimestampUtils(PostgresConnection.java)\n"
    "Caused by: org.postgresql.util.PSQLException: Connection to 127.0.0.1:25432 refused. Check that the hostname "
    "and port are correct and that the postmaster is accepting TCP/IP connections.\n"
    "Caused by: java.net.ConnectException: Connection refused\n"
)
SLOT_GONE = (
    "io.debezium.DebeziumException: Failed to start replication stream\n"
    'Caused by: org.postgresql.util.PSQLException: ERROR: replication slot "mcq_campus" does not exist\n'
)


def _status(*task_states: tuple[str, str]) -> dict[str, Any]:
    return {
        "connector": {"state": "RUNNING"},
        "tasks": [{"id": i, "state": st, "trace": tr} for i, (st, tr) in enumerate(task_states)],
    }


class Connect:
    """Kafka Connect's answers, one status per look; records the restarts asked."""

    def __init__(self, statuses: list[dict[str, Any] | Exception | None]) -> None:
        self.statuses = statuses
        self.restarted: list[str] = []

    def status(self, name: str) -> dict[str, Any] | None:
        answer = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def restart(self, name: str, *, only_failed: bool = False) -> None:
        assert only_failed, "a running task must never be restarted"
        self.restarted.append(name)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _keeper(connect: Connect, clock: Clock) -> CaptureKeeper:
    return CaptureKeeper(connect, lambda: ["mcq-source-campus"], clock=clock)  # type: ignore[arg-type]


def test_a_task_refused_its_database_at_start_counts_as_a_lost_connection() -> None:
    assert lost_connection(REFUSED_AT_START)
    assert lost_connection("org.postgresql.util.PSQLException: FATAL: the database system is starting up")
    assert lost_connection("PSQLException: FATAL: terminating connection due to administrator command")


def test_a_streaming_task_whose_database_was_killed_counts_as_a_lost_connection() -> None:
    # the trace of 2026-12-04's CI: PostgreSQL SIGKILLed under a streaming task
    assert lost_connection(
        "org.apache.kafka.connect.errors.ConnectException: An exception occurred in the change event producer. "
        "This connector will be stopped.\n"
        "\tat io.debezium.pipeline.ErrorHandler.setProducerThrowable(ErrorHandler.java:67)\n"
        "Caused by: org.postgresql.util.PSQLException: This replication stream has been closed.\n"
        "\tat org.postgresql.core.v3.replication.V3PGReplicationStream.checkClose(V3PGReplicationStream.java:288)\n"
    )


def test_a_lost_slot_or_a_bad_config_is_not_a_lost_connection() -> None:
    assert not lost_connection(SLOT_GONE)
    assert not lost_connection("org.apache.kafka.connect.errors.ConnectException: Invalid value for slot.name")
    assert not lost_connection("")


def test_the_failed_parts_of_a_status_are_the_connector_and_its_failed_tasks() -> None:
    status = {
        "connector": {"state": "FAILED", "trace": "c"},
        "tasks": [{"state": "RUNNING"}, {"state": "FAILED", "trace": "t"}],
    }
    assert failures(status) == ["c", "t"]
    assert failures(_status(("RUNNING", ""))) == []


def test_a_task_failed_on_a_lost_connection_is_restarted_with_a_growing_wait() -> None:
    connect, clock = Connect([_status(("FAILED", REFUSED_AT_START))]), Clock()
    keeper = _keeper(connect, clock)
    lines = keeper.look()
    assert connect.restarted == ["mcq-source-campus"]
    assert [lvl for lvl, _ in lines] == [logging.WARNING]
    assert "lost connection" in lines[0][1] and "Couldn't get timestamp utils" in lines[0][1]
    keeper.look()  # still failed at once: waits
    assert len(connect.restarted) == 1
    clock.now += 5
    keeper.look()
    clock.now += 5
    keeper.look()  # the second wait is 10 s
    assert len(connect.restarted) == 2
    clock.now += 10
    keeper.look()
    assert len(connect.restarted) == 3


def test_a_connector_that_runs_again_long_enough_starts_over_at_no_wait() -> None:
    connect, clock = Connect([_status(("FAILED", REFUSED_AT_START))]), Clock()
    keeper = _keeper(connect, clock)
    keeper.look()
    connect.statuses = [_status(("RUNNING", ""))]
    clock.now += 400
    keeper.look()
    connect.statuses = [_status(("FAILED", REFUSED_AT_START))]
    keeper.look()
    assert len(connect.restarted) == 2


def test_any_other_failure_is_left_for_an_operator_and_said_once() -> None:
    connect, clock = Connect([_status(("RUNNING", ""), ("FAILED", SLOT_GONE))]), Clock()
    keeper = _keeper(connect, clock)
    first, again = keeper.look(), keeper.look()
    assert connect.restarted == []
    assert len(first) == 1 and "left for an operator" in first[0][1] and "mcq connect restart" in first[0][1]
    assert again == []


def test_connect_away_is_said_once_at_info_and_its_return_too() -> None:
    away = ConnectError("GET http://127.0.0.1:28083/connectors/x/status: connection refused")
    connect, clock = Connect([away, away, _status(("RUNNING", ""))]), Clock()
    keeper = _keeper(connect, clock)
    lines = keeper.look() + keeper.look() + keeper.look()
    assert [lvl for lvl, _ in lines] == [logging.INFO, logging.INFO]
    assert "cannot ask Kafka Connect" in lines[0][1] and "answers again" in lines[1][1]


def test_a_connector_not_applied_yet_is_left_alone() -> None:
    connect, clock = Connect([None]), Clock()
    assert _keeper(connect, clock).look() == []
    assert connect.restarted == []


def test_the_backoff_doubles_up_to_its_most() -> None:
    b = Backoff(first_s=5, most_s=30)
    waits = []
    for _ in range(5):
        b.restarted(0)
        waits.append(b.wait_s)
    assert waits == [5, 10, 20, 30, 30]
