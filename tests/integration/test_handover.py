"""A second normaliser started beside a running one takes over from it (streams/handover.py)."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mcq.change import POSITION_HEADER
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.registry import parse_registry
from mcq.registry.store import RegistryStore
from mcq.stack import Stack
from mcq.testing.worlds import Captured, captured_world
from mcq.topics.read import read_to_end
from streams.plan import plan_normalize
from tests.support.waiting import until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def world(stack: Stack, settings: Settings) -> Iterator[Captured]:
    with captured_world(settings, people=60) as cap:
        yield cap


def _records(settings: Settings, topic: str) -> list[tuple[dict[str, Any], dict[str, Any] | None, bytes]]:
    """(key, value, position header) of every record of ``topic``, partition by partition in offset order."""
    des = AvroDeserializer(registry_client(settings))
    out: list[tuple[dict[str, Any], dict[str, Any] | None, bytes]] = []
    for msg in read_to_end(settings, topic, 120):
        key = des(msg.key(), SerializationContext(topic, MessageField.KEY))
        value = None if msg.value() is None else des(msg.value(), SerializationContext(topic, MessageField.VALUE))
        position = dict(msg.headers() or [])[POSITION_HEADER]
        assert isinstance(position, bytes), position
        out.append((key, value, position))
    return out


class _Load:
    """Telephone numbers changed 20 times a second by one writer (its order per key is the
    commit order), each to a value never used before: ``written``, per key, in order."""

    def __init__(self, world: Captured, settings: Settings) -> None:
        self.dsn, self.schema = settings.source.dsn(), world.schema
        with psycopg.connect(self.dsn) as conn:
            self.keys = conn.execute(
                f"SELECT person_id, tele_type FROM {self.schema}.directory_telephone ORDER BY 1, 2"
            ).fetchall()
        self.written: dict[tuple[int, str], list[str]] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.tag = f"H{uuid.uuid4().hex[:4]}-"  # the raw topics are the module's world's: another test's values too

    def _run(self) -> None:
        numbers = itertools.count(1)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopped.is_set():
                person, kind = random.choice(self.keys)
                number = f"{self.tag}{next(numbers):08d}"
                conn.execute(
                    f"UPDATE {self.schema}.directory_telephone SET phone_number = %s "
                    "WHERE person_id = %s AND tele_type = %s",
                    (number, person, kind),
                )
                self.written.setdefault((person, kind), []).append(number)
                time.sleep(0.05)

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(10)


def _arrived(
    settings: Settings, registry_yaml: str, prefix: str, tag: str
) -> dict[tuple[int, str], list[tuple[str, bytes]]]:
    """Per telephone key, the load's values (``tag``...) in the logical topic, each with its position, in order."""
    registry = parse_registry(registry_yaml, "campus.yaml")
    phones = next(f for f in plan_normalize(registry, prefix).feeds if f.ref == "PERSON/Telephone")
    seen: dict[tuple[int, str], list[tuple[str, bytes]]] = {}
    for key, value, position in _records(settings, phones.topic):
        if (key["tname"], key["subtype"]) != (phones.tname, phones.subtype):
            continue
        assert value is not None and value["after"] is not None
        if str(value["after"]["phone_number"]).startswith(tag):
            where = (int(value["after"]["person_id"]), value["after"]["tele_type"])
            seen.setdefault(where, []).append((value["after"]["phone_number"], position))
    return seen


def _wrong(written: dict[tuple[int, str], list[str]], seen: dict[tuple[int, str], list[tuple[str, bytes]]]) -> Any:
    """Per key, what differs between the values the source was given and those that
    arrived (missing, twice, unknown, out of order), and any source position twice."""
    values = {key: [v for v, _ in got] for key, got in seen.items()}
    wrong: dict[Any, Any] = {
        key: {
            "missing": [n for n in numbers if n not in values.get(key, [])],
            "twice": sorted({n for n in values.get(key, []) if values[key].count(n) > 1}),
            "unknown": [n for n in values.get(key, []) if n not in numbers],
        }
        for key, numbers in written.items()
        if values.get(key) != numbers
    }
    for key, got in seen.items():
        positions = [p for _, p in got]
        if len(positions) != len(set(positions)):
            wrong[(key, "positions")] = got
    return wrong


def _every_value_once(
    load: _Load, settings: Settings, world: Captured, job: subprocess.Popen[bytes], log: Path
) -> None:
    """After 10 s more of the load under ``job``, the one running: per key, the logical
    topic holds every value the source was given, once, in commit order."""
    time.sleep(10)  # it normalises the load for a while
    load.stop()

    def arrived() -> None:
        assert job.poll() is None, log.read_text()[-3000:]
        wrong = _wrong(load.written, _arrived(settings, world.registry_yaml, settings.topic_prefix, load.tag))
        assert not wrong, wrong  # no gap, no duplicate, in commit order

    until(time.monotonic() + 180, arrived)
    assert sum(len(v) for v in load.written.values()) > 200


def _stop(load: _Load, jobs: list[subprocess.Popen[bytes]]) -> None:
    load.stop()
    for job in jobs:
        if job.poll() is None:
            job.send_signal(signal.SIGTERM)
            job.wait(60)


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _logged(log: Path, text: str) -> Callable[[], None]:
    def check() -> None:
        assert text in log.read_text(), log.read_text()[-3000:]

    return check


def _normaliser(tmp_path: Path, settings: Settings, world: Captured) -> tuple[Settings, list[str], dict[str, str]]:
    """A topic prefix of its own with the campus registry stored, and the command and
    environment of a real-time ``mcq streams normalize`` of one checkpoint."""
    prefix = f"th{uuid.uuid4().hex[:8]}"
    wsettings = settings.model_copy(update={"topic_prefix": prefix})
    RegistryStore(wsettings).apply(parse_registry(world.registry_yaml, "campus.yaml"))
    command = [sys.executable, "-m", "mcq.cli", "streams", "normalize", "--http-port", "0",
               "--checkpoint", str(tmp_path / "checkpoint"), "--checkpoint-interval", "10 seconds"]  # fmt: skip
    return wsettings, command, {**os.environ, "MCQ_TOPIC_PREFIX": prefix}


@pytest.mark.long  # two normalisers, one after the other, under load: minutes, in make long
@pytest.mark.extended(minutes=9)  # about 6 minutes on two cores: CI runs it when its time budget allows
@pytest.mark.timeout(1500)  # its own deadlines add up to 1,200 s
def test_a_normaliser_started_beside_a_running_one_takes_over_with_no_gap_and_no_duplicate(
    world: Captured, settings: Settings, tmp_path: Path
) -> None:
    """Telephone numbers change 20 times a second, each to a value never used before, while
    a second `mcq streams normalize` of the same checkpoint starts and takes over. Per
    key, the logical topic holds every value the source was given, once, in commit order,
    and no source position twice; the first normaliser ends with exit 0."""
    wsettings, command, env = _normaliser(tmp_path, settings, world)
    load = _Load(world, wsettings)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    jobs: list[subprocess.Popen[bytes]] = []
    try:
        jobs.append(_start(command, env, logs[0]))
        until(time.monotonic() + 300, _logged(logs[0], "batch 0 of "))  # real time, its first batch ended
        load.thread.start()
        time.sleep(5)
        jobs.append(_start(command, env, logs[1]))
        until(time.monotonic() + 300, _logged(logs[1], "normalize: took over from "))
        assert jobs[0].wait(120) == 0, logs[0].read_text()[-3000:]
        assert "normalize: handed over to " in logs[0].read_text()
        assert "what it wrote after its last checkpoint is not written again" in logs[1].read_text()
        _every_value_once(load, wsettings, world, jobs[1], logs[1])
    finally:
        _stop(load, jobs)


@pytest.mark.long  # two normalisers beside each other, under load, one killed: minutes, in make long
@pytest.mark.extended(minutes=9)
@pytest.mark.timeout(1500)  # its own deadlines add up to 1,200 s
def test_a_standby_takes_over_from_a_killed_normaliser_with_no_gap_and_no_duplicate(
    world: Captured, settings: Settings, tmp_path: Path
) -> None:
    """A standby (`--standby`) waits beside a running normaliser while telephone numbers
    change 20 times a second, and starts its held queries again on a fresh copy of the
    checkpoint; the running one is killed (SIGKILL), its producer's last records lost with
    it. The standby takes over: per key, the logical topic holds every value the source
    was given, once, in commit order, and no source position twice."""
    wsettings, command, env = _normaliser(tmp_path, settings, world)
    load = _Load(world, wsettings)
    logs = [tmp_path / "running.log", tmp_path / "standby.log"]
    jobs: list[subprocess.Popen[bytes]] = []
    try:
        jobs.append(_start(command, env, logs[0]))
        until(time.monotonic() + 300, _logged(logs[0], "batch 0 of "))
        load.thread.start()
        jobs.append(_start([*command, "--standby", "--standby-refresh", "15 seconds"], env, logs[1]))
        until(time.monotonic() + 300, _logged(logs[1], "normalize: standing by for "))

        def held_again() -> None:  # its held queries started again on a fresh copy of the checkpoint
            assert logs[1].read_text().count("held at the gate") >= 2, logs[1].read_text()[-3000:]

        until(time.monotonic() + 180, held_again)
        time.sleep(3)
        os.killpg(jobs[0].pid, signal.SIGKILL)
        jobs[0].wait(30)
        until(time.monotonic() + 120, _logged(logs[1], "is gone: took over"))
        _every_value_once(load, wsettings, world, jobs[1], logs[1])
    finally:
        _stop(load, jobs)
