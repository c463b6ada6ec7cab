"""A few calls to the local Kubernetes API server (``mcq stack up --with kubernetes``) over
its REST API, as the administrator of its kubeconfig: install CRDs, create namespaces, read
back what helm made, and submit objects for a server-side dry run (admission without
storing). Resources are found through the server's own discovery, never a table of ours."""

from __future__ import annotations

import ssl
import time
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import yaml

from mcq.config import Settings
from mcq.stack.services.kubernetes import admin_token, api_server_url
from mcq.stack.tls import stack_tls

CRDS = Path(__file__).with_name("crds")


class KubeApi:
    def __init__(self, settings: Settings) -> None:
        self.client = httpx.Client(
            base_url=api_server_url(settings),
            headers={"Authorization": f"Bearer {admin_token(settings)}"},
            verify=ssl.create_default_context(cafile=str(stack_tls(settings).ca_cert)),
            timeout=30,
        )

    def close(self) -> None:
        self.client.close()

    @cache  # noqa: B019 - one discovery per client and group version, for the test's lifetime
    def _resources(self, api_version: str) -> dict[str, tuple[str, bool]]:
        """kind -> (resource name, namespaced) for an API group version, from discovery."""
        path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        answer = self.client.get(path)
        answer.raise_for_status()
        return {r["kind"]: (r["name"], r["namespaced"]) for r in answer.json()["resources"] if "/" not in r["name"]}

    def path(self, api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
        resources = self._resources(api_version)
        if kind not in resources:
            raise KeyError(f"{api_version} has no kind {kind}: {sorted(resources)}")
        plural, namespaced = resources[kind]
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        where = f"{base}/namespaces/{namespace}/{plural}" if namespaced and namespace else f"{base}/{plural}"
        return f"{where}/{name}" if name else where

    def create(self, doc: dict[str, Any], namespace: str | None = None, dry_run: bool = False) -> httpx.Response:
        path = self.path(doc["apiVersion"], doc["kind"], namespace)
        return self.client.post(path, json=doc, params={"dryRun": "All"} if dry_run else None)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> httpx.Response:
        return self.client.get(self.path(api_version, kind, namespace, name))

    def install_crds(self, files: list[Path]) -> list[str]:
        """Create each CRD (once: an existing one is left) and wait until it is Established."""
        names = []
        for file in files:
            for doc in yaml.safe_load_all(file.read_text()):
                if not doc:
                    continue
                answer = self.create(doc)
                if answer.status_code not in (201, 409):
                    raise AssertionError(f"{file.name}: {answer.status_code} {answer.text[:500]}")
                names.append(doc["metadata"]["name"])
        for name in names:
            self._established(name)
        self._resources.cache_clear()
        return names

    def _established(self, name: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            crd = self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name).json()
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                return
            assert time.monotonic() < deadline, f"CRD {name} not established: {conditions}"
            time.sleep(0.5)

    def create_namespace(self, name: str) -> None:
        answer = self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        assert answer.status_code == 201, answer.text
