"""Connector configuration generated from the registry."""

from __future__ import annotations

import json
import os
import re

import pytest

from mcq.capture.connector import OUTBOX_TABLE, captured_columns, render
from mcq.config import load_settings
from mcq.registry import load_registry, parse_registry
from tests import PROJECT_ROOT

CAMPUS = PROJECT_ROOT / "examples" / "campus.yaml"


@pytest.fixture
def config(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for key in [k for k in os.environ if k.startswith("MCQ_")]:
        monkeypatch.delenv(key)  # the committed file is rendered with the local defaults
    return render(load_registry(CAMPUS), load_settings())["mcq-source-campus"]


def test_the_committed_connector_json_is_what_the_registry_renders(config: dict[str, str]) -> None:
    committed = json.loads((PROJECT_ROOT / "connect" / "mcq-source-campus.json").read_text())
    assert committed == config, "run: mcq connect render --registry examples/campus.yaml --out connect/"


def test_every_feed_table_and_the_outbox_are_captured_with_exactly_their_columns(config: dict[str, str]) -> None:
    tables = config["table.include.list"].split(",")
    assert "campus\\.directory_telephone" in tables and "mcq\\.change_log" in tables and "mcq\\.heartbeat" in tables
    assert len(tables) == 16 + 2
    columns = config["column.include.list"].split(",")
    assert "campus\\.logins\\.last_login" in columns  # captured (needed to see it changed) but not watched
    assert not any(c.startswith("campus\\.people\\.") and "ssn" in c for c in columns)
    cols = captured_columns(load_registry(CAMPUS), load_registry(CAMPUS).sources[0])
    assert cols["campus.directory_telephone"] == ["person_id", "tele_type", "phone_number", "updated_at"]
    assert OUTBOX_TABLE in cols


def test_before_images_are_requested_and_the_password_is_a_reference(config: dict[str, str]) -> None:
    assert "campus.directory_telephone:FULL" in config["replica.identity.autoset.values"].split(",")
    assert config["database.password"] == "${env:MCQ_SOURCE__PASSWORD}"
    assert config["slot.name"] == "mcq_campus" and config["publication.name"] == "mcq_campus"
    assert config["heartbeat.interval.ms"] and config["snapshot.mode"] == "initial"
    # a change in the captured database at every heartbeat: idle tables never hold the cluster's WAL
    assert config["heartbeat.action.query"].startswith("INSERT INTO mcq.heartbeat (source, beat_at) VALUES ('campus'")


def test_the_converters_are_the_connectors_own_and_dates_and_times_become_text_in_the_worker(
    config: dict[str, str],
) -> None:
    """A Connect worker whose default converter differs (Avro, schemaless JSON) must not change
    what the normaliser reads: compact JSON whose dates and times mcq's transform made text."""
    json_converter = "org.apache.kafka.connect.json.JsonConverter"
    assert config["value.converter"] == json_converter and config["key.converter"] == json_converter
    assert config["transforms"] == "naturaltext"
    assert config["transforms.naturaltext.type"] == "mcq.connect.NaturalText"
    assert config["value.converter.schemas.enable"] == "false"
    assert config["decimal.handling.mode"] == "string" and config["interval.handling.mode"] == "string"
    # a NULL stays NULL in a column declared with a DEFAULT (the converter would write the default)
    assert config["value.converter.replace.null.with.default"] == "false"
    # numeric columns say so in their schema, so NaN and the infinities get PostgreSQL's spelling
    assert re.fullmatch(config["datatype.propagate.source.type"], "mcq_source.campus.people.numeric")
    # and bit(n) columns, so their bytes are told from bytea's and from varbit's
    assert re.fullmatch(config["datatype.propagate.source.type"], "mcq_source.campus.people.bit")
    assert not re.fullmatch(config["datatype.propagate.source.type"], "mcq_source.campus.people.varbit")


def test_a_worker_without_the_transform_gets_values_with_their_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("MCQ_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MCQ_CONNECT__NATURAL_TEXT", "false")
    config = render(load_registry(CAMPUS), load_settings())["mcq-source-campus"]
    assert "transforms" not in config
    assert config["value.converter.schemas.enable"] == "true"  # the normaliser decodes by the schema
    assert config["value.converter.replace.null.with.default"] == "false"


def test_a_big_tables_raw_topic_is_created_with_its_own_partitions_and_the_default_groups_other_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in [k for k in os.environ if k.startswith("MCQ_")]:
        monkeypatch.delenv(key)
    old = "        watch: [first_name, last_name, birth_date, id_number]\n"
    text = CAMPUS.read_text().replace(old, f"{old}        raw_partitions: 6\n", 1)
    config = render(parse_registry(text, "campus.yaml"), load_settings())["mcq-source-campus"]
    assert config["topic.creation.groups"] == "partitions6"
    pattern = config["topic.creation.partitions6.include"]
    # Connect matches the include list as regular expressions: this one topic and no other
    assert re.fullmatch(pattern, "mcq.raw.campus.campus.people")
    assert not re.fullmatch(pattern, "mcq.raw.campus.campus.people_old") and not re.fullmatch(
        pattern, "mcqXraw.campus.campus.people"
    )
    assert config["topic.creation.partitions6.partitions"] == "6"
    assert config["topic.creation.partitions6.cleanup.policy"] == "delete"  # raw topics are never compacted
    assert (
        config["topic.creation.partitions6.replication.factor"] == config["topic.creation.default.replication.factor"]
    )
    assert config["topic.creation.default.partitions"] == "1"  # every other table keeps one


def test_a_registry_without_raw_partitions_adds_no_creation_group(config: dict[str, str]) -> None:
    assert not any(k.startswith("topic.creation.") and not k.startswith("topic.creation.default.") for k in config)
