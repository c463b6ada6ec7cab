"""What ``mcq acl apply`` made: a compacted topic, ``<prefix>._acls``, one record per
binding it created (key: the binding, value: the grant as JSON; a tombstone once it
deleted it).

Kafka's ACLs carry no owner or tag, so this record is how apply tells its own bindings
from everyone else's: a binding of an mcq principal that it did not make -- one an
operator added by hand, any DENY rule, a binding for another host -- is reported as
*foreign* and never deleted. A grant is recorded before it is created, so a crash between
the two leaves a record of a binding that may not exist (created again by the next apply,
never a binding apply would not recognise as its own).
"""

from __future__ import annotations

import json
from dataclasses import asdict

from confluent_kafka import KafkaError, Message, Producer

from mcq.acl.exceptions import AclError
from mcq.acl.plan import Grant
from mcq.config import Settings
from mcq.topics.plan import SYSTEM_CONFIG, TopicSpec, apply_topics
from mcq.topics.read import read_to_end


def acl_ledger_topic(prefix: str) -> str:
    return f"{prefix}._acls"


def _key(g: Grant) -> bytes:
    return "|".join((g.principal, g.resource, g.pattern, g.name, g.operation)).encode()


class AclLedger:
    """The bindings ``mcq acl apply`` made and has not deleted since."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = acl_ledger_topic(settings.topic_prefix)

    def made(self) -> set[Grant]:
        apply_topics(self.settings, [TopicSpec(self.topic, 1, dict(SYSTEM_CONFIG), "ACLs mcq acl apply made")])
        latest: dict[bytes, bytes | None] = {}
        for msg in read_to_end(self.settings, self.topic):
            latest[msg.key() or b""] = msg.value()
        out = set()
        for value in latest.values():
            if value is None:
                continue
            try:
                fields = json.loads(value)
                out.add(Grant(**{k: fields[k] for k in ("principal", "resource", "pattern", "name", "operation")}))
            except (ValueError, KeyError, TypeError):
                continue  # not a record of ours: nothing it names is deleted
        return out

    def _write(self, grants: list[Grant], made: bool) -> None:
        if not grants:
            return
        failures: list[str] = []
        producer = Producer({**self.settings.kafka.client_config(), "enable.idempotence": True, "acks": "all"})

        def delivered(err: KafkaError | None, _: Message) -> None:
            if err is not None:
                failures.append(str(err))

        for g in grants:
            value = json.dumps(asdict(g), sort_keys=True).encode() if made else None
            producer.produce(self.topic, key=_key(g), value=value, on_delivery=delivered)
        if producer.flush(30) or failures:
            raise AclError(f"recording ACLs in {self.topic}: {failures or 'not delivered in 30 s'}")

    def record(self, grants: list[Grant]) -> None:
        self._write(grants, made=True)

    def forget(self, grants: list[Grant]) -> None:
        self._write(grants, made=False)
