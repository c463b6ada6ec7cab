"""The capture side of each key's history: a follower of the logical topics (consumer group
``<prefix>._history``) writes one ``captured`` event per change record the normaliser
wrote, with its source commit time, transaction, and raw and logical positions. It runs
beside the normaliser (``streams/runner.py``); it commits a batch's offsets only after its
events are written (a restart may write an event twice: the reader keeps one)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from mcq.change import RAW_HEADER, BadChange, ChangeCodec
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.history.events import Event
from mcq.history.writer import HistoryWriter
from mcq.topics.exceptions import TopicError
from mcq.topics.named import topic_partitions
from mcq.topics.plan import apply_topics, history_spec, history_topic

log = logging.getLogger(__name__)


def _raw(msg: Message) -> str | None:
    headers: Any = msg.headers() or []
    for name, value in headers.items() if isinstance(headers, dict) else headers:
        if name == RAW_HEADER and value is not None:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


class CaptureFollower:
    """Writes ``captured`` events for the records of ``topics`` (see :meth:`follow`)."""

    def __init__(self, settings: Settings, topics: list[str]) -> None:
        self.settings = settings
        self.topic = history_topic(settings.topic_prefix)
        self._topics = sorted(topics)
        self._changed = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.written = 0
        self._idle = False

    def follow(self, topics: list[str]) -> None:
        """Follow these logical topics from now on (a registry change)."""
        if sorted(topics) != self._topics:
            self._topics = sorted(topics)
            self._changed = True

    # ------------------------------------------------------------------ running

    def start(self) -> bool:
        """Follow in a thread of its own; False (and one line saying so) without a history topic."""
        try:
            apply_topics(self.settings, [history_spec(self.settings.topic_prefix)])
        except (TopicError, KafkaException) as exc:
            log.warning(f"history: {exc}")
        partitions = topic_partitions(self.settings, self.topic)
        if not partitions:
            log.warning(f"history: no topic {self.topic} (mcq topics apply): mcq trace lacks the captures")
            return False
        self._thread = threading.Thread(target=self._run, args=(partitions,), name="mcq-history", daemon=True)
        self._thread.start()
        return True

    def stop(self, catch_up_s: float = 0.0) -> None:
        """Stop following; with ``catch_up_s``, first write what the topics hold (up to that
        long, and only while the follower runs)."""
        if self._thread is None:
            return
        if catch_up_s > 0:
            deadline = time.monotonic() + catch_up_s
            while time.monotonic() < deadline and self._thread.is_alive() and not self.caught_up():
                time.sleep(0.2)
        self._stop.set()
        self._thread.join(timeout=30)

    def caught_up(self) -> bool:
        """Whether it has written the events of every record its topics hold."""
        return self._idle and not self._changed  # a topic not made yet holds nothing

    def _run(self, partitions: int) -> None:
        consumer = Consumer(
            {
                **self.settings.kafka.client_config(),
                "group.id": self.topic,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 100,  # an end of a partition is told sooner (a --once run waits for it)
            }
        )
        producer = Producer({**self.settings.kafka.client_config(), "enable.idempotence": True, "linger.ms": 20})
        writer = HistoryWriter(producer, self.topic, partitions)
        codec = ChangeCodec(registry_client(self.settings))
        missing, retry_at = False, 0.0
        starts: dict[tuple[str, int], int] = {}
        at_eof: set[tuple[str, int]] = set()  # partitions read to their end (librdkafka says so)
        try:
            while not self._stop.is_set():
                if self._changed or (missing and time.monotonic() >= retry_at):
                    self._changed = False
                    self._idle = False
                    found, starts = _assign(consumer, self._topics)
                    at_eof.clear()
                    missing = not found
                    retry_at = time.monotonic() + 2  # a topic the normaliser has not made yet
                msgs = consumer.consume(500, timeout=0.5) if self._topics else []
                for msg in msgs:
                    err = msg.error()
                    where = (msg.topic() or "", msg.partition() or 0)
                    if err is None:
                        at_eof.discard(where)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        at_eof.add(where)
                    else:
                        log.warning(f"history: reading {where[0]}[{where[1]}]: {err}")
                done = [m for m in msgs if m.error() is None]
                if not done:
                    self._idle = at_eof >= set(starts)
                    if not self._topics:
                        time.sleep(0.5)
                    continue
                self._idle = False
                for msg in done:
                    event = self._event(codec, msg)
                    if event is not None:
                        writer.record(event)
                        self.written += 1
                if producer.flush(30) != 0:
                    log.warning("history: events not written within 30 s; reading them again")
                    self._changed = True  # assigned again from the last commit
                    continue
                consumer.commit(
                    offsets=[TopicPartition(m.topic() or "", m.partition() or 0, (m.offset() or 0) + 1) for m in done],
                    asynchronous=False,
                )
        except Exception as exc:  # a follower that stops must say so; the normaliser goes on
            log.warning(f"history: the follower stopped: {exc}")
        finally:
            producer.flush(10)
            consumer.close()

    def _event(self, codec: ChangeCodec, msg: Message) -> Event | None:
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        try:
            change = codec.decode(topic, partition, offset, msg.key(), msg.value())
        except BadChange as exc:
            log.warning(f"history: skipped {exc}")
            return None
        if change is None:  # a tombstone: the DELETE record before it says the change
            return None
        return Event(
            tname=change.key.tname,
            key=change.key.text(),
            step="captured",
            at=time.time(),
            position=str(change.position),
            change_type=change.change_type,
            commit_time=change.entry_time.isoformat(),
            txid=change.txid,
            raw=_raw(msg),
            logical=f"{topic}[{partition}]@{offset}",
        )


def _assign(consumer: Consumer, topics: list[str]) -> tuple[bool, dict[tuple[str, int], int]]:
    """Every partition of ``topics``, each from the group's commit (or its beginning): one
    follower per deployment, so no group protocol and no wait to join one. Whether every
    topic exists, and the offset each partition starts from (negative: its beginning)."""
    tps = []
    found = 0
    for topic in topics:
        meta = consumer.list_topics(topic, timeout=15).topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions:
            found += 1
            tps += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    committed = consumer.committed(tps, timeout=15) if tps else []
    consumer.assign(
        [TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING) for tp in committed]
    )
    return found == len(topics), {(tp.topic, tp.partition): tp.offset for tp in committed}
