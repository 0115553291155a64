"""Versions of a typed resource: one CRD with every version, and ConversionReviews answered."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from trioperator import typed

GROUP = "conversion.example.com"


class SpecV1(msgspec.Struct, kw_only=True):
    size: str  # "3 gadgets"


class SpecV2(msgspec.Struct, kw_only=True):
    count: int
    unit: str = "gadgets"


class SpecV3(msgspec.Struct, kw_only=True):
    amount: dict[str, int]


class Status(msgspec.Struct, kw_only=True, omit_defaults=True):
    ready: bool = False


@typed.resource(GROUP, "v1", kind="Gizmo", storage=True)
class GizmoV1(msgspec.Struct, kw_only=True):
    spec: SpecV1
    status: Status | None = None


@typed.resource(GROUP, "v2", kind="Gizmo")
class GizmoV2(msgspec.Struct, kw_only=True):
    spec: SpecV2
    status: Status | None = None


@typed.resource(GROUP, "v3", kind="Gizmo", served=False)
class GizmoV3(msgspec.Struct, kw_only=True):
    spec: SpecV3
    status: Status | None = None


@typed.conversion(GizmoV1, GizmoV2)
def v1_to_v2(obj: GizmoV1) -> GizmoV2:
    count, unit = obj.spec.size.split(" ", 1)
    return GizmoV2(spec=SpecV2(count=int(count), unit=unit), status=obj.status)


@typed.conversion(GizmoV2, GizmoV1)
def v2_to_v1(obj: GizmoV2) -> GizmoV1:
    return GizmoV1(spec=SpecV1(size=f"{obj.spec.count} {obj.spec.unit}"), status=obj.status)


@typed.conversion(GizmoV2, GizmoV3)
def v2_to_v3(obj: GizmoV2) -> GizmoV3:
    return GizmoV3(spec=SpecV3(amount={obj.spec.unit: obj.spec.count}), status=obj.status)


METADATA = {
    "name": "g1",
    "namespace": "ns",
    "uid": "u1",
    "resourceVersion": "7",
    "labels": {"a": "b"},
}
STORED: dict[str, Any] = {
    "apiVersion": f"{GROUP}/v1",
    "kind": "Gizmo",
    "metadata": METADATA,
    "spec": {"size": "3 gadgets"},
    "status": {"ready": True, "create_fn": {"done": 1}, "kopf": {"progress": {}}},
}


def _review(objects: list[dict[str, Any]], desired: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "r-1", "desiredAPIVersion": desired, "objects": objects},
    }


def test_one_crd_holds_every_version_with_one_stored() -> None:
    (crd,) = typed.crd_manifests([GizmoV1, GizmoV2, GizmoV3])
    assert crd["metadata"]["name"] == f"gizmos.{GROUP}"
    versions = crd["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        ("v1", True, True),
        ("v2", True, False),
        ("v3", False, False),
    ]
    specs = [v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"] for v in versions]
    assert [sorted(spec) for spec in specs] == [["size"], ["count", "unit"], ["amount"]]


def test_versions_must_agree_and_one_must_be_stored() -> None:
    @typed.resource(GROUP, "v1", kind="Other", plural="others")
    class OtherV1(msgspec.Struct):
        spec: SpecV1

    @typed.resource(GROUP, "v2", kind="Other", plural="others")
    class OtherV2(msgspec.Struct):
        spec: SpecV2

    @typed.resource(GROUP, "v2", kind="Other", plural="others", scope="Cluster", storage=True)
    class OtherClusterV2(msgspec.Struct):
        spec: SpecV2

    with pytest.raises(
        typed.SchemaError, match=r"exactly one version must be stored \(storage=True\), not none"
    ):
        typed.crd_manifest(OtherV1, OtherV2)
    with pytest.raises(typed.SchemaError, match="need the same group, kind, names and scope"):
        typed.crd_manifest(OtherV1, OtherClusterV2)
    with pytest.raises(typed.SchemaError, match="a version is declared twice"):
        typed.crd_manifest(OtherV2, OtherV2)


def test_a_stored_object_read_in_another_version_and_back() -> None:
    review = typed.convert_review(_review([STORED], f"{GROUP}/v2"))
    assert review["apiVersion"] == "apiextensions.k8s.io/v1"
    assert review["kind"] == "ConversionReview"
    response = review["response"]
    assert response["uid"] == "r-1"
    assert response["result"] == {"status": "Success"}
    (as_v2,) = response["convertedObjects"]
    assert as_v2["apiVersion"] == f"{GROUP}/v2"
    assert as_v2["metadata"] == METADATA  # untouched, as the API server requires
    assert as_v2["spec"] == {"count": 3, "unit": "gadgets"}
    # The framework's records in the status survive the conversion.
    assert as_v2["status"] == {"ready": True, "create_fn": {"done": 1}, "kopf": {"progress": {}}}

    (back,) = typed.convert_review(_review([as_v2], f"{GROUP}/v1"))["response"]["convertedObjects"]
    assert back == STORED


def test_conversions_chain_and_same_versions_pass_through() -> None:
    as_v3 = typed.convert_object(STORED, f"{GROUP}/v3")  # v1 -> v2 -> v3
    assert as_v3["spec"] == {"amount": {"gadgets": 3}}
    assert typed.convert_object(STORED, f"{GROUP}/v1") == STORED


@pytest.mark.parametrize(
    ("obj", "desired", "message"),
    [
        (STORED, f"{GROUP}/v9", "No model of Gizmo in conversion.example.com/v9"),
        (
            {**STORED, "apiVersion": f"{GROUP}/v3"},
            f"{GROUP}/v1",
            "No conversion of gizmos.conversion.example.com from v3 to v1",
        ),
        (
            {**STORED, "spec": {"size": 3}},
            f"{GROUP}/v2",
            "Expected `str`, got `int` (at Gizmo.spec.size)",
        ),
        ({**STORED, "spec": {"size": "three"}}, f"{GROUP}/v2", "from v1 to v2 failed: ValueError"),
        ({"metadata": METADATA}, f"{GROUP}/v2", "without apiVersion and kind"),
    ],
)
def test_failures_are_answered_with_the_reason(
    obj: dict[str, Any], desired: str, message: str
) -> None:
    response = typed.convert_review(_review([STORED, obj], desired))["response"]
    assert response["result"]["status"] == "Failure"
    assert message in response["result"]["message"]
    assert response["convertedObjects"] == []


def test_conversions_are_between_versions_of_one_resource() -> None:
    with pytest.raises(TypeError, match="same version"):
        typed.conversion(GizmoV1, GizmoV1)
    with pytest.raises(TypeError, match="resource models"):
        typed.conversion(SpecV1, GizmoV1)
