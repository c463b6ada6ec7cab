"""The Spark driver's class-data archive (streams/jvm_archive.py, streams/jvm_options.py): which archive a JVM is
given, and that a JVM is never given a partial or stale one."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcq.config import Settings, load_settings
from streams import jvm_archive, jvm_options


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, list[Path]]:
    """A java and connector jars of a machine of its own (files only: nothing runs)."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.delenv(jvm_options.DUMP_ENV, raising=False)
    jars = [tmp_path / "jars" / "spark-sql-kafka-0-10_2.13-4.1.1.jar", tmp_path / "jars" / "kafka-clients-3.9.1.jar"]
    jars[0].parent.mkdir()
    for jar in jars:
        jar.write_bytes(b"PK")
    monkeypatch.setattr("streams.session.connector_jars", lambda _: jars)  # what build() reads
    settings = load_settings()
    stack = settings.stack.model_copy(update={"jvm_cache": tmp_path / "cache"})
    return settings.model_copy(update={"stack": stack}), jars


def _fails_leaving_nothing(
    settings: Settings, jars: list[Path], monkeypatch: pytest.MonkeyPatch, run: Callable[..., Any], error: str
) -> None:
    """A build whose runs go as ``run`` says ``error`` and leaves no file a JVM would be given."""
    monkeypatch.setattr(jvm_archive.subprocess, "run", run)
    with pytest.raises(jvm_archive.ArchiveError, match=error):
        jvm_archive.build(settings)
    assert list((settings.stack.jvm_cache / "cds").iterdir()) == []
    assert jvm_options.java_options(settings, jars) == ""


def test_without_a_built_archive_the_jvm_gets_no_archive_option(machine: tuple[Settings, list[Path]]) -> None:
    settings, jars = machine
    assert jvm_options.java_options(settings, jars) == ""


def test_a_built_archive_is_mapped_and_the_jvm_says_nothing_about_it(machine: tuple[Settings, list[Path]]) -> None:
    settings, jars = machine
    path = jvm_options.archive_path(settings, jars)
    assert path is not None and path.parent == settings.stack.jvm_cache / "cds"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    options = jvm_options.java_options(settings, jars).split()
    assert f"-XX:SharedArchiveFile={path}" in options
    assert "-Xlog:cds=off" in options and "-Xlog:cds+dynamic=off" in options


def test_a_changed_jar_or_another_jvm_names_another_archive(
    machine: tuple[Settings, list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, jars = machine
    before = jvm_options.archive_path(settings, jars)
    jars[1].write_bytes(b"PK and more")  # a jar re-resolved with other content
    after_jar = jvm_options.archive_path(settings, jars)
    other = tmp_path / "jdk21" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk21"))
    after_java = jvm_options.archive_path(settings, jars)
    libjvm = tmp_path / "jdk21" / "lib" / "server" / "libjvm.so"  # a JDK update beside the same launcher
    libjvm.parent.mkdir(parents=True)
    libjvm.write_bytes(b"\x7fELF")
    after_update = jvm_options.archive_path(settings, jars)
    assert len({before, after_jar, after_java, after_update}) == 4


def test_without_java_there_is_no_archive(
    machine: tuple[Settings, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, jars = machine
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    assert jvm_options.archive_path(settings, jars) is None
    assert jvm_options.java_options(settings, jars) == ""


def test_the_training_run_writes_the_archive_where_it_is_told(
    machine: tuple[Settings, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, jars = machine
    monkeypatch.setenv(jvm_options.DUMP_ENV, "/somewhere/x.partial")
    assert "-XX:ArchiveClassesAtExit=/somewhere/x.partial" in jvm_options.java_options(settings, jars).split()


def test_a_failed_training_run_leaves_no_archive_and_no_partial_file(
    machine: tuple[Settings, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, jars = machine

    def half_written(cmd: list[str], env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        Path(env[jvm_options.DUMP_ENV]).write_bytes(b"half an archive")  # the JVM died while writing
        return subprocess.CompletedProcess(cmd, 134, "", "# A fatal error has been detected")

    _fails_leaving_nothing(settings, jars, monkeypatch, half_written, "training run failed \\(134\\)")


def test_a_built_archive_replaces_those_of_another_java_or_class_path(
    machine: tuple[Settings, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, _ = machine
    stale = settings.stack.jvm_cache / "cds" / "spark-0123456789abcdef.jsa"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")

    def trained(cmd: list[str], env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        if "--train" in cmd:
            Path(env[jvm_options.DUMP_ENV]).write_bytes(b"a whole archive")
        else:  # the check run maps the candidate where it was written, not yet in place
            assert Path(env[jvm_options.CHECK_ENV]).read_bytes() == b"a whole archive"
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(jvm_archive.subprocess, "run", trained)
    path = jvm_archive.build(settings)
    assert path is not None and path.read_bytes() == b"a whole archive"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    calls: list[str] = []
    monkeypatch.setattr(jvm_archive.subprocess, "run", lambda *a, **k: calls.append("ran"))
    assert jvm_archive.build(settings) == path and calls == []  # built once


def test_an_archive_a_spark_start_cannot_map_is_never_put_in_place(
    machine: tuple[Settings, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, jars = machine

    def truncated(cmd: list[str], env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        if "--train" in cmd:  # the dump ended early, and its JVM still exited 0
            Path(env[jvm_options.DUMP_ENV]).write_bytes(b"the first megabyte")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.CompletedProcess(cmd, -7, "", "#  SIGBUS (0x7) at pc=0x00007f77a18bc53d")

    _fails_leaving_nothing(
        settings, jars, monkeypatch, truncated, "a Spark start on the new archive failed \\(-7\\): #  SIGBUS"
    )


def test_a_failed_build_does_not_fail_the_install(
    machine: tuple[Settings, list[Path]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, _ = machine
    monkeypatch.setattr(jvm_archive, "load_settings", lambda: settings)

    def fails(_: Settings, report: bool = True) -> Path:
        raise jvm_archive.ArchiveError("the training run failed (1): no space left on device")

    monkeypatch.setattr(jvm_archive, "build", fails)
    assert jvm_archive.main([]) == 0
    assert "no space left on device; Spark starts without an archive" in capsys.readouterr().err
