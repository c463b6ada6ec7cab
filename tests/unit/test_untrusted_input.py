"""Property and fuzz tests of what reads untrusted input: whatever arrives, each reader
answers with its one clear refusal (or a value), never with another exception that would
crash a listener or the console. The rule language has its own in test_rules.py."""

from __future__ import annotations

import contextlib
import io
import json

import fastavro
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcq.change import BadChange, ChangeCodec, ChangeKey
from mcq.console.pages.interests import _raw, validate
from mcq.contract import schema_text
from mcq.registry import RegistryError, load_registry, parse_registry
from tests import PROJECT_ROOT
from tests.support.wire import CHANGE, KEY_ID, VALUE_ID, SchemasById, wire

CAMPUS = PROJECT_ROOT / "examples" / "campus.yaml"
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""For a property that validates the whole campus registry each time (~0.1 s)."""


def _codec() -> ChangeCodec:
    return ChangeCodec(SchemasById())  # type: ignore[arg-type]


KEY = wire(KEY_ID, "change_key", CHANGE.key.as_dict())
VALUE = wire(VALUE_ID, "change_record", CHANGE.record())


@FUZZ
@given(key=st.one_of(st.none(), st.binary(max_size=64)), value=st.one_of(st.none(), st.binary(max_size=256)))
def test_any_bytes_decode_to_a_change_none_or_bad_change_naming_the_record(
    key: bytes | None, value: bytes | None
) -> None:
    try:
        _codec().decode("t", 1, 7, key, value)
    except BadChange as exc:
        assert "t[1]@7" in str(exc)


@FUZZ
@given(body=st.binary(max_size=512), schema_id=st.sampled_from([KEY_ID, VALUE_ID, 99]))
def test_a_wire_header_with_any_body_decodes_or_is_refused(body: bytes, schema_id: int) -> None:
    value = b"\x00" + schema_id.to_bytes(4, "big") + body
    try:
        _codec().decode("t", 0, 0, KEY, value)
    except BadChange as exc:
        assert "t[0]@0" in str(exc)


@FUZZ
@given(data=st.data())
def test_a_real_change_with_bytes_flipped_decodes_or_is_refused(data: st.DataObject) -> None:
    value = bytearray(VALUE)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(5, len(value) - 1))
        value[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(5, len(value)))
    with contextlib.suppress(BadChange):
        _codec().decode("t", 0, 0, KEY, bytes(value[:cut]))


_JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=6)),
    max_leaves=10,
)


@FUZZ
@given(record=st.dictionaries(st.sampled_from(["tname", "subtype", "person_id", "pkey_string", "x"]), _JSONISH))
def test_a_key_record_of_any_shape_is_refused_by_the_avro_writer_or_read_back_equal(record: dict[str, object]) -> None:
    """What the Avro key schema lets through is exactly what reads back."""
    body = io.BytesIO()
    try:
        fastavro.schemaless_writer(body, fastavro.parse_schema(json.loads(schema_text("change_key"))), record)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        return
    key = b"\x00" + KEY_ID.to_bytes(4, "big") + body.getvalue()
    with contextlib.suppress(BadChange):
        _codec().decode_key("t", 0, 0, key)


@FUZZ
@given(text=st.one_of(st.text(max_size=80), _JSONISH.map(json.dumps)))
def test_a_key_text_or_key_string_of_any_content_is_a_key_or_a_value_error(text: str) -> None:
    for parse in (ChangeKey.from_text, ChangeKey.from_str):
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):  # callers: "not a key"
            parse(text)


@FUZZ
@given(text=st.text(max_size=400))
def test_any_text_as_a_registry_file_is_a_registry_or_one_registry_error(text: str) -> None:
    try:
        parse_registry(text, "fuzz.yaml")
    except RegistryError as exc:
        assert str(exc).startswith("fuzz.yaml")


_CAMPUS = yaml.safe_load(CAMPUS.read_text())


@SLOW
@given(data=st.data())
def test_the_campus_registry_with_any_value_replaced_is_valid_or_refused_at_a_line(data: st.DataObject) -> None:
    """Mutate one scalar of the real registry anywhere (a wrong type, a huge number, text)."""
    doc = json.loads(json.dumps(_CAMPUS))
    node, path = doc, []
    while isinstance(node, dict | list) and node:
        keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
        k = data.draw(st.sampled_from(keys))
        path.append(k)
        if not isinstance(node[k], dict | list) or data.draw(st.booleans()):
            node[k] = data.draw(_JSONISH)
            break
        node = node[k]
    try:
        parse_registry(yaml.safe_dump(doc), "mutated.yaml")
    except RegistryError as exc:
        problems = getattr(exc, "problems", [str(exc)])
        assert all(p.startswith("mutated.yaml") and "\n" not in p and "\r" not in p for p in problems), problems


_REGISTRY = load_registry(CAMPUS)
_RAW = [i.model_dump(exclude_defaults=True) for i in _REGISTRY.interests]
_FORM_FIELDS = ("listener", "tname", "subtype", "rule", "columns", "delay_s", "expire_after_s", "comment")


@FUZZ
@given(
    form=st.fixed_dictionaries(
        {
            f: st.one_of(st.text(max_size=60), st.sampled_from(["", "*", "BEST", "PERSON", "1e999", "nan", "-1"]))
            for f in _FORM_FIELDS
        }
    )
)
def test_any_interest_form_gives_a_registry_or_errors_by_field_never_an_exception(form: dict[str, str]) -> None:
    wanted, errors = validate(_REGISTRY, [*_RAW, _raw(form)], len(_RAW))
    assert (wanted is None) == bool(errors)
    assert all(isinstance(v, str) and v for v in errors.values())
