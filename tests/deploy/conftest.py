"""The chart is rendered by a real ``helm`` (built from its Go module by ``make helm``) and
checked against the Kubernetes API schemas offline (PyPI's kubernetes-validate)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "mcq"
CAMPUS = ROOT / "examples" / "campus.yaml"

# helm built by `go install` (no release ldflags) assumes Kubernetes v1.20: say which one
K8S_VERSION = "1.33.0"  # a current Kubernetes; kubernetes-validate ships its schemas

Render = Callable[..., list[dict[str, Any]]]


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if args[0] in ("template", "lint"):
        args = (args[0], "--kube-version", K8S_VERSION, *args[1:])
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def render(helm: Path) -> Render:
    """``helm template`` of the chart with these values files and --set pairs, as documents."""

    def _render(*values: Path, sets: tuple[str, ...] = (), release: str = "campus") -> list[dict[str, Any]]:
        args = ["template", release, str(CHART), "--namespace", "idm"]
        for file in values:
            args += ["-f", str(file)]
        for pair in sets:
            args += ["--set", pair]
        done = run_helm(helm, *args)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    return _render
