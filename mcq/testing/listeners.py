"""Helpers for listener tests: a small registry, change records produced straight into
logical topics (the normaliser is tested on its own), the ``table`` target read back, and
listeners run in-process (a thread) or as ``mcq listen`` processes (to SIGKILL them)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner, Result
from confluent_kafka import Producer

from consumers.runtime.listener import ListenerRuntime
from mcq.change import POSITION_HEADER, Change, ChangeCodec, ChangeKey, Position
from mcq.config import Settings
from mcq.contract import register_topic, registry_client
from mcq.registry import Registry, parse_registry
from mcq.testing.logs import log_lines
from mcq.topics.listener import ListenerTopics
from mcq.topics.plan import apply_topics, plan_topics

REGISTRY = """
sources:
  - {{name: campus, schemas: [campus]}}
tables:
  - tname: PHONE
    comment: test table (the records are produced by the test, not captured)
    partitions: 3
    feeds:
      - source: campus
        table: campus.directory_telephone
        keys: {{person_id: person_id, aux_string: tele_type}}
        columns: [person_id, tele_type, phone]
  - tname: ROOM
    comment: a second table, for interests added later
    partitions: 1
listeners:
  - name: {name}
    owner: tests@example
    adapter: {adapter}
    delivery:
      retries_in_place: 1
      backoff_initial_s: 0.05
      backoff_max_s: 0.2
      park_initial_s: {park}
      max_attempts: 3
      heartbeat_interval_s: 1
      heartbeat_timeout_s: 5
      stuck_after_s: 600
{delivery}
interests:
  - {{listener: {name}, tname: PHONE}}
{extra}
"""


@dataclass
class World:
    """One test's listener, its topics and its target table."""

    settings: Settings
    name: str
    table: str
    registry: Registry
    registry_file: Path
    topics: ListenerTopics

    def _topic(self, tname: str) -> str:
        table = self.registry.table(tname, None)
        assert table is not None
        return table.topic(self.settings.topic_prefix)

    @property
    def phone_topic(self) -> str:
        return self._topic("PHONE")

    @property
    def room_topic(self) -> str:
        return self._topic("ROOM")


def make_world(
    settings: Settings,
    token: str,
    tmp: Path,
    *,
    park: float = 1.0,
    dsn: str | None = None,
    extra: str = "",
    statement_timeout_ms: int = 3000,
    delivery: str = "",
    adapter: str | None = None,
) -> World:
    """A registry with one ``table`` listener ``T`` of PHONE; ``delivery`` adds lines to its
    delivery policy (``"      max_poll_interval_s: 12"``), ``extra`` to the registry;
    ``adapter`` replaces the ``table`` adapter (``"{type: file, settings: {...}}"``)."""
    prefix = f"tl{token}"
    s = settings.model_copy(update={"topic_prefix": prefix})
    name = "T"
    table = f"lt_{token}.state"
    if adapter is None:
        dsn_line = f", dsn: '{dsn}'" if dsn else ""
        timeout = f"statement_timeout_ms: {statement_timeout_ms}"
        adapter = f"{{type: table, settings: {{table: {table}, {timeout} {dsn_line}}}}}"
    text = REGISTRY.format(name=name, park=park, extra=extra, delivery=delivery, adapter=adapter)
    return registry_world(s, text, tmp / "registry.yaml", name, table)


def registry_world(settings: Settings, text: str, path: Path, listener: str, table: str) -> World:
    """A world for LISTENER of the registry TEXT (written to PATH): its logical topics made
    and their schemas registered under ``settings.topic_prefix``."""
    path.write_text(text)
    registry = parse_registry(text, str(path))
    prefix = settings.topic_prefix
    apply_topics(settings, plan_topics(registry, prefix))
    client = registry_client(settings)
    for t in registry.tables:
        register_topic(client, t.topic(prefix))
    return World(settings, listener, table, registry, path, ListenerTopics(prefix, listener))


_lsn = [1_000_000]


def change(tname: str, pid: int, phone: str | None, kind: str = "UPDATE", tele: str = "office") -> Change:
    """A change with a source position newer than every one made before."""
    _lsn[0] += 10
    return Change(
        key=ChangeKey(tname, None, pid, None, None, tele),
        change_type=kind,  # type: ignore[arg-type]
        position=Position(_lsn[0], _lsn[0] + 1),
        entry_time=datetime.now(UTC),
        source_table="campus.directory_telephone",
        after=None if kind == "DELETE" else {"person_id": str(pid), "tele_type": tele, "phone": phone},
        before=None,
        origin="table campus.directory_telephone",
    )


def produce(settings: Settings, topic: str, changes: list[Change], tombstones: bool = True) -> None:
    """Write changes as the normaliser does (a delete is followed by a tombstone)."""
    codec = ChangeCodec(registry_client(settings))
    producer = Producer({**settings.kafka.client_config(), "linger.ms": 20, "enable.idempotence": True})
    for i, c in enumerate(changes):
        key, value = codec.encode(topic, c)
        headers: list[tuple[str, str | bytes | None]] = [(POSITION_HEADER, str(c.position).encode())]
        producer.produce(topic, key=key, value=value, headers=headers)
        if c.change_type == "DELETE" and tombstones:
            producer.produce(topic, key=key, value=None, headers=headers)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def expected_state(changes: list[Change]) -> dict[str, dict[str, Any]]:
    state: dict[str, dict[str, Any]] = {}
    for c in changes:
        if c.change_type == "DELETE":
            state.pop(c.key.text(), None)
        else:
            assert c.after is not None
            state[c.key.text()] = dict(c.after)
    return state


def target_state(settings: Settings, table: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(settings.vendor.dsn()) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
        if not exists or exists[0] is None:
            return {}
        return {k: v for k, v in conn.execute(f"SELECT change_key, state FROM {table}").fetchall()}


def wait_for(what: str, check: Callable[[], bool], timeout: float = 120.0, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def caught_up(world: World) -> ListenerRuntime:
    """One ``--until-caught-up`` run of the world's listener in this process (a scheduled run)."""
    runtime = ListenerRuntime(world.settings, world.name, registry=world.registry, http_port=None)
    assert runtime.run(until_caught_up=True) == 0
    return runtime


@contextmanager
def running(world: World, **kwargs: Any) -> Iterator[ListenerRuntime]:
    """A listener running in a thread of this process, stopped (and joined) at the end."""
    runtime = ListenerRuntime(world.settings, world.name, registry=kwargs.pop("registry", world.registry), **kwargs)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            runtime.run()
        except BaseException as exc:  # surfaced in the test
            errors.append(exc)

    thread = threading.Thread(target=target, name=f"listener-{world.name}", daemon=True)
    with log_lines() as lines:  # what it logged, for the test to read (runtime.lines)
        runtime.lines = lines  # type: ignore[attr-defined]
        thread.start()
        try:
            yield runtime
        finally:
            runtime.stop()
            thread.join(60)
            assert not thread.is_alive(), "the listener did not stop within 60 s"
            if errors:
                raise errors[0]


def listen_process(world: World, *args: str, log: Path) -> subprocess.Popen[bytes]:
    """``mcq listen`` as its own process (so it can be SIGKILLed)."""
    env = {**os.environ, "MCQ_TOPIC_PREFIX": world.settings.topic_prefix}
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mcq.cli",
                "listen",
                world.name,
                "--registry",
                str(world.registry_file),
                "--http-port",
                "0",
                *args,
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def mcq(world: World, command: str, *args: str) -> Result:
    """``mcq COMMAND NAME --registry FILE ARGS`` for the world's listener, in this process."""
    from mcq.cli import main

    env = {"MCQ_TOPIC_PREFIX": world.settings.topic_prefix, "MCQ_HOME": str(world.settings.stack.home)}
    return CliRunner().invoke(main, [command, world.name, "--registry", str(world.registry_file), *args], env=env)
