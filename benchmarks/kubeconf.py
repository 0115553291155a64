"""Connection details for the benchmark's own clients, from a kubeconfig.

Used by the harness (run.py, under trio with httpx2) and by the load generator (load.py, which
may also run in Kopf's venv with aiohttp), so it needs only the standard library and PyYAML.
Deliberately small: a token or a client certificate, a CA or ``insecure-skip-tls-verify``.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

import yaml


@dataclasses.dataclass(frozen=True)
class Cluster:
    server: str
    token: str | None
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    insecure: bool
    default_namespace: str

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def ssl_context(self) -> ssl.SSLContext:
        if self.insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def kubeconfig_path() -> str:
    path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config"
    return os.path.expanduser(path)


def load_cluster(path: str | None = None, *, tmp_dir: str | None = None) -> Cluster:
    """Read the current context of a kubeconfig. Inline certificates go to files in tmp_dir."""
    path = path or kubeconfig_path()
    base = Path(path).resolve().parent
    with open(path, encoding="utf-8") as file:
        config: dict[str, Any] = yaml.safe_load(file) or {}

    def pick(section: str, name: str | None) -> dict[str, Any]:
        for entry in config.get(section) or []:
            if name is None or entry.get("name") == name:
                return dict(entry.get(section[:-1]) or {})
        raise ValueError(f"{path}: no {section[:-1]} named {name!r}")

    context = pick("contexts", config.get("current-context"))
    cluster = pick("clusters", context.get("cluster"))
    user = pick("users", context.get("user"))
    tmp = Path(tmp_dir) if tmp_dir else None

    def scratch() -> Path:
        nonlocal tmp
        if tmp is None:  # only when the kubeconfig has inline certificates; the caller's to remove
            tmp = Path(tempfile.mkdtemp(prefix="bench-kubeconf-"))
        return tmp

    def materialise(data_key: str, file_key: str, section: dict[str, Any], name: str) -> str | None:
        if section.get(data_key):
            target = scratch() / name
            target.write_bytes(base64.b64decode(section[data_key]))
            target.chmod(0o600)
            return str(target)
        if section.get(file_key):
            return str((base / os.path.expanduser(section[file_key])).resolve())
        return None

    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(base / user["tokenFile"]).read_text().strip()
    return Cluster(
        server=str(cluster["server"]).rstrip("/"),
        token=token,
        ca_file=materialise(
            "certificate-authority-data", "certificate-authority", cluster, "ca.crt"
        ),
        cert_file=materialise("client-certificate-data", "client-certificate", user, "client.crt"),
        key_file=materialise("client-key-data", "client-key", user, "client.key"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        default_namespace=str(context.get("namespace") or "default"),
    )


GROUP = "bench.trioperator.dev"
VERSION = "v1"
PLURAL = "benchobjects"
KIND = "BenchObject"


def collection_path(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def object_path(namespace: str, name: str, subresource: str | None = None) -> str:
    path = f"{collection_path(namespace)}/{name}"
    return f"{path}/{subresource}" if subresource else path


def make_object(namespace: str, name: str, index: int) -> dict[str, Any]:
    """A small but not trivial object: a few labels and a spec of a dozen fields."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": "bench", "batch": name.rsplit("-", 1)[0]},
        },
        "spec": {
            "index": index,
            "replicas": 1 + index % 5,
            "image": f"registry.example.com/bench/app:v{index % 37}",
            "items": [f"item-{index}-{i}" for i in range(5)],
            "config": {"mode": "fast" if index % 2 else "safe", "retries": index % 7},
        },
    }
