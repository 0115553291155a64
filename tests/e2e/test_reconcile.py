"""``on.reconcile`` against the real kube-apiserver: a child ConfigMap deleted by hand is
restored by its owner's reconcile handler (trioperator's own handler kind).

The operator runs in the test's own trio run (real time), so the handler can use the
operator's internal API client; the object and the deletion are made with kubectl.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import trio
import trioperator as kopf
from trioperator._client.config import load_kubeconfig
from trioperator._client.credentials import Vault
from trioperator._client.errors import APINotFoundError
from trioperator._client.resources import Resource
from trioperator._runtime.program.operator import Operator

from tests.e2e.conftest import EXAMPLES, Kubectl

CONFIGMAPS = Resource(
    group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True
)


async def _poll(check: Any, limit: float = 30) -> None:
    with trio.fail_after(limit):
        while not await check():  # noqa: ASYNC110 -- polling what the API server holds
            await trio.sleep(0.05)


async def test_owner_restores_its_child_configmap_deleted_by_hand(
    example_crd: None, kubectl: Kubectl, namespace: str, kubeconfig: Path
) -> None:
    registry = kopf.OperatorRegistry()
    vault = Vault({"kubeconfig": load_kubeconfig(str(kubeconfig))})
    operator = Operator(registry=registry, vault=vault, namespaces=[namespace])
    runs: list[bool] = []

    @kopf.on.reconcile("kopf.dev", "v1", "kopfexamples", owns=["configmaps"], registry=registry)
    async def ensure_child(body: Any, patch: Any, **_: Any) -> None:
        assert operator.api is not None
        name = f"{body['metadata']['name']}-cm"
        try:
            await operator.api.get(CONFIGMAPS, namespace=namespace, name=name)
        except APINotFoundError:
            child: dict[str, Any] = {"metadata": {"name": name}, "data": {"x": "1"}}
            kopf.adopt(child, owner=body)
            await operator.api.create(CONFIGMAPS, namespace=namespace, body=child)
            runs.append(True)
        kopf.conditions.set_condition(patch, "Ready", True, reason="ChildPresent", body=body)

    kubectl_ = functools.partial(trio.to_thread.run_sync)
    manifest = (EXAMPLES / "obj.yaml").read_text()
    await kubectl_(lambda: kubectl("apply", "-n", namespace, "-f", "-", input=manifest))

    async def child_exists() -> bool:
        out = await kubectl_(
            lambda: kubectl("get", "configmap", "kopf-example-1-cm", "-n", namespace, check=False)
        )
        return "kopf-example-1-cm" in out

    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        await _poll(child_exists)
        first = await kubectl_(
            lambda: kubectl.get("configmap", "kopf-example-1-cm", "-n", namespace)
        )
        owner = await kubectl_(
            lambda: kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
        )
        [reference] = first["metadata"]["ownerReferences"]
        assert reference["uid"] == owner["metadata"]["uid"]
        assert reference["controller"] is True
        # The condition written by the handler, as `kubectl wait` reads it.
        await kubectl_(
            lambda: kubectl(
                "wait",
                "--for=condition=Ready",
                "kopfexample/kopf-example-1",
                "-n",
                namespace,
                "--timeout=30s",
            )
        )

        started = time.monotonic()
        await kubectl_(lambda: kubectl("delete", "configmap", "kopf-example-1-cm", "-n", namespace))
        await _poll(child_exists, limit=10)
        restored_after = time.monotonic() - started
        restored = await kubectl_(
            lambda: kubectl.get("configmap", "kopf-example-1-cm", "-n", namespace)
        )
        assert restored["metadata"]["uid"] != first["metadata"]["uid"]
        assert restored["data"] == {"x": "1"}
        assert runs == [True, True]
        print(f"child restored {restored_after:.3f} s after its deletion (incl. kubectl)")
        operator.stop()
