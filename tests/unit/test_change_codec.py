"""Reading and writing a change record in Confluent's wire format: what the listener and the
projection stores decode every record with, and what the entities job encodes its changes
with. The schemas come from a plain object standing in for the registry's lookups (the
integration tests read and write real records through Apicurio)."""

from __future__ import annotations

import io
import json
import random
from datetime import UTC, datetime

import cavro
import fastavro
import pytest

from mcq.change import BadChange, Change, ChangeCodec, ChangeKey, Position, avro_reader, avro_writer
from mcq.contract import schema_text
from tests.support.wire import CHANGE, KEY_ID, VALUE_ID, SchemasById, wire


def codec() -> tuple[ChangeCodec, SchemasById]:
    client = SchemasById()
    return ChangeCodec(client), client  # type: ignore[arg-type]


def test_a_change_read_back_equals_the_change_written_and_names_its_record() -> None:
    c, _ = codec()
    key, value = wire(KEY_ID, "change_key", CHANGE.key.as_dict()), wire(VALUE_ID, "change_record", CHANGE.record())
    read = c.decode("t", 3, 99, key, value)
    assert read == CHANGE
    assert read is not None and (read.topic, read.partition, read.offset) == ("t", 3, 99)
    assert read.entry_time == CHANGE.entry_time and read.after == CHANGE.after and read.before == CHANGE.before


def test_each_writer_schema_is_asked_for_once() -> None:
    c, client = codec()
    key, value = wire(KEY_ID, "change_key", CHANGE.key.as_dict()), wire(VALUE_ID, "change_record", CHANGE.record())
    for offset in range(50):
        c.decode("t", 0, offset, key, value)
    assert sorted(client.asked) == [KEY_ID, VALUE_ID]


def test_a_tombstone_has_no_change_but_its_key_is_read() -> None:
    c, _ = codec()
    key = wire(KEY_ID, "change_key", CHANGE.key.as_dict())
    assert c.decode("t", 0, 1, key, None) is None
    assert c.decode_key("t", 0, 1, key) == CHANGE.key


def test_keys_read_again_are_the_same_key_and_a_full_memory_of_keys_starts_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("mcq.change.KEYS_KEPT", 4)
    c, _ = codec()
    keys = [ChangeKey("PHONE", None, n, f"p{n}", None, None) for n in range(11)]
    value = wire(VALUE_ID, "change_record", CHANGE.record())
    for round_ in range(3):
        for n, k in enumerate(keys):
            read = c.decode("t", 0, round_ * 100 + n, wire(KEY_ID, "change_key", k.as_dict()), value)
            assert read is not None and read.key == k and read.key.text() == k.text()
            assert c.decode_key("t", 0, n, wire(KEY_ID, "change_key", k.as_dict())) == k
    assert len(c._keys) <= 4
    again = wire(KEY_ID, "change_key", keys[0].as_dict())
    assert c.decode_key("t", 0, 1, again) is c.decode_key("t", 0, 2, again)  # read once, its text computed once
    with pytest.raises(BadChange, match=r"t\[0\]@5"):  # an unreadable key is refused each time, never kept
        c.decode_key("t", 0, 5, b"\x00\x00\x00\x00\x07")
    with pytest.raises(BadChange, match=r"t\[0\]@6"):
        c.decode_key("t", 0, 6, b"\x00\x00\x00\x00\x07")


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"not avro at all",
        b"\x01\x00\x00\x00\x08rest",  # another magic byte
        wire(VALUE_ID, "change_record", CHANGE.record())[:30],  # cut short
    ],
    ids=["empty", "text", "magic", "truncated"],
)
def test_a_record_that_is_not_a_change_is_refused_naming_topic_partition_and_offset(value: bytes) -> None:
    c, _ = codec()
    with pytest.raises(BadChange, match=r"logical\.x\[2\]@41"):
        c.decode("logical.x", 2, 41, wire(KEY_ID, "change_key", CHANGE.key.as_dict()), value)


def test_a_keys_text_is_the_same_sorted_json_every_time_and_equal_keys_share_it() -> None:
    a = ChangeKey("PERSON", "Telephone", 7, aux_string="home")
    b = ChangeKey("PERSON", "Telephone", 7, aux_string="home")
    expected = (
        '{"aux_string":"home","person_id":7,"pkey_number":null,"pkey_string":null,'
        '"subtype":"Telephone","tname":"PERSON"}'
    )
    assert a.text() == a.text() == b.text() == expected
    assert a == b and hash(a) == hash(b) and ChangeKey.from_text(a.text()) == a


def test_a_keys_text_is_exactly_what_json_dumps_writes_for_any_field_values() -> None:
    """Targets and applied topics keep this text: it must not drift from the JSON form it
    always had, for quotes, backslashes, control characters, non-ASCII and big numbers."""
    texts = [None, "", "x", 'q"uo\\te', "ünï\u2028ç😀", "\x00\x1f\n\t", "Telephone"]
    numbers = [None, 0, -5, 2**62, 123]
    rnd = random.Random(7)
    for _ in range(5000):
        key = ChangeKey(rnd.choice(texts[1:]), rnd.choice(texts), rnd.choice(numbers), rnd.choice(texts),
                        rnd.choice(numbers), rnd.choice(texts))  # fmt: skip
        assert key.text() == json.dumps(key.as_dict(), separators=(",", ":"), sort_keys=True)
        assert ChangeKey.from_text(key.text()) == key


def test_a_keys_text_ends_with_its_tnames_tail_and_no_other_tnames() -> None:
    """The applied positions pick a TNAME's keys out of a million by this tail, unparsed."""
    texts = ["PERSON", "PERSON2", "ERSON", 'P"ERSON', "ünï", "", ',"tname":"PERSON"}']
    rnd = random.Random(11)
    for _ in range(3000):
        key = ChangeKey(rnd.choice(texts[:-2]), rnd.choice([None, *texts]), rnd.choice([None, 7]),
                        rnd.choice([None, *texts]), None, rnd.choice([None, *texts]))  # fmt: skip
        for tname in texts:
            assert key.text().endswith(ChangeKey.text_tail(tname)) == (key.tname == tname)


def _random_change(rnd: random.Random) -> Change:
    texts = [None, "", "x", 'q"uo\\te', "ünï\u2028ç😀", "\x00\x1f\n\t", "Telephone", "long " * 200]
    numbers = [None, 0, -1, -(2**63), 2**63 - 1, 123]

    def row() -> dict[str, str | None] | None:
        if rnd.random() < 0.2:
            return None
        return {rnd.choice(texts[1:]) or "k": rnd.choice(texts) for _ in range(rnd.randrange(0, 12))}

    kind = rnd.choice(["INSERT", "UPDATE", "DELETE"])
    return Change(
        key=ChangeKey(
            rnd.choice(texts[1:]) or "T",
            rnd.choice(texts),
            rnd.choice(numbers),
            rnd.choice(texts),
            rnd.choice(numbers),
            rnd.choice(texts),
        ),
        change_type=kind,  # type: ignore[arg-type]
        position=Position(rnd.randrange(0, 2**63), rnd.randrange(0, 2**63)),
        entry_time=datetime.fromtimestamp(rnd.randrange(0, 4_000_000_000_000_000) / 1e6, UTC),
        source_table=rnd.choice(["campus.people", "mcq.change_log", "ß.ü"]),
        after=row(),
        before=row(),
        txid=rnd.choice(numbers),
        origin=rnd.choice(["table campus.people", "mcq_log_change"]),
        call_stack=rnd.choice(texts),
    )


def test_the_compiled_reader_reads_every_change_exactly_as_fastavro_does() -> None:
    """Records are decoded by cavro (3-4x faster); what it gives must be what fastavro gives,
    field by field, for any value the change schemas allow."""
    rnd = random.Random(11)
    schemas = {name: json.loads(schema_text(name)) for name in ("change_key", "change_record")}
    fast = {name: fastavro.parse_schema(schema) for name, schema in schemas.items()}
    compiled = {name: avro_reader(schema) for name, schema in schemas.items()}
    for _ in range(3000):
        change = _random_change(rnd)
        for name, record in (("change_key", change.key.as_dict()), ("change_record", change.record())):
            body = wire(0, name, record)[5:]
            expected = fastavro.schemaless_reader(io.BytesIO(body), fast[name], None)
            assert compiled[name](body) == expected
    c, _ = codec()
    key, value = wire(KEY_ID, "change_key", change.key.as_dict()), wire(VALUE_ID, "change_record", change.record())
    assert c.decode("t", 0, 0, key, value) == change


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "R-1", "fields": [{"name": "a", "type": "long"}]},  # not a strict Avro name
        {"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "long"], "default": 5}]},
    ],
    ids=["name", "union-default"],
)
def test_a_writer_schema_the_compiled_reader_refuses_is_read_by_fastavro(schema: dict[str, object]) -> None:
    with pytest.raises((cavro.CavroException, TypeError)):
        cavro.Schema(schema)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), {"a": 5})
    assert avro_reader(schema)(body.getvalue()) == {"a": 5}


def test_every_change_is_encoded_to_the_bytes_confluents_serializer_frames() -> None:
    """Changes are encoded by cavro with the subject's latest schema id, looked up once; the
    bytes must be what fastavro writes, framed as Confluent's serializer frames them."""
    rnd = random.Random(12)
    c, client = codec()
    for _ in range(3000):
        change = _random_change(rnd)
        key, value = c.encode("t", change)
        assert key == wire(KEY_ID, "change_key", change.key.as_dict())
        assert value == wire(VALUE_ID, "change_record", change.record())
        assert c.decode("t", 0, 0, key, value) == change
    assert sorted(client.asked_latest) == ["t-key", "t-value"]


def test_a_change_its_schema_cannot_take_is_refused_naming_the_topic_and_key() -> None:
    c, _ = codec()
    bad = Change(**{**CHANGE.__dict__, "after": {"phone_number": 5}})  # type: ignore[arg-type]
    with pytest.raises(BadChange, match=r"people-topic.*cannot encode .*PERSON"):
        c.encode("people-topic", bad)


def test_a_schema_the_compiled_writer_refuses_is_written_by_fastavro() -> None:
    schema = {"type": "record", "name": "R-1", "fields": [{"name": "a", "type": "long"}]}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), {"a": 5})
    assert avro_writer(schema)({"a": 5}) == body.getvalue()
