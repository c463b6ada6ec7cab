"""A broker that does not answer is waited out; a request that cannot succeed is not."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from consumers.exceptions import ConsumerError
from consumers.runtime.outage import Stopped, until_kafka_answers
from mcq.config import KAFKA_CLIENT_LOGGER, KafkaSettings
from mcq.testing.logs import log_lines
from mcq.topics.exceptions import TopicReadError
from mcq.topics.read import transient


def _err(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.FENCED_LEADER_EPOCH,  # what a restarted broker answers first
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    ],
)
def test_a_restarting_broker_s_answers_are_transient(code: int) -> None:
    assert transient(_err(code))


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.INVALID_CONFIG])
def test_a_request_that_cannot_succeed_is_not_transient(code: int) -> None:
    assert not transient(_err(code))
    assert not transient(ValueError("bug"))


def test_a_read_error_says_itself_whether_it_is_transient() -> None:
    assert transient(TopicReadError("reading x: broker down", retriable=True))
    assert not transient(TopicReadError("reading x: not at its end"))


def test_a_transient_failure_is_asked_again_and_the_outage_said_once_at_each_end() -> None:
    answers: list[Exception | int] = [_err(KafkaError._TRANSPORT), _err(KafkaError.FENCED_LEADER_EPOCH), 7]
    lines: list[str] = []
    ticks: list[int] = []

    def call() -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with log_lines() as said:
        got = until_kafka_answers(
            "reading offsets", call, stop=threading.Event(), tick=lambda: ticks.append(1), max_backoff_s=0.01
        )
    lines.extend(said)
    assert got == 7
    assert len(lines) == 2 and "not answering while reading offsets" in lines[0] and "answers again" in lines[1]
    assert len(ticks) == 2  # the caller's liveness moved while it waited


def test_the_applied_positions_unreadable_while_the_broker_restarts_are_waited_for() -> None:
    """A broker killed mid-run: the applied positions' offsets had no leader for longer than
    their read's own deadline, and the listener exited 1 (found by the chaos test)."""
    from consumers.runtime.applied import _read_error

    answers: list[Exception | int] = [
        _read_error(TopicReadError("reading offsets of [x]: No leaders found", retriable=True)),
        3,
    ]

    def call() -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert until_kafka_answers("reading", call, stop=threading.Event(), max_backoff_s=0.01) == 3
    fatal = _read_error(TopicReadError("reading offsets of [x]: not authorized"))
    with pytest.raises(ConsumerError, match="applied positions: reading offsets"):
        until_kafka_answers("reading", lambda: (_ for _ in ()).throw(fatal), stop=threading.Event())


def test_a_batch_s_records_queued_while_the_broker_restarts_are_waited_for_then_it_is_an_error() -> None:
    """A broker killed mid-batch: its records stayed queued past one 60 s flush and the
    listener exited 1 (found by the chaos test). Now the flush is asked again until the
    broker takes them, and only a wait as long as FLUSH_WAIT_S ends the listener."""
    import time

    from consumers.runtime.outage import flushed

    class Queue:
        def __init__(self, left: list[int]) -> None:
            self.left = left

        def flush(self, timeout: float) -> int:
            return self.left.pop(0) if len(self.left) > 1 else self.left[0]

    lines: list[str] = []
    restarting = Queue([3, 3, 0])
    with log_lines() as said:
        until_kafka_answers(
            "delivering", lambda: flushed(restarting, time.monotonic() + 60, "listener L"), stop=threading.Event(),
            max_backoff_s=0.01,
        )  # fmt: skip
    lines.extend(said)
    assert restarting.left == [0] and len(lines) == 2 and "not delivered yet" in lines[0]
    with pytest.raises(ConsumerError, match="listener L: 3 record"):
        until_kafka_answers(
            "delivering", lambda: flushed(Queue([3]), time.monotonic() - 1, "listener L"), stop=threading.Event()
        )  # fmt: skip


def test_a_lasting_failure_that_is_not_transient_is_raised_at_once() -> None:
    calls = []

    def call() -> int:
        calls.append(1)
        raise _err(KafkaError.TOPIC_AUTHORIZATION_FAILED)

    with pytest.raises(KafkaException):
        until_kafka_answers("reading offsets", call, stop=threading.Event())
    assert len(calls) == 1


def test_a_stop_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()

    def call() -> int:
        raise _err(KafkaError._ALL_BROKERS_DOWN)

    with pytest.raises(Stopped):
        until_kafka_answers("reading offsets", call, stop=stop)


def test_librdkafka_lines_stay_off_the_terminal_unless_asked_for() -> None:
    import logging

    quiet = KafkaSettings(bootstrap_servers="b:9092").client_config()["logger"]
    assert quiet.name == KAFKA_CLIENT_LOGGER and not quiet.isEnabledFor(logging.CRITICAL)
    loud = KafkaSettings(bootstrap_servers="b:9092", client_log_level="warning").client_config()["logger"]
    assert loud.isEnabledFor(logging.WARNING) and not loud.isEnabledFor(logging.INFO)


SPARK_DATA_LOSS = """[STREAM_FAILED] Query terminated with exception: ...
py4j.protocol.Py4JJavaError: An error occurred while calling o4226.collectToPython.
: org.apache.spark.sql.kafka010.KafkaIllegalStateException: Some data may have been lost because they are not available in Kafka any more;
either the data was aged out by Kafka or the topic may have been deleted before all the data in the
topic was processed.
If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.
Reason: Could not read records in offset [3, 6) for topic partition mcq.raw.x.y.typed-0
with consumer group spark-kafka-source-19b0af65-executor.
"""  # noqa: E501 - Spark's text as a failed query carries it


def test_raw_records_lost_to_retention_are_named_from_spark_s_failure() -> None:
    from streams.checkpoint import lost_raw_reason

    expected = "Could not read records in offset [3, 6) for topic partition mcq.raw.x.y.typed-0"
    assert lost_raw_reason(SPARK_DATA_LOSS) == expected
    assert lost_raw_reason("[STREAM_FAILED] something else entirely") is None


def test_a_checkpoint_has_started_once_a_batch_was_planned_in_its_mode(tmp_path: Path) -> None:
    from streams.checkpoint import started

    assert not started(tmp_path, "microbatch") and not started(tmp_path, "realtime")
    (tmp_path / "realtime" / "mcq.raw.a" / "offsets").mkdir(parents=True)
    (tmp_path / "realtime" / "mcq.raw.a" / "offsets" / "0").write_text("v1")
    assert started(tmp_path, "realtime") and not started(tmp_path, "microbatch")
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / ".0.tmp").write_text("")  # a torn write is not a batch
    assert not started(tmp_path, "microbatch")
    (tmp_path / "offsets" / "4").write_text("v1")
    assert started(tmp_path, "microbatch")
