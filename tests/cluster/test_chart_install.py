"""The chart installed for real on a Kubernetes API server (``mcq stack up --with
kubernetes``: a kube-apiserver built from the Kubernetes Go module, on Debian's etcd), not
only rendered: every object goes through the server's schemas, the CRDs' validation and
admission, with Strimzi's (v1) and the Spark operator's CRDs installed (``crds/``).

There is no kubelet: objects are stored, no pod runs. The setup hook's Job is therefore
installed with ``--no-hooks`` left out of the wait, and submitted on its own as a
server-side dry run (admitted, not stored)."""

from __future__ import annotations

import copy
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcq.config import Settings
from tests.cluster.kube import CRDS, KubeApi
from tests.support.chart import CAMPUS, CHART, OPERATOR_VALUES, write_values

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kube(kubernetes: Path, settings: Settings) -> Iterator[KubeApi]:
    api = KubeApi(settings)
    api.install_crds(sorted(CRDS.glob("*.yaml")))
    yield api
    api.close()


def _helm(helm: Path, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


def _values(registry: Path, out: Path) -> Path:
    """``mcq helm values REGISTRY --strimzi``, as an operator runs it."""
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "mcq"), "helm", "values", str(registry), "--strimzi"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out.write_text(done.stdout)
    return out


def _mine(out: Path) -> Path:
    """An operator's own values (tests/support/chart.py), with KEDA on the LDAP listener."""
    values = copy.deepcopy(OPERATOR_VALUES)
    values["listenerOverrides"]["LDAP"]["keda"] = {"enabled": True, "maxReplicas": 3}
    return write_values(out, values)


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _stored(kube: KubeApi, namespace: str, docs: list[dict[str, Any]]) -> dict[str, int]:
    """Each object's GET status on the server, by kind/name."""
    return {
        f"{d['kind']}/{d['metadata']['name']}": kube.get(
            d["apiVersion"], d["kind"], namespace, d["metadata"]["name"]
        ).status_code
        for d in docs
    }


def _registry_changed(tmp_path: Path) -> Path:
    """The campus registry with its ADSI listener removed and a new real-time one, Badges."""
    registry = yaml.safe_load(CAMPUS.read_text())
    registry["listeners"] = [entry for entry in registry["listeners"] if entry["name"] != "ADSI"]
    registry["interests"] = [entry for entry in registry["interests"] if entry["listener"] != "ADSI"]
    registry["listeners"].append({"name": "Badges", "owner": "security@campus.example",
                                  "adapter": {"type": "log"}})  # fmt: skip
    registry["interests"].append({"listener": "Badges", "tname": registry["tables"][0]["tname"]})
    out = tmp_path / "campus-changed.yaml"
    out.write_text(yaml.safe_dump(registry, sort_keys=False))
    return out


def _install_args(kube: KubeApi, tmp_path: Path) -> list[str]:
    """A fresh namespace, the values an operator installs the campus with: helm's arguments."""
    namespace = f"mcq-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(namespace)
    generated, mine = _values(CAMPUS, tmp_path / "values-registry.yaml"), _mine(tmp_path / "my-values.yaml")
    return ["campus", str(CHART), "--namespace", namespace, "-f", str(generated), "-f", str(mine)]


def test_the_chart_installs_on_a_real_api_server_and_a_registry_change_upgrades_it(
    kube: KubeApi, kubernetes: Path, helm: Path, tmp_path: Path
) -> None:
    args = _install_args(kube, tmp_path)
    namespace, mine = args[3], Path(args[-1])
    done = _helm(helm, kubernetes, "install", *args, "--no-hooks")
    assert done.returncode == 0, done.stderr
    manifest = _docs(_helm(helm, kubernetes, "get", "manifest", "campus", "-n", namespace).stdout)
    kinds = {d["kind"] for d in manifest}
    assert {"Deployment", "CronJob", "Service", "KafkaConnector", "KafkaUser", "KafkaTopic", "ServiceAccount",
            "NetworkPolicy", "PrometheusRule", "ServiceMonitor", "ScaledObject", "TriggerAuthentication",
            "PersistentVolumeClaim"} <= kinds, kinds  # fmt: skip
    stored = _stored(kube, namespace, manifest)
    assert set(stored.values()) == {200}, {k: v for k, v in stored.items() if v != 200}
    connector = next(d for d in manifest if d["kind"] == "KafkaConnector")
    assert connector["apiVersion"] == "kafka.strimzi.io/v1"

    hooks = _docs(_helm(helm, kubernetes, "get", "hooks", "campus", "-n", namespace).stdout)
    assert any(d["kind"] == "Job" for d in hooks), hooks
    for doc in hooks:  # admitted as they would be created, not stored (no kubelet to run them)
        answer = kube.create(doc, namespace, dry_run=True)
        assert answer.status_code == 201, f"{doc['kind']}/{doc['metadata']['name']}: {answer.text[:800]}"

    changed = _values(_registry_changed(tmp_path), tmp_path / "values-registry-changed.yaml")
    args = ["campus", str(CHART), "--namespace", namespace, "-f", str(changed), "-f", str(mine)]
    done = _helm(helm, kubernetes, "upgrade", *args, "--set", "normalizer.standby=true", "--no-hooks")
    assert done.returncode == 0, done.stderr
    after = _docs(_helm(helm, kubernetes, "get", "manifest", "campus", "-n", namespace).stdout)
    stored = _stored(kube, namespace, after)
    assert set(stored.values()) == {200}, {k: v for k, v in stored.items() if v != 200}
    assert "Deployment/campus-listener-badges" in stored
    assert "Deployment/campus-normalizer-standby" in stored  # a warm standby added by the upgrade
    gone = kube.get("apps/v1", "Deployment", namespace, "campus-listener-adsi")
    assert gone.status_code == 404, "the removed listener's Deployment is still there"
    gone = kube.get("kafka.strimzi.io/v1", "KafkaUser", namespace, "mcq-listener-adsi")
    assert gone.status_code == 404, "the removed listener's KafkaUser (its access) is still there"


def test_the_normaliser_as_a_spark_application_is_admitted_by_the_spark_operators_crd(
    kube: KubeApi, kubernetes: Path, helm: Path, tmp_path: Path
) -> None:
    args = _install_args(kube, tmp_path)
    done = _helm(helm, kubernetes, "install", *args, "--set", "normalizer.kind=sparkApplication",
                 "--set", "normalizer.checkpoint.existingClaim=mcq-checkpoint", "--no-hooks")  # fmt: skip
    assert done.returncode == 0, done.stderr
    app = kube.get("sparkoperator.k8s.io/v1beta2", "SparkApplication", args[3], "campus-normalizer")
    assert app.status_code == 200, app.text[:500]
