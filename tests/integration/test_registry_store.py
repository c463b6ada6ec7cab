"""The registry at run time: a compacted topic that running readers follow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from mcq.config import Settings
from mcq.registry import Interest, load_registry
from mcq.registry.exceptions import RegistryStoreInvalid
from mcq.registry.store import RegistryReader, RegistryStore
from mcq.stack import Stack
from mcq.topics.read import read_to_end
from tests import PROJECT_ROOT

CAMPUS = PROJECT_ROOT / "examples" / "campus.yaml"


def test_apply_then_read_gives_back_the_same_registry_and_a_second_apply_changes_nothing(
    stack: Stack, settings: Settings, topic: str
) -> None:
    store = RegistryStore(settings, topic=topic)
    reg = load_registry(CAMPUS)
    first = store.apply(reg)
    assert len(first.added) == 1 + 20 + 7 + 17 and not first.changed and not first.removed
    assert store.apply(reg).empty
    back = store.read()
    assert {t.ref for t in back.tables} == {t.ref for t in reg.tables}
    assert set(back.interests) == set(reg.interests)
    assert back.listener("LDAP") == reg.listener("LDAP")


def test_an_interest_added_later_reaches_a_running_reader_without_restart(
    stack: Stack, settings: Settings, topic: str
) -> None:
    store = RegistryStore(settings, topic=topic)
    reg = load_registry(CAMPUS)
    store.apply(reg)
    reader = RegistryReader(settings, topic)
    try:
        reader.catch_up()
        assert {t.ref for t in reader.registry().tables_of("Unity")} == {"UNITY_VMAIL", "LOGINS", "PERSON/Telephone"}
        more = reg.model_copy(
            update={"interests": (*reg.interests, Interest(listener="Unity", tname="PERSON", subtype="Status"))}
        )
        change = store.apply(more)
        assert change.added == ["interest/Unity|PERSON|Status"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "PERSON/Status" not in {
            t.ref for t in reader.registry().tables_of("Unity")
        }:
            reader.poll(0.5)
        assert "PERSON/Status" in {t.ref for t in reader.registry().tables_of("Unity")}
        # and removing it again is a tombstone the reader also follows
        store.apply(reg)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "PERSON/Status" in {t.ref for t in reader.registry().tables_of("Unity")}:
            reader.poll(0.5)
        assert "PERSON/Status" not in {t.ref for t in reader.registry().tables_of("Unity")}
    finally:
        reader.close()


def test_diff_shows_what_apply_would_change(stack: Stack, settings: Settings, topic: str) -> None:
    store = RegistryStore(settings, topic=topic)
    reg = load_registry(CAMPUS)
    store.apply(reg)
    fewer = reg.model_copy(
        update={
            "listeners": tuple(x for x in reg.listeners if x.name != "CMMS"),
            "interests": tuple(i for i in reg.interests if i.listener != "CMMS"),
        }
    )
    change = store.diff(fewer)
    assert "listener/CMMS" in change.removed and not change.added
    assert all(line.startswith("- ") for line in change.lines())


def test_first_seen_provenance_is_kept_from_the_first_caller_outside_the_registry_topic(
    stack: Stack, settings: Settings, token: str
) -> None:
    own = settings.model_copy(update={"topic_prefix": f"pv{token}"})
    store = RegistryStore(own)
    first = store.record_first_seen("PERSON/Telephone", "source table campus.directory_telephone")
    again = store.record_first_seen("PERSON/Telephone", "mcq_log_update() from refresh_transfer_students")
    assert again == first
    assert [p.origin for p in store.provenance()] == ["source table campus.directory_telephone"]
    # the normaliser records it in a topic of its own: it may not write the registry's
    assert store.records() == {}
    assert {(m.key() or b"").decode() for m in read_to_end(own, f"pv{token}._provenance")} == {
        "provenance/PERSON/Telephone"
    }


def test_a_store_record_that_breaks_the_registry_is_refused_on_every_read_naming_key_and_offset(
    stack: Stack, settings: Settings, topic: str
) -> None:
    """Whoever writes the topic, what is read back is validated as a registry file is."""
    store = RegistryStore(settings, topic=topic)
    store.apply(load_registry(CAMPUS))
    reader = RegistryReader(settings, topic)
    try:
        reader.catch_up()
        assert reader.registry().listener("LDAP") is not None
        producer = Producer(settings.kafka.client_config())
        forged = {"listener": "Nobody", "tname": "PERSON", "subtype": "*"}
        producer.produce(topic, key=b"interest/Nobody|PERSON|*", value=json.dumps(forged).encode())
        producer.produce(topic, key=b"listener/Unity", value=b"{not json")
        best = load_registry(CAMPUS).listener("BEST")
        assert best is not None
        producer.produce(topic, key=b"listener/Applix", value=json.dumps(best.model_dump(mode="json")).encode())
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and reader.records.get("listener/Applix", {}).get("name") != "BEST":
            reader.poll(0.5)
        with pytest.raises(RegistryStoreInvalid) as err:
            reader.registry()
        problems = err.value.problems
        assert any("'listener/Unity' (offset" in p and "not a JSON object" in p for p in problems), problems
        assert any("'listener/Applix'" in p and "holds the definition of 'listener/BEST'" in p for p in problems)
        with pytest.raises(RegistryStoreInvalid):
            store.read()
        # once the bad records are gone (tombstones), the next read is valid again
        campus = load_registry(CAMPUS)
        for name in ("Unity", "Applix"):
            listener = campus.listener(name)
            assert listener is not None
            producer.produce(topic, key=f"listener/{name}".encode(), value=json.dumps(listener.model_dump(mode="json")))
        assert producer.flush(30) == 0
        with pytest.raises(RegistryStoreInvalid) as err:
            store.read()
        [unknown] = err.value.problems
        assert "'interest/Nobody|PERSON|*' (offset" in unknown and "unknown listener 'Nobody'" in unknown
        producer.produce(topic, key=b"interest/Nobody|PERSON|*", value=None)
        assert producer.flush(30) == 0
        assert store.read().listener("Unity") is not None
    finally:
        reader.close()


def _mcq(prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCQ_TOPIC_PREFIX": prefix}
    return subprocess.run(
        [sys.executable, "-m", "mcq.cli", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_two_registries_applied_under_two_prefixes_keep_separate_stores(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    """Two deployments on one cluster: applying the second registry leaves the first whole,
    and each prefix's readers (listeners, the normaliser's provenance) see only their own."""
    campus, small = f"ra{token}", f"rb{token}"
    reg = load_registry(CAMPUS)
    other = tmp_path / "other.yaml"
    text = CAMPUS.read_text()
    other.write_text(text[: text.index("\nlisteners:")] + "\nlisteners: []\ninterests: []\n")
    assert _mcq(campus, "registry", "apply", str(CAMPUS)).returncode == 0
    applied = _mcq(small, "registry", "apply", str(other))
    assert applied.returncode == 0, applied.stderr
    assert not any(line.startswith("- ") for line in applied.stdout.splitlines())  # nothing of campus's removed
    first = RegistryStore(settings.model_copy(update={"topic_prefix": campus})).read()
    second = RegistryStore(settings.model_copy(update={"topic_prefix": small})).read()
    assert {x.name for x in first.listeners} == {x.name for x in reg.listeners}
    assert set(first.interests) == set(reg.interests)
    assert not second.listeners and {t.ref for t in second.tables} == {t.ref for t in reg.tables}
    RegistryStore(settings.model_copy(update={"topic_prefix": small})).record_first_seen("LOGINS", "test")
    assert not RegistryStore(settings.model_copy(update={"topic_prefix": campus})).provenance()
    shown = _mcq(campus, "registry", "show")
    assert shown.returncode == 0 and "LDAP" in shown.stdout
    assert "LDAP" not in _mcq(small, "registry", "show").stdout
