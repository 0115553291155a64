"""CustomResourceDefinitions from resource models: structural OpenAPI v3 schemas.

msgspec describes a Struct in JSON Schema (2020-12); the API server wants a *structural*
OpenAPI v3 schema (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
custom-resource-definitions/#specifying-a-structural-schema): no ``$ref`` (definitions are
inlined), a ``type`` on every node (except the ``x-kubernetes-int-or-string`` and
``x-kubernetes-preserve-unknown-fields`` ones), ``nullable`` instead of a union with null,
OpenAPI's boolean ``exclusiveMinimum``/``exclusiveMaximum``, no ``uniqueItems``, no
``additionalProperties`` next to ``properties``, and only the formats it knows. Markers of the
API server (``x-kubernetes-list-type``, ``x-kubernetes-validations``, ...) can be added to a
field with ``msgspec.Meta(extra_json_schema={...})`` and are kept as they are. What cannot be
said structurally (recursive types, unions of several kinds, tuples of mixed types) is refused
with a :class:`SchemaError` naming the place, rather than guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from trioperator._engine.models import ResourceModel, model_of

__all__ = ["SchemaError", "crd_manifest", "crd_manifests", "structural_schema"]


class SchemaError(ValueError):
    """A model's type that a structural schema cannot express."""


# Formats the API server validates (k8s.io/kube-openapi's strfmt registry, as used for CRDs);
# it accepts and ignores others in old versions and warns in new ones, so they are left out.
KNOWN_FORMATS: Final = frozenset(
    {
        "bsonobjectid", "uri", "email", "hostname", "ipv4", "ipv6", "cidr", "mac",
        "uuid", "uuid3", "uuid4", "uuid5", "isbn", "isbn10", "isbn13", "creditcard", "ssn",
        "hexcolor", "rgbcolor", "byte", "password", "date", "duration", "datetime",
        "date-time", "int32", "int64", "float", "double",
    }
)  # fmt: skip

# Keywords copied as they are (after their values are translated where they hold schemas).
_PLAIN: Final = (
    "description", "default", "enum", "minimum", "maximum", "multipleOf",
    "minLength", "maxLength", "pattern", "minItems", "maxItems",
    "minProperties", "maxProperties", "format", "required",
)  # fmt: skip


def structural_schema(cls: type[msgspec.Struct] | Any) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a type (a Struct, usually)."""
    root = msgspec.json.schema(cls)
    definitions = root.get("$defs", {})
    return _translate(root, definitions, path="$", seen=())


def _translate(
    node: Mapping[str, Any],
    definitions: Mapping[str, Any],
    *,
    path: str,
    seen: tuple[str, ...],
) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is not None:
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            raise SchemaError(
                f"{path}: {name} contains itself; a structural schema cannot be recursive "
                "(use dict[str, Any] or msgspec.Raw for the recursive part)."
            )
        merged = {**definitions[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _translate(merged, definitions, path=path, seen=(*seen, name))

    for union in ("anyOf", "oneOf"):
        if union in node:
            return _union(node, node[union], definitions, path=path, seen=seen)

    markers = {key: value for key, value in node.items() if key.startswith("x-kubernetes-")}
    if not set(node) - {"description", "title", "default", "examples", *markers}:
        # Any: msgspec says nothing about it.
        out: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
        if "description" in node:
            out["description"] = node["description"]
        return {**out, **markers}

    out = {}
    kind = node.get("type")
    if "const" in node:
        out["enum"] = [node["const"]]
    if isinstance(kind, list):
        raise SchemaError(f"{path}: several types ({kind}) cannot be one structural type.")
    if kind is None:
        values = node.get("enum") or ([node["const"]] if "const" in node else None)
        if values is None:
            raise SchemaError(f"{path}: no type in {dict(node)!r}.")
        kind = _type_of_values(values, path=path)
    out["type"] = kind
    for key in _PLAIN:
        if key in node:
            out[key] = node[key]
    if out.get("default", 0) is None or _holds_empty_string(out.get("default")):
        del out["default"]  # null is no default: the field is just absent; "": see below
    if "format" in out and out["format"] not in KNOWN_FORMATS:
        del out["format"]
    if node.get("contentEncoding") == "base64":
        out["format"] = "byte"
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if exclusive in node:  # JSON Schema's number, OpenAPI v3.0's flag on the bound
            out[bound] = node[exclusive]
            out[exclusive] = True

    if kind == "object":
        properties = node.get("properties")
        additional = node.get("additionalProperties")
        if properties is not None:
            out["properties"] = {
                name: _translate(sub, definitions, path=f"{path}.{name}", seen=seen)
                for name, sub in properties.items()
            }
            if not out.get("required"):
                out.pop("required", None)
        elif isinstance(additional, Mapping) and additional:
            out["additionalProperties"] = _translate(
                additional, definitions, path=f"{path}.*", seen=seen
            )
        else:  # dict[str, Any], or a bare dict: keep whatever is in it
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        out["items"] = _items(node, definitions, path=path, seen=seen)
        # uniqueItems is refused by the API server (quadratic); a set of scalars is a
        # list-type "set" instead, which it checks in linear time.
        scalar = out["items"].get("type") in ("string", "integer", "number", "boolean")
        if node.get("uniqueItems") and scalar:
            out["x-kubernetes-list-type"] = "set"
    # Markers given with msgspec.Meta(extra_json_schema={...}) win over ours.
    return {**out, **markers}


def _items(
    node: Mapping[str, Any], definitions: Mapping[str, Any], *, path: str, seen: tuple[str, ...]
) -> dict[str, Any]:
    prefix = node.get("prefixItems")
    if prefix is not None:  # a tuple: one schema for all its items, if they agree
        schemas = [
            _translate(sub, definitions, path=f"{path}[{i}]", seen=seen)
            for i, sub in enumerate(prefix)
        ]
        if any(schema != schemas[0] for schema in schemas):
            raise SchemaError(f"{path}: a tuple of different types has no structural schema.")
        return schemas[0] if schemas else {"x-kubernetes-preserve-unknown-fields": True}
    items = node.get("items")
    if not items:
        return {"x-kubernetes-preserve-unknown-fields": True}
    return _translate(items, definitions, path=f"{path}[*]", seen=seen)


def _union(
    node: Mapping[str, Any],
    options: Iterable[Mapping[str, Any]],
    definitions: Mapping[str, Any],
    *,
    path: str,
    seen: tuple[str, ...],
) -> dict[str, Any]:
    choices = [option for option in options if option.get("type") != "null"]
    nullable = len(choices) < len(list(options))
    kinds = {choice.get("type") for choice in choices}
    if kinds == {"integer", "string"} and len(choices) == 2:
        out: dict[str, Any] = {"x-kubernetes-int-or-string": True}
    elif len(choices) == 1:
        out = _translate(choices[0], definitions, path=path, seen=seen)
    else:
        raise SchemaError(
            f"{path}: a union of several types has no structural schema (int | str is the "
            "only one Kubernetes knows: x-kubernetes-int-or-string)."
        )
    for key in ("description", "default"):
        if key in node and node[key] is not None:
            out[key] = node[key]
    if _holds_empty_string(out.get("default")):
        del out["default"]
    if nullable:
        out["nullable"] = True
    return out


def _holds_empty_string(value: Any) -> bool:
    """Whether a default has an empty string anywhere in it.

    kube-apiserver 1.20 reads every ``""`` of a CRD's defaults as null and refuses the CRD
    ("must be of type string: null"). JSON has no other way to say an empty string, so such a
    default is left out: the field is absent until set, and the model's decoding gives it its
    default (docs/typed-resources.md).
    """
    if value == "":
        return True
    if isinstance(value, Mapping):
        return any(_holds_empty_string(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_empty_string(item) for item in value)
    return False


def _type_of_values(values: Iterable[Any], *, path: str) -> str:
    kinds = set()
    for value in values:
        if isinstance(value, bool):
            kinds.add("boolean")
        elif isinstance(value, int):
            kinds.add("integer")
        elif isinstance(value, float):
            kinds.add("number")
        elif isinstance(value, str):
            kinds.add("string")
        else:
            raise SchemaError(f"{path}: the enum value {value!r} is not a scalar.")
    if len(kinds) != 1:
        raise SchemaError(f"{path}: an enum of mixed types ({sorted(kinds)}).")
    return kinds.pop()


def crd_manifests(classes: Iterable[type[msgspec.Struct]]) -> list[dict[str, Any]]:
    """The CRDs of resource models: one per resource, with a version per model of it."""
    grouped: dict[str, list[type[msgspec.Struct]]] = {}
    for cls in classes:
        model = model_of(cls)
        if model is None:
            raise TypeError(f"{cls!r} is not a resource model (see trioperator.typed.resource).")
        grouped.setdefault(model.crd_name, []).append(cls)
    return [crd_manifest(*group) for group in grouped.values()]


def crd_manifest(*classes: type[msgspec.Struct]) -> dict[str, Any]:
    """The CustomResourceDefinition (apiextensions.k8s.io/v1) of a resource model, or of the
    models of several versions of one resource (one of them with ``storage=True``)."""
    models: list[ResourceModel] = []
    for cls in classes:
        model = model_of(cls)
        if model is None:
            raise TypeError(f"{cls!r} is not a resource model (see trioperator.typed.resource).")
        models.append(model)
    if not models:
        raise TypeError("crd_manifest() needs at least one resource model.")
    first = models[0]
    for model in models[1:]:
        if _names(model) != _names(first) or (model.group, model.scope) != (
            first.group,
            first.scope,
        ):
            raise SchemaError(
                f"{model.cls.__name__} and {first.cls.__name__} are versions of one resource: "
                "they need the same group, kind, names and scope."
            )
    versions = [model.version for model in models]
    if len(set(versions)) != len(versions):
        raise SchemaError(f"{first.crd_name}: a version is declared twice ({versions}).")
    storage = [m for m in models if m.storage or (m.storage is None and len(models) == 1)]
    if len(storage) != 1:
        raise SchemaError(
            f"{first.crd_name}: exactly one version must be stored (storage=True), "
            f"not {[m.version for m in storage] or 'none'}."
        )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": first.crd_name},
        "spec": {
            "group": first.group,
            "scope": first.scope,
            "names": _names(first),
            "versions": [
                _version(model, _object_schema(model), storage=model is storage[0])
                for model in models
            ],
        },
    }


def _object_schema(model: ResourceModel) -> dict[str, Any]:
    body = structural_schema(model.cls)
    properties = dict(body.get("properties", {}))
    if "status" in properties:
        # The framework keeps its own records in the status (handlers' results, progress,
        # conditions): the typed fields are checked, the other ones kept, not pruned.
        properties["status"] = {
            **properties["status"],
            "x-kubernetes-preserve-unknown-fields": True,
        }
    schema: dict[str, Any] = {"type": "object"}
    if body.get("description"):
        schema["description"] = body["description"]
    schema["properties"] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        **properties,
    }
    if body.get("required"):
        schema["required"] = body["required"]
    return schema


def _names(model: ResourceModel) -> dict[str, Any]:
    names: dict[str, Any] = {
        "kind": model.kind,
        "listKind": f"{model.kind}List",
        "plural": model.plural,
        "singular": model.singular,
    }
    if model.short_names:
        names["shortNames"] = list(model.short_names)
    if model.categories:
        names["categories"] = list(model.categories)
    return names


def _version(model: ResourceModel, schema: dict[str, Any], *, storage: bool) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": model.version,
        "served": model.served,
        "storage": storage,
        "schema": {"openAPIV3Schema": schema},
    }
    subresources: dict[str, Any] = {}
    if model.status_subresource:
        subresources["status"] = {}
    if model.scale is not None:
        scale = {
            "specReplicasPath": model.scale.spec_replicas_path,
            "statusReplicasPath": model.scale.status_replicas_path,
        }
        if model.scale.label_selector_path is not None:
            scale["labelSelectorPath"] = model.scale.label_selector_path
        subresources["scale"] = scale
    if subresources:
        version["subresources"] = subresources
    if model.printer_columns:
        columns = []
        for column in model.printer_columns:
            entry: dict[str, Any] = {
                "name": column.name,
                "type": column.type,
                "jsonPath": column.json_path,
            }
            if column.description:
                entry["description"] = column.description
            if column.format:
                entry["format"] = column.format
            if column.priority:
                entry["priority"] = column.priority
            columns.append(entry)
        version["additionalPrinterColumns"] = columns
    return version
