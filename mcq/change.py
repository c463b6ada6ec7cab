"""The one type that flows from the logical topics to the listeners: :class:`Change`.

A logical topic's key is a :class:`ChangeKey` (TNAME, subtype and the four key fields of
the MCQ paper's Table 1); its value a change record (``schemas/change_record.avsc``).
:class:`ChangeCodec` turns Kafka bytes into a :class:`Change` and back through the schema
registry, and wraps every library error at that boundary into :class:`BadChange`, which
names the topic, partition and offset of the record at fault.
"""

from __future__ import annotations

import io
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Literal

import cavro
import fastavro
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationError

from mcq.contract import SchemaRegistryUnavailable
from mcq.errors import McqError
from mcq.refs import KEY_FIELDS, table_ref

_KEY_STR = re.compile(r"([^\[\]]+)\[(.*)\]", re.S)
_KEY_PARTS = re.compile(r", (?=(?:person_id|pkey_string|pkey_number|aux_string)=)")

ChangeType = Literal["INSERT", "UPDATE", "DELETE"]
Cause = Literal["source", "entered-view", "left-view", "tombstone", "refresh"]
"""Why a listener gets a change: the source change itself; a change that brought the row
into the listener's view (an INSERT with the full state) or took it out (a DELETE for
that listener only); a tombstone standing for a delete whose record compaction removed;
a refresh request resolved to the key's current state."""
POSITION_HEADER = "mcq.position"
"""Kafka header of every record the normaliser writes: its source position (``commit/lsn``);
the only place a tombstone carries one."""
RAW_HEADER = "mcq.raw"
"""Kafka header of every record the normaliser writes: where Debezium wrote the change it
came from (``topic[partition]@offset``), for its history (``mcq trace``)."""


class BadChange(McqError):
    """A record that cannot be read as a change; the message names where it is."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


@dataclass(frozen=True, order=True)
class Position:
    """Where a change happened in the source; newer changes compare greater."""

    last_commit_lsn: int
    lsn: int

    def __str__(self) -> str:
        return f"{self.last_commit_lsn}/{self.lsn}"

    @property
    def of_a_read(self) -> bool:
        """Whether this is a source read's position (``mcq refresh --from source``: the
        database's WAL position taken before the read, LSN 0), not a change's: it is newer
        than every change the read saw, whichever of them the topics hold."""
        return self.lsn == 0 and self.last_commit_lsn > 0

    @classmethod
    def parse(cls, text: str) -> Position:
        """``commit/lsn`` back into a position; ValueError when it is not one."""
        a, b = text.split("/")[:2]
        return cls(int(a), int(b))


def _json(value: object) -> str:
    """One key field as ``json.dumps`` writes it (ASCII, C-accelerated escaping)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if type(value) is int:
        return int.__repr__(value)
    return json.dumps(value)


def _key_text(tname: str, subtype: str | None, person_id: int | None, pkey_string: str | None,
              pkey_number: int | None, aux_string: str | None) -> str:  # fmt: skip
    # json.dumps(key.as_dict(), separators=(",", ":"), sort_keys=True), spelled out: the
    # same text (targets and applied topics keep it) in about a third of the time
    return (
        f'{{"aux_string":{_json(aux_string)},"person_id":{_json(person_id)},'
        f'"pkey_number":{_json(pkey_number)},"pkey_string":{_json(pkey_string)},'
        f'"subtype":{_json(subtype)},"tname":{_json(tname)}}}'
    )


@dataclass(frozen=True)
class ChangeKey:
    """The logical key: what a compacted topic keeps one last state for."""

    tname: str
    subtype: str | None = None
    person_id: int | None = None
    pkey_string: str | None = None
    pkey_number: int | None = None
    aux_string: str | None = None

    @classmethod
    def from_record(cls, key: dict[str, Any]) -> ChangeKey:
        """The key of a decoded key record."""
        return cls(key["tname"], key.get("subtype"), key.get("person_id"), key.get("pkey_string"),
                   key.get("pkey_number"), key.get("aux_string"))  # fmt: skip

    @property
    def ref(self) -> str:
        return table_ref(self.tname, self.subtype)

    def as_dict(self) -> dict[str, Any]:
        return {
            "tname": self.tname,
            "subtype": self.subtype,
            "person_id": self.person_id,
            "pkey_string": self.pkey_string,
            "pkey_number": self.pkey_number,
            "aux_string": self.aux_string,
        }

    def text(self) -> str:
        """A stable text form, used as a key where bytes of the Avro key would vary by topic.
        Computed once per key (the runtime asks several times per change)."""
        cached: str | None = self.__dict__.get("_text")
        if cached is None:
            cached = _key_text(self.tname, self.subtype, self.person_id, self.pkey_string, self.pkey_number,
                               self.aux_string)  # fmt: skip
            object.__setattr__(self, "_text", cached)
        return cached

    @staticmethod
    def record_text(record: dict[str, Any]) -> str:
        """:meth:`text` of the key whose fields ``record`` holds (a key record, or a value
        record, which carries them), without making the key."""
        g = record.get
        return _key_text(record["tname"], g("subtype"), g("person_id"), g("pkey_string"), g("pkey_number"),
                         g("aux_string"))  # fmt: skip

    @staticmethod
    def text_tail(tname: str) -> str:
        """How :meth:`text` ends for every key of ``tname`` (a filter before parsing)."""
        return f',"tname":{_json(tname)}}}'

    @staticmethod
    def ref_tail(tname: str, subtype: str | None) -> str:
        """How :meth:`text` ends for every key of ``tname``/``subtype``."""
        return f',"subtype":{_json(subtype)},"tname":{_json(tname)}}}'

    @classmethod
    def from_text(cls, text: str) -> ChangeKey:
        d = json.loads(text)
        return cls(d["tname"], d.get("subtype"), d.get("person_id"), d.get("pkey_string"), d.get("pkey_number"),
                   d.get("aux_string"))  # fmt: skip

    def within(self, other: ChangeKey) -> bool:
        """Whether this key is one of those ``other`` names: same TNAME, same subtype unless
        ``other`` has none, and equal in every key field ``other`` sets (a partial key, as a
        refresh request may give)."""
        if self.tname != other.tname or (other.subtype is not None and self.subtype != other.subtype):
            return False
        return all(getattr(other, f) is None or getattr(other, f) == getattr(self, f) for f in KEY_FIELDS)

    def __str__(self) -> str:
        parts = [f"{f}={getattr(self, f)}" for f in KEY_FIELDS if getattr(self, f) is not None]
        return f"{self.ref}[{', '.join(parts)}]"

    @classmethod
    def from_str(cls, text: str) -> ChangeKey:
        """``TNAME/Subtype[person_id=1, pkey_string=a b]`` (:meth:`__str__`) back into a key;
        ValueError when it is not one."""
        match = _KEY_STR.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"not a key: {text!r} (TNAME[field=value, ...])")
        tname, _, subtype = match.group(1).partition("/")
        fields: dict[str, Any] = {}
        for part in _KEY_PARTS.split(match.group(2)) if match.group(2) else []:
            name, _, value = part.partition("=")
            fields[name] = int(value) if name in ("person_id", "pkey_number") else value
        return cls(tname, subtype or None, **fields)


@dataclass(frozen=True)
class Change:
    """One change of a logical table/subtype with the row's state after (and before) it."""

    key: ChangeKey
    change_type: ChangeType
    position: Position
    entry_time: datetime
    source_table: str
    after: dict[str, str | None] | None = None
    before: dict[str, str | None] | None = None
    txid: int | None = None
    origin: str = "unknown"
    call_stack: str | None = None
    cause: Cause = "source"
    """Why the listener gets it (not part of the record: a listener's view of it)."""
    # where it was read from; not part of the record
    topic: str | None = field(default=None, compare=False)
    partition: int | None = field(default=None, compare=False)
    offset: int | None = field(default=None, compare=False)

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    @property
    def state(self) -> dict[str, str | None] | None:
        """The row as it is after this change: None once deleted."""
        return None if self.change_type == "DELETE" else self.after

    def rule_values(self, row: dict[str, str | None] | None = None) -> dict[str, Any]:
        """The names a content rule sees: the change's fields, the row's columns bare (the
        after-state, or ``row`` when given), and ``after.x`` / ``before.x``."""
        values: dict[str, Any] = {}
        bare = row if row is not None else self.after
        for k, v in (bare or {}).items():
            values[k] = v
        for k, v in (self.after or {}).items():
            values[f"after.{k}"] = v
        for k, v in (self.before or {}).items():
            values[f"before.{k}"] = v
        values.update({"change_type": self.change_type, **self.key.as_dict()})  # change fields win
        return values

    def record(self) -> dict[str, Any]:
        """The Avro record (``schemas/change_record.avsc``)."""
        return {
            **self.key.as_dict(),
            "change_type": self.change_type,
            "entry_time": self.entry_time,
            "source": {
                "last_commit_lsn": self.position.last_commit_lsn,
                "lsn": self.position.lsn,
                "txid": self.txid,
                "table": self.source_table,
            },
            "after": self.after,
            "before": self.before,
            "provenance": {"origin": self.origin, "call_stack": self.call_stack},
        }

    @property
    def idempotency_key(self) -> str:
        """Same change, same key: what a target can deduplicate deliveries by."""
        return f"{self.key.text()}@{self.position}"

    def as_json(self) -> dict[str, Any]:
        """The change as plain JSON types (what webhooks and files carry)."""
        return {
            "idempotency_key": self.idempotency_key,
            **self.key.as_dict(),
            "change_type": self.change_type,
            "entry_time": self.entry_time.isoformat(),
            "position": {"last_commit_lsn": self.position.last_commit_lsn, "lsn": self.position.lsn},
            "txid": self.txid,
            "source_table": self.source_table,
            "after": self.after,
            "before": self.before,
            "origin": self.origin,
            "cause": self.cause,
        }

    @classmethod
    def from_record(
        cls,
        key: dict[str, Any],
        value: dict[str, Any],
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> Change:
        return cls.from_value(ChangeKey.from_record(key), value, topic, partition, offset)

    @classmethod
    def from_value(
        cls,
        key: ChangeKey,
        value: dict[str, Any],
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> Change:
        """The change a record's value carries, for a key read already."""
        source = value["source"]
        entry = value["entry_time"]
        if isinstance(entry, int):  # fastavro returns datetimes; a raw long is micros
            entry = datetime.fromtimestamp(entry / 1e6, UTC)
        return cls(
            key=key,
            change_type=value["change_type"],
            position=Position(int(source["last_commit_lsn"]), int(source["lsn"])),
            entry_time=entry,
            source_table=source["table"],
            after=value.get("after"),
            before=value.get("before"),
            txid=source.get("txid"),
            origin=value["provenance"]["origin"],
            call_stack=value["provenance"].get("call_stack"),
            topic=topic,
            partition=partition,
            offset=offset,
        )


_CAVRO_OPTIONS = cavro.Options(record_decodes_to_dict=True)


def avro_reader(schema: Any) -> Callable[[bytes], Any]:
    """A decoder of Avro bodies written with ``schema``: cavro's (compiled, 3-4x faster than
    fastavro's on change records: a map of nullable strings costs fastavro a Python call per
    value), else fastavro's for a schema cavro does not take. Both give dicts, tz-aware
    datetimes for timestamps and a union's value as it is."""
    try:
        return cavro.Schema(schema, options=_CAVRO_OPTIONS).binary_decode  # type: ignore[no-any-return]
    except (cavro.CavroException, ValueError, TypeError, KeyError):
        parsed = fastavro.parse_schema(schema)
        return lambda body: fastavro.schemaless_reader(io.BytesIO(body), parsed, None)


def avro_writer(schema: Any) -> Callable[[Any], bytes]:
    """An encoder of Avro bodies in ``schema``, the twin of :func:`avro_reader`: cavro's
    (compiled: 11 µs a change record here, against fastavro's 22 and Confluent's serializer's
    ~70, which copies and walks the schema again for every record), else fastavro's. Both
    refuse a value the schema does not take with a ValueError or a TypeError."""
    try:
        return cavro.Schema(schema, options=_CAVRO_OPTIONS).binary_encode  # type: ignore[no-any-return]
    except (cavro.CavroException, ValueError, TypeError, KeyError):
        parsed = fastavro.parse_schema(schema)

        def write(value: Any) -> bytes:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, value)
            return out.getvalue()

        return write


KEYS_KEPT = 32_768
"""Keys a codec remembers by their bytes (``ChangeCodec._key``): about 16 MB of keys like
the campus's (a person id or a short text each), measured with tracemalloc."""

UNREADABLE = (SchemaRegistryError, SerializationError, KeyError, TypeError, ValueError, OSError)
"""What decoding a record raises when it cannot be read (requests' connection errors are OSErrors)."""


def _unreadable(where: str, what: str, exc: Exception) -> McqError:
    """One of :data:`UNREADABLE` as mcq's error: the schema registry out of reach (retry), or a
    record that is not a change ``what`` (``key``, ``record``; dead-lettered), naming where."""
    if isinstance(exc, SchemaRegistryError):
        if exc.http_status_code >= 500:  # the registry does not know the writer's schema id: 4xx
            return SchemaRegistryUnavailable(f"{where}: schema registry: {exc.error_message}")
        return BadChange(where, f"schema registry: {exc.error_message} (HTTP {exc.http_status_code})")
    if isinstance(exc, OSError) and not isinstance(exc, (SerializationError, KeyError, TypeError, ValueError)):
        return SchemaRegistryUnavailable(f"{where}: schema registry: {exc}")
    return BadChange(where, f"not a change {what}: {exc}")


class ChangeCodec:
    """Change <-> Kafka bytes in Confluent's wire format, through the schema registry."""

    def __init__(self, client: SchemaRegistryClient) -> None:
        self._client = client
        self._readers: dict[int, Callable[[bytes], Any]] = {}  # schema id -> a decoder of the writer's schema
        self._writers: dict[str, tuple[bytes, Callable[[Any], bytes]]] = {}  # subject -> (wire header, encoder)
        self._keys: dict[bytes, ChangeKey] = {}  # key bytes read lately -> their key (see _key)

    def _writer(self, topic: str, field: str) -> tuple[bytes, Callable[[Any], bytes]]:
        """The wire header (magic 0, schema id) and the encoder of the latest schema of
        ``topic``'s key or value subject (Confluent's TopicNameStrategy), looked up once. This
        is what Confluent's AvroSerializer does with ``use.latest.version`` (its registry
        client keeps the latest version for the process too), without its copy and walk of
        the schema for every record: 77 µs a change with it here, 11 without."""
        subject = f"{topic}-{field}"
        found = self._writers.get(subject)
        if found is None:
            latest = self._client.get_latest_version(subject)
            if latest.schema_id is None:
                raise ValueError(f"the registry gave subject {subject}'s latest schema without its id")
            header = b"\x00" + latest.schema_id.to_bytes(4, "big")
            found = self._writers[subject] = (header, avro_writer(json.loads(latest.schema.schema_str or "null")))
        return found

    def _des(self, data: bytes, field: str) -> Any:
        """Confluent's wire format (magic 0, schema id, Avro body) read with the writer's
        schema, fetched once per id."""
        if len(data) < 5 or data[0] != 0:
            raise SerializationError(f"not Confluent's wire format (first byte {data[:1]!r}, {len(data)} bytes)")
        schema_id = int.from_bytes(data[1:5], "big")
        reader = self._readers.get(schema_id)
        if reader is None:
            schema = self._client.get_schema(schema_id)
            reader = self._readers[schema_id] = avro_reader(json.loads(schema.schema_str or "null"))
        try:
            return reader(data[5:])
        except (EOFError, IndexError, struct.error, ValueError, OverflowError, cavro.CavroException) as exc:
            raise SerializationError(f"{field} does not match its schema {schema_id}: {exc!r}") from None

    def _key(self, data: bytes) -> ChangeKey:
        """The key of a record's key bytes. The same bytes are the same key (the schema id is
        in them), and a backlog or a burst holds each key many times: the last
        :data:`KEYS_KEPT` keys read are kept, one frozen key each (its text computed once),
        and forgotten all at once when full (no bookkeeping per read)."""
        found = self._keys.get(data)
        if found is None:
            found = ChangeKey.from_record(self._des(data, MessageField.KEY))
            if len(self._keys) >= KEYS_KEPT:
                self._keys.clear()
            self._keys[data] = found
        return found

    def decode_key(self, topic: str, partition: int, offset: int, key: bytes | None) -> ChangeKey:
        """The logical key of a record (a tombstone's, say). Raises BadChange naming the record."""
        if key is None:
            raise BadChange(f"{topic}[{partition}]@{offset}", "a record without a key")
        try:  # where it is read is said only when it fails: a batch job decodes a million keys
            return self._key(key)
        except UNREADABLE as exc:
            raise _unreadable(f"{topic}[{partition}]@{offset}", "key", exc) from None

    def decode(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None) -> Change | None:
        """The change of a record; None for a tombstone. Raises BadChange naming the record."""
        where = f"{topic}[{partition}]@{offset}"
        if value is None:
            return None
        if key is None:
            raise BadChange(where, "a change record without a key")
        try:
            return Change.from_value(self._key(key), self._des(value, MessageField.VALUE), topic, partition, offset)
        except UNREADABLE as exc:
            raise _unreadable(where, "record", exc) from None

    def decode_value(self, topic: str, partition: int, offset: int, value: bytes) -> dict[str, Any]:
        """A change record's value as its writer's schema reads it, its key left undecoded (a
        caller that has the key already: a batch job's last states). Raises BadChange."""
        try:
            decoded: dict[str, Any] = self._des(value, MessageField.VALUE)
            return decoded
        except UNREADABLE as exc:
            raise _unreadable(f"{topic}[{partition}]@{offset}", "record", exc) from None

    def encode(self, topic: str, change: Change) -> tuple[bytes, bytes]:
        """Key and value bytes of a change for ``topic`` (its subjects must exist)."""
        try:
            key_header, write_key = self._writer(topic, MessageField.KEY)
            value_header, write_value = self._writer(topic, MessageField.VALUE)
            return key_header + write_key(change.key.as_dict()), value_header + write_value(change.record())
        except SchemaRegistryError as exc:
            raise BadChange(topic, f"cannot encode {change.key}: schema registry: {exc.error_message}") from None
        except (ValueError, TypeError) as exc:
            raise BadChange(topic, f"cannot encode {change.key}: {exc}") from None
