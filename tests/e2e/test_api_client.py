"""The API client for operator code against the real kube-apiserver: every operation on
ConfigMaps, Deployments and a custom resource (server-side apply with a field manager's
conflict, then force; status and scale subresources), and the ``api`` kwarg of a running
operator's trio, asyncio-flavoured and sync handlers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trioperator as kopf

from tests.e2e.conftest import EXAMPLES, Kubectl, start_trioperator


def _managers(obj: dict[str, Any]) -> set[str]:
    return {entry["manager"] for entry in obj["metadata"].get("managedFields", [])}


async def test_configmaps_every_operation(kubeconfig: Path, namespace: str) -> None:
    async with kopf.connect_api(str(kubeconfig)) as api:
        cms = api.resource("configmaps")
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": namespace},
            "data": {"a": "1"},
        }
        created = await cms.create(body, field_manager="e2e-create")
        assert created["data"] == {"a": "1"}
        got = await cms.get("cm", namespace=namespace)
        assert got["metadata"]["uid"] == created["metadata"]["uid"]

        merged = await cms.patch("cm", {"data": {"b": "2"}}, namespace=namespace)
        assert merged["data"] == {"a": "1", "b": "2"}
        ops = [{"op": "remove", "path": "/data/a"}]
        patched = await cms.patch("cm", ops, type="json", namespace=namespace)
        assert patched["data"] == {"b": "2"}
        strategic = await cms.patch(
            "cm", {"data": {"c": "3"}}, type="strategic", namespace=namespace
        )
        assert strategic["data"] == {"b": "2", "c": "3"}

        listed = await cms.list(namespace=namespace, field_selector={"metadata.name": "cm"})
        assert [o["metadata"]["name"] for o in listed] == ["cm"]
        assert listed.resource_version

        await cms.delete("cm", namespace=namespace, propagation_policy="Background")
        with pytest.raises(kopf.APINotFoundError):
            await cms.get("cm", namespace=namespace)


async def test_server_side_apply_conflicts_then_force(kubeconfig: Path, namespace: str) -> None:
    async with kopf.connect_api(str(kubeconfig)) as api:
        cms = api.resource("v1", "configmaps")
        intent = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "applied", "namespace": namespace},
            "data": {"key": "mine"},
        }
        applied = await cms.apply(intent, field_manager="trioperator-e2e")
        assert applied["data"] == {"key": "mine"}
        assert "trioperator-e2e" in _managers(applied)

        theirs = {**intent, "data": {"key": "theirs"}}
        with pytest.raises(kopf.APIFieldConflictError) as info:
            await cms.apply(theirs, field_manager="another-manager")
        assert info.value.status == 409
        assert [(c.field, c.manager) for c in info.value.conflicts] == [
            (".data.key", "trioperator-e2e")
        ]
        assert (await cms.get("applied", namespace=namespace))["data"] == {"key": "mine"}

        forced = await cms.apply(theirs, field_manager="another-manager", force=True)
        assert forced["data"] == {"key": "theirs"}
        assert "another-manager" in _managers(forced)

        # Applying the same intent again changes nothing (it is idempotent).
        again = await cms.apply(theirs, field_manager="another-manager")
        assert again["metadata"]["resourceVersion"] == forced["metadata"]["resourceVersion"]


def _deployment(namespace: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "example.invalid/main:1"},
                        {"name": "side", "image": "example.invalid/side:1"},
                    ]
                },
            },
        },
    }


async def test_deployments_apply_patch_scale_and_status(kubeconfig: Path, namespace: str) -> None:
    async with kopf.connect_api(str(kubeconfig)) as api:
        deployments = api.resource("apps", "v1", "deployments")
        await deployments.apply(_deployment(namespace), field_manager="trioperator-e2e")

        # A strategic merge patch merges containers by name: "side" stays.
        image = {"spec": {"template": {"spec": {"containers": [
            {"name": "main", "image": "example.invalid/main:2"},
        ]}}}}  # fmt: skip
        patched = await deployments.patch("web", image, type="strategic", namespace=namespace)
        containers = patched["spec"]["template"]["spec"]["containers"]
        assert [(c["name"], c["image"]) for c in containers] == [
            ("main", "example.invalid/main:2"),
            ("side", "example.invalid/side:1"),
        ]

        scale = await deployments.scale("web", 3, namespace=namespace)
        assert scale["kind"] == "Scale"
        assert scale["spec"]["replicas"] == 3
        read = await deployments.get("web", namespace=namespace, subresource="scale")
        assert read["spec"]["replicas"] == 3
        assert (await deployments.get("web", namespace=namespace))["spec"]["replicas"] == 3

        # The image now belongs to who patched it: applying our first intent again conflicts
        # with that manager, until forced.
        with pytest.raises(kopf.APIFieldConflictError) as info:
            await deployments.apply(_deployment(namespace, 1), field_manager="trioperator-e2e")
        fields = {c.field for c in info.value.conflicts}
        assert '.spec.template.spec.containers[name="main"].image' in fields
        assert info.value.managers == {"trioperator"}  # the default manager, from the User-Agent
        forced = await deployments.apply(
            _deployment(namespace, 1), field_manager="trioperator-e2e", force=True
        )
        assert forced["spec"]["replicas"] == 1
        main = forced["spec"]["template"]["spec"]["containers"][0]
        assert main["image"] == "example.invalid/main:1"

        status = {"status": {"observedGeneration": 1, "replicas": 0}}
        await deployments.patch("web", status, namespace=namespace, subresource="status")
        written = await deployments.get("web", namespace=namespace, subresource="status")
        assert written["status"]["observedGeneration"] == 1

        await deployments.delete("web", namespace=namespace, propagation_policy="Foreground")


async def test_a_custom_resource(kubeconfig: Path, example_crd: None, namespace: str) -> None:
    async with kopf.connect_api(str(kubeconfig)) as api:
        kex = api.resource("kopfexamples")
        body = {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "metadata": {"name": "ex", "namespace": namespace},
            "spec": {"field": "value"},
        }
        created = await kex.create(body)
        await kex.patch("ex", {"status": {"phase": "Ready"}}, namespace=namespace,
                        subresource="status")  # fmt: skip
        assert (await kex.get("ex", namespace=namespace))["status"] == {"phase": "Ready"}

        await kex.apply(
            {**body, "spec": {"field": "applied"}}, field_manager="trioperator-e2e", force=True
        )
        with pytest.raises(kopf.APIFieldConflictError) as info:
            await kex.apply({**body, "spec": {"field": "other"}}, field_manager="someone-else")
        # Also the creator's default manager (from the User-Agent: "trioperator"), which wrote
        # the same value of the field (sharing it) with the status.
        assert "trioperator-e2e" in info.value.managers
        assert {c.field for c in info.value.conflicts} == {".spec.field"}
        assert (await kex.get("ex", namespace=namespace))["spec"] == {"field": "applied"}

        with pytest.raises(kopf.APIConflictError):
            await kex.delete("ex", namespace=namespace, uid="00000000-0000-0000-0000-000000000000")
        await kex.delete("ex", namespace=namespace, uid=created["metadata"]["uid"])
        assert await kex.delete("ex", namespace=namespace, missing_ok=True) is None


def test_the_sync_client_from_a_script(kubeconfig: Path, namespace: str) -> None:
    with kopf.connect_sync_api(str(kubeconfig)) as api:
        cms = api.resource("cm")
        cms.apply(
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "sync", "namespace": namespace}, "data": {"k": "v"}},
            field_manager="trioperator-e2e",
        )  # fmt: skip
        assert cms.get("sync", namespace=namespace)["data"] == {"k": "v"}
        cms.delete("sync", namespace=namespace)


OPERATOR = """
import trioperator as kopf


def child(name, body):
    made = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"made-by": name}}
    kopf.adopt(made, owner=body)
    return made


@kopf.on.create("kopfexamples", id="trio_fn", flavor="trio")
async def trio_fn(api, body, **_):
    await api.resource("configmaps").apply(child("from-trio", body), field_manager="e2e-op")


@kopf.on.create("kopfexamples", id="asyncio_fn", flavor="asyncio")
async def asyncio_fn(api, body, **_):
    import asyncio
    await asyncio.sleep(0)
    await api.resource("configmaps").create(child("from-asyncio", body))


@kopf.on.create("kopfexamples", id="sync_fn")
def sync_fn(api, body, **_):
    api.resource("configmaps").create(child("from-sync", body))
"""


def test_handlers_of_every_flavor_create_children(
    tmp_path: Path, example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    script = tmp_path / "api_operator.py"
    script.write_text(OPERATOR)
    operator = start_trioperator(run_operator, "--standalone", "-n", namespace, str(script))
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    for handler in ("trio_fn", "asyncio_fn", "sync_fn"):
        operator.wait_for(f"Handler '{handler}' succeeded.")
    owner = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    for name in ("from-trio", "from-asyncio", "from-sync"):
        made = kubectl.get("configmap", name, "-n", namespace)
        assert made["data"] == {"made-by": name}
        [reference] = made["metadata"]["ownerReferences"]
        assert reference["uid"] == owner["metadata"]["uid"]
    assert operator.stop() == 0
