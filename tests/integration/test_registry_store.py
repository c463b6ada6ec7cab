"""The registry at run time: a compacted topic that running readers follow."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mcq.config import Settings
from mcq.registry import Interest, load_registry
from mcq.registry.store import RegistryReader, RegistryStore
from mcq.stack import Stack
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


def test_first_seen_provenance_is_kept_from_the_first_caller(stack: Stack, settings: Settings, topic: str) -> None:
    store = RegistryStore(settings, topic=topic)
    first = store.record_first_seen("PERSON/Telephone", "source table campus.directory_telephone")
    again = store.record_first_seen("PERSON/Telephone", "mcq_log_update() from refresh_transfer_students")
    assert again == first
    assert [p.origin for p in store.provenance()] == ["source table campus.directory_telephone"]


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
