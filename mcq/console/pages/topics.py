"""The topic browser: read a logical topic from an offset of a partition, or find a key's
records, decoded; nothing is consumed (no group, no commit)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcq.change import BadChange, ChangeCodec
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.topics.exceptions import TopicReadError
from mcq.topics.read import watermarks

if TYPE_CHECKING:
    from mcq.console.app import Console

PAGE = 50
SCAN_LIMIT = 20_000
"""Records read at most per partition when searching for a key."""


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str
    change_type: str
    entry_time: str
    value: dict[str, Any] | None
    problem: str = ""


def read(settings: Settings, topic: str, partition: int | None, offset: int, key: str | None) -> list[Record]:
    """Up to PAGE records of TOPIC from OFFSET of PARTITION (all partitions when None), or,
    with KEY, the records whose key text contains it (the last SCAN_LIMIT of each partition)."""
    consumer = Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"_mcq-console-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    codec = ChangeCodec(registry_client(settings))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            raise HTTPException(404, f"no topic {topic}")
        parts = sorted(meta.partitions) if partition is None else [partition]
        if partition is not None and partition not in meta.partitions:
            raise HTTPException(404, f"{topic} has no partition {partition}")
        assignment = []
        for p in parts:
            low, high = watermarks(consumer, TopicPartition(topic, p))
            start = max(low, high - SCAN_LIMIT) if key else max(low, offset)
            if start < high:
                assignment.append(TopicPartition(topic, p, start))
        if not assignment:
            return []
        consumer.assign(assignment)
        out: list[Record] = []
        open_parts = {tp.partition for tp in assignment}
        while open_parts and len(out) < PAGE:
            msg = consumer.poll(5.0)
            if msg is None:
                break
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    open_parts.discard(msg.partition() or 0)
                    continue
                raise HTTPException(503, f"reading {topic}: {err}")
            record = _decode(codec, topic, msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value())
            if key is None or key in record.key:
                out.append(record)
        return out
    finally:
        consumer.close()


def _decode(codec: ChangeCodec, topic: str, p: int, o: int, key: bytes | None, value: bytes | None) -> Record:
    try:
        change = codec.decode(topic, p, o, key, value)
        if change is None:
            return Record(p, o, codec.decode_key(topic, p, o, key).text(), "TOMBSTONE", "", None)
        record = json.loads(json.dumps(change.record(), default=str))  # times as text, for the page
        return Record(p, o, change.key.text(), change.change_type, change.entry_time.isoformat(), record)
    except BadChange as exc:
        return Record(p, o, repr(key)[:80], "?", "", None, str(exc))


def routes(ctx: Console) -> list[Route]:
    def topics(request: Request) -> Response:
        ctx.user(request)
        registry = ctx.state.registry()
        names = sorted(t.topic(ctx.settings.topic_prefix) for t in registry.tables)
        return ctx.render(request, "topics.html", topics=names)

    def browse(request: Request) -> Response:
        ctx.user(request)
        topic = request.path_params["topic"]
        registry = ctx.state.registry()
        if topic not in {t.topic(ctx.settings.topic_prefix) for t in registry.tables}:
            raise HTTPException(404, f"{topic} is not a logical topic of the registry")
        q = request.query_params
        try:
            partition = int(q["partition"]) if q.get("partition") else None
            offset = int(q.get("offset") or 0)
        except ValueError:
            raise HTTPException(400, "partition and offset are whole numbers") from None
        key = q.get("key") or None
        try:
            records = read(ctx.settings, topic, partition, offset, key)
        except TopicReadError as exc:
            raise HTTPException(503, str(exc)) from None
        where = f"{topic}[{'*' if partition is None else partition}]@{offset}" + (f" key~{key}" if key else "")
        ctx.read_contents(request, "records", where)
        return ctx.render(
            request, "topic.html", topic=topic, records=records, partition=partition, offset=offset, key=key or ""
        )

    return [Route("/topics", topics), Route("/topics/{topic}", browse)]
