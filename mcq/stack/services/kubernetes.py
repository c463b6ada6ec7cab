"""A Kubernetes control plane on this machine: Debian's ``etcd`` and a ``kube-apiserver``
built from the Kubernetes Go module (``make kube``), started when asked (``mcq stack up
--with kubernetes``). The chart is installed there for real (``helm install``): every
object goes through the API server's schemas, CRD validation and admission.

The API server serves HTTPS on 127.0.0.1 with the stack's server certificate (its CA is
what clients trust); one administrator logs in with a random token (``system:masters``),
written with a kubeconfig under ``MCQ_HOME/conf/kube-apiserver`` (:func:`kubeconfig`).
There is no kubelet, scheduler or controller manager: objects are admitted and stored,
no pod runs.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import urllib.error
import urllib.request
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from mcq.config import LOOPBACK, Settings
from mcq.stack.files import write_private
from mcq.stack.services.base import NotReady, Service
from mcq.stack.tls import stack_tls

KUBERNETES = "kubernetes"
"""The name ``mcq stack up --with`` takes for etcd and the API server."""
ADMIN = "mcq-admin"
SERVICE_RANGE = "10.96.0.0/16"


def kube_dir(settings: Settings) -> Path:
    return settings.stack.home / "conf" / "kube-apiserver"


def kubeconfig(settings: Settings) -> Path:
    """The administrator's kubeconfig for the local API server (what ``helm --kubeconfig`` takes)."""
    return kube_dir(settings) / "kubeconfig"


def api_server_url(settings: Settings) -> str:
    return f"https://{LOOPBACK}:{settings.stack.ports.kube_apiserver}"


def admin_token(settings: Settings) -> str:
    return (kube_dir(settings) / "admin.token").read_text().strip()


class Etcd(Service):
    """Debian's etcd, one member, the API server's only store."""

    name = "etcd"

    @property
    def marker(self) -> str:
        return f"--data-dir={self.data_dir}"

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.etcd, self.settings.stack.ports.etcd + 1)

    @property
    def address(self) -> str:
        return f"http://{LOOPBACK}:{self.settings.stack.ports.etcd}"

    def prepare(self) -> None:
        self._require(self.settings.stack.etcd, "etcd (Debian's etcd-server; `make install` installs it)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)

    def argv(self) -> list[str]:
        peer = f"http://{LOOPBACK}:{self.settings.stack.ports.etcd + 1}"
        return [
            str(self.settings.stack.etcd), "--name=mcq", self.marker, f"--listen-client-urls={self.address}",
            f"--advertise-client-urls={self.address}", f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}", f"--initial-cluster=mcq={peer}", "--log-level=warn",
        ]  # fmt: skip

    def check(self) -> None:
        try:
            with urllib.request.urlopen(f"{self.address}/health", timeout=3) as answer:
                health = json.load(answer)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise NotReady(f"/health: {exc}") from None
        if health.get("health") != "true":
            raise NotReady(f"/health: {health}")


class KubeApiServer(Service):
    """kube-apiserver against the stack's etcd, HTTPS with the stack's certificate, RBAC."""

    name = "kube-apiserver"
    depends_on = ("etcd",)

    @property
    def marker(self) -> str:
        return f"--cert-dir={self.data_dir}"

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.kube_apiserver,)

    @property
    def address(self) -> str:
        return api_server_url(self.settings)

    def prepare(self) -> None:
        self._require(self.settings.stack.kube_apiserver, "kube-apiserver (`make kube` builds it)")
        conf = kube_dir(self.settings)
        conf.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        stack_tls(self.settings).ensure()
        if not (conf / "service-account.key").exists():  # signs the service accounts' tokens
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pem = serialization.Encoding.PEM
            private = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            write_private(conf / "service-account.key", private)
            public = key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
            (conf / "service-account.pub").write_bytes(public)
        if not (conf / "admin.token").exists():
            token = secrets.token_urlsafe(32)
            write_private(conf / "admin.token", f"{token}\n".encode())
            write_private(conf / "tokens.csv", f'{token},{ADMIN},{ADMIN},"system:masters"\n'.encode())
        self._write_kubeconfig()

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "mcq", "cluster": {"server": self.address,
                                                     "certificate-authority": str(stack_tls(self.settings).ca_cert)}}],
            "users": [{"name": ADMIN, "user": {"tokenFile": str(kube_dir(self.settings) / "admin.token")}}],
            "contexts": [{"name": "mcq", "context": {"cluster": "mcq", "user": ADMIN}}],
            "current-context": "mcq",
        }  # fmt: skip
        write_private(kubeconfig(self.settings), json.dumps(config, indent=2).encode())

    def argv(self) -> list[str]:
        conf, tls = kube_dir(self.settings), stack_tls(self.settings)
        return [
            str(self.settings.stack.kube_apiserver), self.marker,
            f"--etcd-servers=http://{LOOPBACK}:{self.settings.stack.ports.etcd}",
            f"--bind-address={LOOPBACK}", f"--advertise-address={LOOPBACK}",
            f"--secure-port={self.settings.stack.ports.kube_apiserver}",
            f"--tls-cert-file={tls.server_cert}", f"--tls-private-key-file={tls.server_key}",
            f"--token-auth-file={conf / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={conf / 'service-account.pub'}",
            f"--service-account-signing-key-file={conf / 'service-account.key'}",
            f"--service-cluster-ip-range={SERVICE_RANGE}", "--v=0",
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}

    def check(self) -> None:
        context = ssl.create_default_context(cafile=str(stack_tls(self.settings).ca_cert))
        request = urllib.request.Request(
            f"{self.address}/readyz", headers={"Authorization": f"Bearer {admin_token(self.settings)}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as answer:
                body = answer.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            raise NotReady(f"/readyz: {exc}") from None
        if body.strip() != "ok":
            raise NotReady(f"/readyz: {body[:200]}")


KUBERNETES_SERVICES: tuple[type[Service], ...] = (Etcd, KubeApiServer)
