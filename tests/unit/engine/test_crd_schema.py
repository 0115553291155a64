"""Structural OpenAPI v3 schemas and CRDs from resource models (no cluster)."""

from __future__ import annotations

import datetime
import enum
import uuid
from typing import Annotated, Any, Literal

import msgspec
import pytest
from trioperator import typed
from trioperator._engine.crd_schema import KNOWN_FORMATS


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Inner(msgspec.Struct):
    """An inner thing."""

    name: str


class Named(msgspec.Struct, frozen=True):
    name: str


def _field_schema(annotation: Any, **default: Any) -> dict[str, Any]:
    """The translated schema of one field ``x`` of that type (with a default, if given)."""
    namespace: dict[str, Any] = {
        "__annotations__": {"x": annotation},
        **({"x": default["default"]} if default else {}),
    }
    cls = type("Holder", (msgspec.Struct,), namespace)
    return typed.structural_schema(cls)["properties"]["x"]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (str, {"type": "string"}),
        (bytes, {"type": "string", "format": "byte"}),
        (datetime.date, {"type": "string", "format": "date"}),
        (
            Annotated[datetime.datetime, msgspec.Meta(tz=True)],
            {"type": "string", "format": "date-time"},
        ),
        (uuid.UUID, {"type": "string", "format": "uuid"}),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, 2], {"type": "integer", "enum": [1, 2]}),
        (Color, {"type": "string", "enum": ["blue", "red"]}),
        (int | None, {"type": "integer", "nullable": True}),
        (int | str, {"x-kubernetes-int-or-string": True}),
        (int | str | None, {"x-kubernetes-int-or-string": True, "nullable": True}),
        (Any, {"x-kubernetes-preserve-unknown-fields": True}),
        (dict[str, Any], {"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (list[str], {"type": "array", "items": {"type": "string"}}),
        (list[Any], {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}}),
        (
            tuple[int, int],
            {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        ),
        (
            frozenset[str],
            {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        ),
        (
            list[Inner],
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "description": "An inner thing.",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}},
                },
            },
        ),
    ],
)
def test_types_translate_to_structural_schemas(annotation: Any, expected: dict[str, Any]) -> None:
    assert _field_schema(annotation) == expected


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (msgspec.Meta(ge=0, le=10), {"minimum": 0, "maximum": 10}),
        (
            msgspec.Meta(gt=0, lt=10),
            {"minimum": 0, "exclusiveMinimum": True, "maximum": 10, "exclusiveMaximum": True},
        ),
        (msgspec.Meta(multiple_of=5), {"multipleOf": 5}),
        (msgspec.Meta(description="Why."), {"description": "Why."}),
    ],
)
def test_numeric_constraints_in_openapi_v3_form(
    meta: msgspec.Meta, expected: dict[str, Any]
) -> None:
    assert _field_schema(Annotated[int, meta]) == {"type": "integer", **expected}


def test_string_and_collection_constraints() -> None:
    text = Annotated[str, msgspec.Meta(min_length=1, max_length=5, pattern="^[a-z]+$")]
    assert _field_schema(text) == {
        "type": "string",
        "minLength": 1,
        "maxLength": 5,
        "pattern": "^[a-z]+$",
    }
    items = Annotated[list[int], msgspec.Meta(min_length=1, max_length=3)]
    assert _field_schema(items) == {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 1,
        "maxItems": 3,
    }
    mapping = Annotated[dict[str, str], msgspec.Meta(max_length=2)]
    assert _field_schema(mapping) == {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "maxProperties": 2,
    }


def test_defaults_and_required_fields() -> None:
    class Spec(msgspec.Struct, kw_only=True, rename="camel"):
        image_name: str
        replicas: int = 3
        mode: Literal["a", "b"] = "a"
        note: str | None = None
        tags: list[str] = []

    schema = typed.structural_schema(Spec)
    assert schema["required"] == ["imageName"]
    assert schema["properties"]["replicas"] == {"type": "integer", "default": 3}
    assert schema["properties"]["mode"] == {"type": "string", "default": "a", "enum": ["a", "b"]}
    # null is no default: the field is just absent (and may be null).
    assert schema["properties"]["note"] == {"type": "string", "nullable": True}
    assert schema["properties"]["tags"]["default"] == []


def test_defaults_holding_an_empty_string_are_left_out() -> None:
    # kube-apiserver 1.20 (the e2e tier's) turns every "" of a CRD's default into null and then
    # refuses the CRD ("must be of type string: null"); there is no other way to say "" in
    # JSON, so such a field has no server-side default: absent, and the model decodes it as "".
    class Spec(msgspec.Struct, kw_only=True):
        note: str = ""
        named: Named = Named(name="")
        names: tuple[str, ...] = ("a", "")
        word: str = "x"
        choice: int | str = ""

    properties = typed.structural_schema(Spec)["properties"]
    assert properties["note"] == {"type": "string"}
    assert "default" not in properties["named"]
    assert "default" not in properties["names"]
    assert "default" not in properties["choice"]
    assert properties["word"] == {"type": "string", "default": "x"}
    assert "required" not in typed.structural_schema(Spec)  # still optional, as in the model
    assert msgspec.convert({}, Spec).note == ""


def test_extra_json_schema_passes_kubernetes_markers_through() -> None:
    rule = {"rule": "self.min <= self.max", "message": "min must not exceed max"}
    listing = Annotated[
        list[str], msgspec.Meta(extra_json_schema={"x-kubernetes-list-type": "atomic"})
    ]
    assert _field_schema(listing) == {
        "type": "array",
        "items": {"type": "string"},
        "x-kubernetes-list-type": "atomic",
    }
    ranged = Annotated[
        dict[str, int], msgspec.Meta(extra_json_schema={"x-kubernetes-validations": [rule]})
    ]
    assert _field_schema(ranged)["x-kubernetes-validations"] == [rule]
    anything = Annotated[
        Any, msgspec.Meta(extra_json_schema={"x-kubernetes-embedded-resource": True})
    ]
    assert _field_schema(anything) == {
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-embedded-resource": True,
    }


def test_no_refs_anywhere_in_nested_models() -> None:
    class Deep(msgspec.Struct):
        inner: Inner
        more: list[Inner]
        maybe: Inner | None = None

    schema = typed.structural_schema(Deep)
    assert "$ref" not in repr(schema)
    assert "$defs" not in repr(schema)
    assert schema["properties"]["maybe"]["nullable"] is True
    assert schema["properties"]["maybe"]["properties"] == {"name": {"type": "string"}}


def test_unknown_formats_are_left_out() -> None:
    import decimal

    assert _field_schema(decimal.Decimal) == {"type": "string"}
    assert "date-time" in KNOWN_FORMATS


class Node(msgspec.Struct):
    children: list[Node] = []


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (int | float, "a union of several types has no structural schema"),
        (Inner | int, "a union of several types has no structural schema"),
        (tuple[int, str], "a tuple of different types"),
        (Literal["a", 1], "an enum of mixed types"),
        (Node, "contains itself"),
    ],
)
def test_what_a_structural_schema_cannot_say_is_refused(annotation: Any, message: str) -> None:
    with pytest.raises(typed.SchemaError, match=message):
        _field_schema(annotation)


class WidgetSpec(msgspec.Struct, kw_only=True):
    replicas: int = 1


class WidgetStatus(msgspec.Struct, kw_only=True):
    replicas: int = 0


@typed.resource(
    "example.com",
    "v1beta1",
    scope="Cluster",
    short_names=["wd"],
    categories=["all"],
    printer_columns=[
        typed.PrinterColumn("Count", ".spec.replicas", type="integer", priority=1, description="N")
    ],
    scale=typed.Scale(label_selector_path=".status.selector"),
)
class Widget(msgspec.Struct, kw_only=True):
    """A widget."""

    spec: WidgetSpec
    status: WidgetStatus | None = None


@typed.resource("example.com", "v1", kind="Gadget", plural="gadgetry")
class GadgetModel(msgspec.Struct):
    spec: dict[str, Any]


def test_crd_manifest_of_a_full_model() -> None:
    crd = typed.crd_manifest(Widget)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"] == {"name": "widgets.example.com"}
    assert crd["spec"]["group"] == "example.com"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"] == {
        "kind": "Widget",
        "listKind": "WidgetList",
        "plural": "widgets",
        "singular": "widget",
        "shortNames": ["wd"],
        "categories": ["all"],
    }
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1beta1"
    assert version["served"] is True
    assert version["storage"] is True
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    assert version["additionalPrinterColumns"] == [
        {
            "name": "Count",
            "type": "integer",
            "jsonPath": ".spec.replicas",
            "description": "N",
            "priority": 1,
        }
    ]
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["type"] == "object"
    assert schema["description"] == "A widget."
    assert schema["required"] == ["spec"]
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    # The framework's own records in the status survive the API server's pruning.
    assert schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True
    assert schema["properties"]["status"]["properties"] == {
        "replicas": {"type": "integer", "default": 0}
    }


def test_crd_manifest_of_a_minimal_model() -> None:
    crd = typed.crd_manifest(GadgetModel)
    assert crd["metadata"]["name"] == "gadgetry.example.com"
    assert crd["spec"]["names"]["singular"] == "gadget"
    (version,) = crd["spec"]["versions"]
    assert "subresources" not in version
    assert "additionalPrinterColumns" not in version
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def test_crd_manifest_refuses_plain_structs() -> None:
    with pytest.raises(TypeError, match="not a resource model"):
        typed.crd_manifest(WidgetSpec)
