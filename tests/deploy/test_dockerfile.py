"""The image's Dockerfile (images cannot be built on these machines: the file is checked):
base images pinned, the runtime stage non-root, nothing secret baked in, every file it
copies present, the CLI as entry point."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.deploy.conftest import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()
LINES = [
    line.strip() for line in DOCKERFILE.replace("\\\n", " ").splitlines() if line.strip() and not line.startswith("#")
]
ARGS = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE, re.MULTILINE))


def _stages() -> list[list[str]]:
    stages: list[list[str]] = []
    for line in LINES:
        if line.startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_every_base_image_is_pinned_by_version_or_digest() -> None:
    froms = [line.split()[1] for line in LINES if line.startswith("FROM ")]
    assert len(froms) >= 2, "multi-stage"
    for ref in froms:
        image = ARGS.get(ref.strip("${}"), ref)
        if ref.startswith("${"):
            assert ref.strip("${}") in ARGS, f"{ref}: an ARG without a default"
        elif ":" not in ref and "@" not in ref:
            continue  # a stage name (FROM jvm AS …) would be one; none is used so far
        assert "@sha256:" in image or re.search(r":\d+(\.\d+){2}", image), f"{image}: not pinned to a version"
        assert ":latest" not in image


def test_the_runtime_stage_runs_as_a_numeric_non_root_user() -> None:
    final = _stages()[-1]
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users, "the last stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, users[-1]
    entry = [line for line in final if line.startswith("ENTRYPOINT")]
    assert entry and '"mcq"' in entry[-1]


def test_no_secret_is_baked_into_the_image() -> None:
    for line in LINES:
        if line.startswith(("ENV ", "ARG ", "LABEL ")):
            assert not re.search(r"PASSWORD|SECRET|TOKEN|_KEY\b", line, re.IGNORECASE), line
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    first = next(x for x in ignore if x and not x.startswith("#"))
    assert first == "*", ".dockerignore starts by excluding everything (no .mcq/, .venv/, keys in the context)"


def test_every_file_the_image_copies_from_the_context_exists() -> None:
    for line in LINES:
        if line.startswith("COPY ") and "--from=" not in line:
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile: COPY {source}: not in the repository"


def test_the_spark_application_file_runs_the_normaliser() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "streams" / "submit.py"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "Normalise raw Debezium topics" in done.stdout
