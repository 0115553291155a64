"""Two back ends for the same contract scenarios: the in-process FakeAPI and a real kube-apiserver.

``backend`` is parametrised: ``fake`` runs a fresh :class:`FakeAPI` in the test's own nursery;
``real`` (marked ``e2e``) talks to the kube-apiserver whose kubeconfig is in
``$TRIOPERATOR_KUBECONFIG``, or which ``scripts/kube-up`` starts (or reuses) once per session.
Each test gets its own namespace; the test CRD is created once per session on the real server
and per test on the fake.

Tests that depend on time take the ``clock`` fixture: a ``MockClock`` with autojump for the
fake (pytest-trio picks up any ``Clock`` among a test's arguments), real time for the real one.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pathlib
import ssl
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2 as httpx
import pytest
import trio
import trio.testing
import yaml
from trioperator.testing import FakeAPI

REPO = pathlib.Path(__file__).resolve().parents[2]

GROUP = "contract.trioperator.dev"
CRD_NAME = f"widgets.{GROUP}"
CRD_BODY: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["cwd"],
            "categories": ["contract"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                # No schema pruning to emulate: the fake does not validate custom objects.
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


# ------------------------------------------------------------------------------ the real server


@dataclasses.dataclass(frozen=True)
class Cluster:
    server: str
    ca_file: str | None
    token: str

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)


def _kubeconfig_path() -> str:
    path = os.environ.get("TRIOPERATOR_KUBECONFIG")
    if path:
        return path
    script = REPO / "scripts" / "kube-up"
    if not script.exists():
        pytest.skip("no real kube-apiserver: set TRIOPERATOR_KUBECONFIG or add scripts/kube-up")
    done = subprocess.run([str(script)], capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        pytest.fail(f"scripts/kube-up failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def _parse_kubeconfig(path: str, tmp_dir: pathlib.Path) -> Cluster:
    config = yaml.safe_load(pathlib.Path(path).read_text())
    context_name = config.get("current-context")
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    ca_file = cluster.get("certificate-authority")
    if cluster.get("certificate-authority-data"):
        ca_path = tmp_dir / "ca.crt"
        ca_path.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        ca_file = str(ca_path)
    token = user.get("token") or ""
    if not token and user.get("tokenFile"):
        token = pathlib.Path(user["tokenFile"]).read_text().strip()
    return Cluster(server=cluster["server"].rstrip("/"), ca_file=ca_file, token=token)


def _ensure_crd(client: httpx.Client) -> None:
    """Create the test CRD (or bring an existing one up to date) and wait until it is served."""
    url = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
    deadline = time.monotonic() + 60
    while True:
        current = client.get(url)
        if current.status_code == 404:
            created = client.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD_BODY
            )
            if created.status_code == 409:  # raced with a concurrent session
                continue
            created.raise_for_status()
        elif current.json()["metadata"].get("deletionTimestamp"):
            pass  # a previous CRD is still being torn down: wait for it to go
        else:
            body = current.json()
            if body["spec"]["versions"] != CRD_BODY["spec"]["versions"] or body["spec"][
                "names"
            ] != {
                **body["spec"]["names"],
                **CRD_BODY["spec"]["names"],
            }:
                body["spec"] = {**body["spec"], **CRD_BODY["spec"]}
                client.put(url, json=body).raise_for_status()
            conditions = body.get("status", {}).get("conditions") or []
            established = any(
                c["type"] == "Established" and c["status"] == "True" for c in conditions
            )
            discovery = client.get(f"/apis/{GROUP}/v1")
            if established and discovery.status_code == 200:
                names = [r["name"] for r in discovery.json()["resources"]]
                if "widgets/status" in names:
                    return
        if time.monotonic() > deadline:
            pytest.fail(f"the test CRD {CRD_NAME} did not become served in time")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    cluster = _parse_kubeconfig(_kubeconfig_path(), tmp_path_factory.mktemp("kube"))
    headers = {"Authorization": f"Bearer {cluster.token}"}
    with httpx.Client(
        base_url=cluster.server, verify=cluster.ssl_context(), headers=headers
    ) as client:
        _ensure_crd(client)
    # The CRD stays: deleting it is asynchronous on the real server and would race with the
    # next session's creation. Test namespaces are deleted by each test.
    return cluster


# ------------------------------------------------------------------------------ the back ends


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclasses.dataclass
class Backend:
    """One API server as the scenarios see it: an HTTP client plus a few helpers."""

    name: str
    client: httpx.AsyncClient
    namespace: str
    token: str
    api: FakeAPI | None = None

    @property
    def is_fake(self) -> bool:
        return self.api is not None

    def cm_path(self, name: str | None = None) -> str:
        base = f"/api/v1/namespaces/{self.namespace}/configmaps"
        return f"{base}/{name}" if name else base

    def widget_path(self, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{GROUP}/v1/namespaces/{self.namespace}/widgets"
        path = f"{base}/{name}" if name else base
        return f"{path}/{subresource}" if subresource else path

    @staticmethod
    def widget(name: str, **fields: Any) -> dict[str, Any]:
        metadata = fields.pop("metadata", {})
        return {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": name, **metadata},
            **fields,
        }

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> httpx.Response:
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        return await self.client.request(
            method, path, content=content, headers=headers, params=params
        )

    async def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        response = await self.request(method, path, body, **kwargs)
        assert response.status_code < 300, (
            f"{method} {path}: {response.status_code} {response.text}"
        )
        result: dict[str, Any] = response.json()
        return result

    async def patch(self, path: str, body: Any, content_type: str = MERGE) -> dict[str, Any]:
        return await self.ok("PATCH", path, body, content_type=content_type)

    async def watch(
        self,
        path: str,
        params: dict[str, str],
        *,
        count: int | None = None,
        seconds: float = 10,
        until: Callable[[dict[str, Any]], bool] | None = None,
        during: Callable[[], Awaitable[None]] | None = None,
    ) -> list[dict[str, Any]]:
        """Collect watch events until ``count`` arrived, ``until`` matched, or the stream ended.

        ``during`` runs concurrently once the stream's headers have arrived (e.g. the writes to
        observe); it is awaited even if the events were collected before it finished.
        """
        events: list[dict[str, Any]] = []
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                started = trio.Event()
                if during is not None:
                    nursery.start_soon(_after, started, during)
                with trio.CancelScope() as reading:
                    async with self.client.stream(
                        "GET", path, params={"watch": "true", **params}, timeout=None
                    ) as response:
                        assert response.status_code == 200, await response.aread()
                        started.set()
                        # Stop by cancelling rather than by leaving the loop: httpx's nested
                        # line/text/byte generators then finish at once instead of being
                        # garbage-collected half-way.
                        async for line in response.aiter_lines():
                            if not line.strip():
                                continue
                            events.append(json.loads(line))
                            enough = count is not None and len(events) >= count
                            if enough or (until is not None and until(events[-1])):
                                reading.cancel()
        return events


async def _after(event: trio.Event, fn: Callable[[], Awaitable[None]]) -> None:
    await event.wait()
    await fn()


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.e2e)])
def backend_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def cluster(backend_kind: str, request: pytest.FixtureRequest) -> Cluster | None:
    """The real cluster for ``real`` cases; started lazily so fake-only runs never need it."""
    if backend_kind != "real":
        return None
    real: Cluster = request.getfixturevalue("real_cluster")
    return real


@pytest.fixture
def clock(backend_kind: str) -> trio.testing.MockClock | None:
    """Autojumping mock time for the fake; ``None`` (real time) for the real server."""
    return trio.testing.MockClock(autojump_threshold=0) if backend_kind == "fake" else None


ROOT_CA_CONFIGMAP = "kube-root-ca.crt"


async def _await_cluster_objects(client: httpx.AsyncClient, namespace: str) -> None:
    """Where the cluster's controllers publish objects into every namespace (as
    kube-controller-manager does with ``kube-root-ca.crt``), wait until the new namespace has
    them: arriving later, they would show up in the middle of a test's watch."""
    publishes = await client.get(f"/api/v1/namespaces/default/configmaps/{ROOT_CA_CONFIGMAP}")
    if publishes.status_code != 200:
        return
    with trio.fail_after(30):
        while True:
            published = await client.get(
                f"/api/v1/namespaces/{namespace}/configmaps/{ROOT_CA_CONFIGMAP}"
            )
            if published.status_code == 200:
                return
            await trio.sleep(0.1)


@pytest.fixture
async def backend(cluster: Cluster | None) -> AsyncIterator[Backend]:
    namespace = _unique("contract")
    if cluster is None:
        async with (
            FakeAPI.serve() as api,
            httpx.AsyncClient(
                base_url=api.url, headers={"Authorization": "Bearer fake-token"}, timeout=30
            ) as client,
        ):
            fake = Backend("fake", client, namespace, "fake-token", api)
            await fake.ok(
                "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD_BODY
            )
            await fake.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
            yield fake
        return
    headers = {"Authorization": f"Bearer {cluster.token}"}
    async with httpx.AsyncClient(
        base_url=cluster.server, verify=cluster.ssl_context(), headers=headers, timeout=30
    ) as client:
        real = Backend("real", client, namespace, cluster.token)
        await real.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        await _await_cluster_objects(client, namespace)
        try:
            yield real
        finally:
            with trio.move_on_after(10) as cleanup:
                cleanup.shield = True
                # Without kube-controller-manager the namespace stays Terminating, but nothing
                # can be created in it any more and it is out of everyone's way.
                await client.delete(f"/api/v1/namespaces/{namespace}")
