"""The hierarchies kit on dicts, pykube-ng objects and kubernetes(_asyncio) models."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import kubernetes.client as k8s
import kubernetes_asyncio.client as k8s_async
import pykube
import pytest
import trioperator as kopf
from trioperator._runtime.handling.execution import handler_body

OWNER: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {
        "name": "owner",
        "namespace": "owner-ns",
        "uid": "uid-1",
        "labels": {"app": "demo", "tier": "db"},
    },
}
OWNER_REF = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "name": "owner",
    "uid": "uid-1",
    "controller": True,
    "blockOwnerDeletion": True,
}


@pytest.fixture
def in_handler() -> Iterator[dict[str, Any]]:
    """As if a handler of OWNER runs now (the runtime sets this around every handler)."""
    body = copy.deepcopy(OWNER)
    token = handler_body.set(kopf.Body(body))
    try:
        yield body
    finally:
        handler_body.reset(token)


# ------------------------------------------------------------------------------ references


def test_owner_reference_is_built_from_a_body() -> None:
    assert kopf.build_owner_reference(kopf.Body(OWNER)) == OWNER_REF
    assert kopf.build_owner_reference(OWNER, controller=None, block_owner_deletion=False) == {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "name": "owner",
        "uid": "uid-1",
        "blockOwnerDeletion": False,
    }


def test_object_reference_leaves_out_absent_fields() -> None:
    assert kopf.build_object_reference(OWNER) == {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "name": "owner",
        "namespace": "owner-ns",
        "uid": "uid-1",
    }
    assert kopf.build_object_reference({"kind": "Node", "metadata": {"name": "n1"}}) == {
        "kind": "Node",
        "name": "n1",
    }


# ------------------------------------------------------------------------------ dicts


def test_adopt_with_an_explicit_owner() -> None:
    child: dict[str, Any] = {"kind": "Pod"}
    kopf.adopt(child, owner=kopf.Body(OWNER))
    assert child == {
        "kind": "Pod",
        "metadata": {
            "ownerReferences": [OWNER_REF],
            "generateName": "owner-",
            "namespace": "owner-ns",
            "labels": {"app": "demo", "tier": "db"},
        },
    }


def test_adopt_defaults_to_the_object_of_the_running_handler(in_handler: Any) -> None:
    child: dict[str, Any] = {}
    kopf.adopt(child)
    assert child["metadata"]["ownerReferences"] == [OWNER_REF]
    assert child["metadata"]["generateName"] == "owner-"
    assert child["metadata"]["namespace"] == "owner-ns"


def test_adopt_keeps_what_the_child_has_unless_forced() -> None:
    def child() -> dict[str, Any]:
        return {"metadata": {"name": "mine", "namespace": "ns2", "labels": {"app": "other"}}}

    kept = child()
    kopf.adopt(kept, owner=OWNER)
    assert kept["metadata"]["name"] == "mine"
    assert "generateName" not in kept["metadata"]
    assert kept["metadata"]["namespace"] == "ns2"
    assert kept["metadata"]["labels"] == {"app": "other", "tier": "db"}

    forced = child()
    kopf.adopt(forced, owner=OWNER, forced=True)
    assert forced["metadata"]["generateName"] == "owner-"
    assert "name" not in forced["metadata"]
    assert forced["metadata"]["namespace"] == "owner-ns"
    assert forced["metadata"]["labels"] == {"app": "demo", "tier": "db"}


def test_strict_naming_uses_the_exact_name_and_drops_generate_name() -> None:
    child: dict[str, Any] = {"metadata": {"generateName": "x-"}}
    kopf.harmonize_naming(child, "exact", strict=True, forced=True)
    assert child["metadata"] == {"name": "exact"}

    fresh: dict[str, Any] = {}
    kopf.adopt(fresh, owner=OWNER, strict=True)
    assert fresh["metadata"]["name"] == "owner"
    assert "generateName" not in fresh["metadata"]


def test_harmonize_naming_without_forced_leaves_a_generate_name_alone() -> None:
    child: dict[str, Any] = {"metadata": {"generateName": "given-"}}
    kopf.harmonize_naming(child, "owner")
    assert child["metadata"] == {"generateName": "given-"}


def test_owner_reference_is_appended_once_and_removed() -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "uid-2"}
    child: dict[str, Any] = {"metadata": {"ownerReferences": [other]}}
    kopf.append_owner_reference(child, owner=OWNER)
    kopf.append_owner_reference(child, owner=OWNER)
    assert child["metadata"]["ownerReferences"] == [other, OWNER_REF]

    kopf.remove_owner_reference(child, owner=OWNER)
    assert child["metadata"]["ownerReferences"] == [other]


def test_owner_reference_flags_can_be_turned_off() -> None:
    child: dict[str, Any] = {}
    kopf.append_owner_reference(child, owner=OWNER, controller=False, block_owner_deletion=None)
    (ref,) = child["metadata"]["ownerReferences"]
    assert ref["controller"] is False
    assert "blockOwnerDeletion" not in ref


def test_an_owner_without_uid_is_refused() -> None:
    child: dict[str, Any] = {}
    with pytest.raises(ValueError, match="no uid"):
        kopf.append_owner_reference(child, owner={"kind": "X", "metadata": {"name": "x"}})
    assert child == {}


def test_label_nested_objects() -> None:
    deployment: dict[str, Any] = {
        "kind": "Deployment",
        "spec": {"template": {"metadata": {"labels": {"app": "keep"}}}},
    }
    kopf.label(deployment, {"app": "demo", "team": "x"}, nested="spec.template")
    assert deployment["metadata"]["labels"] == {"app": "demo", "team": "x"}
    assert deployment["spec"]["template"]["metadata"]["labels"] == {"app": "keep", "team": "x"}

    kopf.label(deployment, {"app": "demo"}, nested=["spec.template", "spec.absent"], forced=True)
    assert deployment["spec"]["template"]["metadata"]["labels"]["app"] == "demo"
    assert "absent" not in deployment["spec"]


def test_label_defaults_to_the_handlers_labels(in_handler: Any) -> None:
    child: dict[str, Any] = {}
    kopf.label(child)
    assert child["metadata"]["labels"] == {"app": "demo", "tier": "db"}


def test_label_accepts_kopfs_deprecated_force() -> None:
    child: dict[str, Any] = {"metadata": {"labels": {"app": "old"}}}
    kopf.label(child, {"app": "new"}, force=True)
    assert child["metadata"]["labels"] == {"app": "new"}


def test_adjust_namespace() -> None:
    children: list[dict[str, Any]] = [{}, {"metadata": {"namespace": "given"}}]
    kopf.adjust_namespace(children, "target")
    assert [child["metadata"]["namespace"] for child in children] == ["target", "given"]
    kopf.adjust_namespace(children, "target", forced=True)
    assert [child["metadata"]["namespace"] for child in children] == ["target", "target"]


def test_nested_iterables_and_generators_are_flattened() -> None:
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    c: dict[str, Any] = {}
    kopf.adopt([a, (b, [c])], owner=OWNER)
    generated: list[dict[str, Any]] = [{}, {}]
    kopf.adopt((child for child in generated), owner=OWNER)  # one pass must reach all steps
    for child in [a, b, c, *generated]:
        assert child["metadata"]["ownerReferences"] == [OWNER_REF]
        assert child["metadata"]["generateName"] == "owner-"
        assert child["metadata"]["namespace"] == "owner-ns"
        assert child["metadata"]["labels"] == {"app": "demo", "tier": "db"}


# ------------------------------------------------------------------------------ errors


def test_outside_of_a_handler_the_owner_must_be_given() -> None:
    child: dict[str, Any] = {}
    for call in (
        lambda: kopf.adopt(child),
        lambda: kopf.append_owner_reference(child),
        lambda: kopf.label(child),
        lambda: kopf.harmonize_naming(child),
        lambda: kopf.adjust_namespace(child),
    ):
        with pytest.raises(LookupError, match="no resource handler is running"):
            call()
    assert child == {}


def test_unsupported_objects_are_refused_clearly() -> None:
    with pytest.raises(TypeError, match=r"Unsupported Kubernetes object class: builtins\.int"):
        kopf.label(123, {"a": "b"})
    with pytest.raises(TypeError, match="got a str"):
        kopf.label("pod-name", {"a": "b"})
    with pytest.raises(TypeError, match="read-only mapping"):
        kopf.label(kopf.Body({"metadata": {}}), {"a": "b"})


def test_a_name_is_required_for_naming() -> None:
    with pytest.raises(LookupError, match="name must be given"):
        kopf.adopt({}, owner={"metadata": {"uid": "u"}})


def test_none_means_the_running_handlers_values(in_handler: Any) -> None:
    child: dict[str, Any] = {}
    kopf.label(child, None)
    kopf.harmonize_naming(child, None, strict=True)
    kopf.adjust_namespace(child, None)
    assert child["metadata"] == {
        "labels": {"app": "demo", "tier": "db"},
        "name": "owner",
        "namespace": "owner-ns",
    }


def test_an_empty_dict_of_labels_labels_nothing(in_handler: Any) -> None:
    child: dict[str, Any] = {}
    kopf.label(child, {})
    assert child["metadata"]["labels"] == {}


def test_adopting_by_a_cluster_scoped_owner_sets_no_namespace(in_handler: Any) -> None:
    owner = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u9"}}
    child: dict[str, Any] = {}
    kopf.adopt(child, owner=owner)  # not the running handler's namespace: the owner's (none)
    assert "namespace" not in child["metadata"]
    assert child["metadata"]["generateName"] == "n1-"
    assert child["metadata"]["labels"] == {}


# ------------------------------------------------------------------------------ libraries


def test_pykube_objects_are_edited_in_place() -> None:
    api = pykube.HTTPClient(pykube.KubeConfig.from_url("https://127.0.0.1:1"))
    pod = pykube.Pod(api, {"apiVersion": "v1", "kind": "Pod", "metadata": {}})
    kopf.adopt(pod, owner=OWNER, nested="spec.template")
    assert pod.obj["metadata"]["ownerReferences"] == [OWNER_REF]
    assert pod.obj["metadata"]["generateName"] == "owner-"
    assert pod.obj["metadata"]["namespace"] == "owner-ns"
    assert pod.obj["metadata"]["labels"] == {"app": "demo", "tier": "db"}


def test_a_pykube_object_can_be_the_owner() -> None:
    api = pykube.HTTPClient(pykube.KubeConfig.from_url("https://127.0.0.1:1"))
    owner = pykube.ConfigMap(api, copy.deepcopy(OWNER))
    child: dict[str, Any] = {}
    kopf.adopt(child, owner=owner)
    assert child["metadata"]["ownerReferences"] == [OWNER_REF]


@pytest.mark.parametrize("client", [k8s, k8s_async], ids=["kubernetes", "kubernetes_asyncio"])
def test_kubernetes_models_without_metadata(client: Any) -> None:
    pod = client.V1Pod()
    kopf.adopt(pod, owner=OWNER)
    assert isinstance(pod.metadata, client.V1ObjectMeta)
    (ref,) = pod.metadata.owner_references
    assert isinstance(ref, client.V1OwnerReference)
    assert (ref.api_version, ref.kind, ref.name, ref.uid) == (
        "kopf.dev/v1",
        "KopfExample",
        "owner",
        "uid-1",
    )
    assert ref.controller is True
    assert ref.block_owner_deletion is True
    assert pod.metadata.generate_name == "owner-"
    assert pod.metadata.name is None
    assert pod.metadata.namespace == "owner-ns"
    assert pod.metadata.labels == {"app": "demo", "tier": "db"}

    kopf.remove_owner_reference(pod, owner=OWNER)
    assert pod.metadata.owner_references == []


@pytest.mark.parametrize("client", [k8s, k8s_async], ids=["kubernetes", "kubernetes_asyncio"])
def test_kubernetes_models_keep_their_metadata_unless_forced(client: Any) -> None:
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="mine", namespace="ns2"))
    kopf.adopt(pod, owner=OWNER, strict=True)
    assert (pod.metadata.name, pod.metadata.generate_name) == ("mine", None)
    assert pod.metadata.namespace == "ns2"
    kopf.adopt(pod, owner=OWNER, strict=True, forced=True)
    assert (pod.metadata.name, pod.metadata.generate_name) == ("owner", None)
    assert pod.metadata.namespace == "owner-ns"
    assert len(pod.metadata.owner_references) == 1


@pytest.mark.parametrize("client", [k8s, k8s_async], ids=["kubernetes", "kubernetes_asyncio"])
def test_kubernetes_models_nested_by_api_field_names(client: Any) -> None:
    deployment = client.V1Deployment(
        spec=client.V1DeploymentSpec(
            selector=client.V1LabelSelector(),
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"x": "y"})),
        )
    )
    kopf.label(deployment, {"app": "demo"}, nested="spec.template")
    assert deployment.metadata.labels == {"app": "demo"}
    assert deployment.spec.template.metadata.labels == {"x": "y", "app": "demo"}
