"""Change records on the wire without a schema registry: two schema ids served from the
packaged schemas, a record framed as the Confluent serializer frames it, one sample change."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import fastavro
from confluent_kafka.schema_registry import RegisteredSchema, Schema

from mcq.change import Change, ChangeKey, Position
from mcq.contract import schema_text

KEY_ID, VALUE_ID = 7, 8


class SchemasById:
    def __init__(self) -> None:
        self.asked: list[int] = []
        self.asked_latest: list[str] = []

    def get_schema(self, schema_id: int) -> Schema:
        self.asked.append(schema_id)
        return Schema(schema_text({KEY_ID: "change_key", VALUE_ID: "change_record"}[schema_id]), "AVRO")

    def get_latest_version(self, subject: str) -> RegisteredSchema:
        """A topic's subject as ``mcq.contract.register_topic`` leaves it: our schema, one version."""
        self.asked_latest.append(subject)
        schema_id = KEY_ID if subject.endswith("-key") else VALUE_ID
        name = "change_key" if schema_id == KEY_ID else "change_record"
        return RegisteredSchema(subject, 1, schema_id, None, Schema(schema_text(name), "AVRO"))


def wire(schema_id: int, name: str, record: dict[str, object]) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(json.loads(schema_text(name))), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()


CHANGE = Change(
    key=ChangeKey("PERSON", "Telephone", 42, "Office", None, None),
    change_type="UPDATE",
    position=Position(1000, 1010),
    entry_time=datetime(2026, 11, 23, 12, 0, 1, 500000, tzinfo=UTC),
    source_table="campus.directory_telephone",
    after={"person_id": "42", "tele_type": "Office", "phone_number": "+1 518 555 0100"},
    before={"person_id": "42", "tele_type": "Office", "phone_number": None},
    txid=77,
    origin="table campus.directory_telephone",
)
