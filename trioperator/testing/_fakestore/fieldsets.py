"""Field sets as server-side apply sees objects: paths, their ``FieldsV1`` form, and diffs.

A *path* is a tuple of path elements in the apiserver's own spelling: ``f:name`` for a field,
``k:{"name":"main"}`` for an item of an associative list (its merge keys, sorted, as compact
JSON), ``v:"x"`` for an item of a set-like list, ``i:0`` for a positional item. A *field set*
is a plain ``set`` of paths; a path is in it when the manager owns that node itself, which for
maps and list items is what ``FieldsV1`` writes as ``".": {}``.

What counts as an owned node follows structured-merge-diff, the library behind the real
apiserver: leaves always; list items always; map entries when the map is a map (labels, data,
any map of a schemaless custom resource) rather than a struct of declared fields, or when the
value is null or an empty map. Which is which comes from :class:`Shapes`, a compact stand-in
for the OpenAPI schemas of the built-in kinds.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from trioperator.testing._fakestore.values import JSON, Obj

Path = tuple[str, ...]
FieldSet = set[Path]
Names = tuple[str, ...]
"""The field names from the root down to a node (list items add nothing)."""

MapKind = Literal["struct", "map", "atomic"]
ListKind = tuple[str, ...] | Literal["set", "atomic"]

MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()

# Fields that no manager owns: the apiserver strips them from every field set.
STRIPPED: frozenset[Path] = frozenset(
    {
        ("f:apiVersion",),
        ("f:kind",),
        ("f:metadata",),
        *(
            ("f:metadata", f"f:{name}")
            for name in (
                "name",
                "namespace",
                "creationTimestamp",
                "selfLink",
                "uid",
                "clusterName",
                "generation",
                "managedFields",
                "resourceVersion",
            )
        ),
    }
)

# Maps of arbitrary keys in the built-in kinds (everything else that holds an object is a
# struct of declared fields there). Keyed by the field's own name: unambiguous in the kinds
# the fake serves.
_MAP_FIELDS = frozenset(
    {
        "labels",
        "annotations",
        "data",
        "binaryData",
        "stringData",
        "nodeSelector",
        "matchLabels",
        "limits",
        "requests",
        "capacity",
        "allocatable",
        "overhead",
    }
)
# Structs replaced as a whole (``structType: atomic`` in the real schemas).
_ATOMIC_STRUCTS = frozenset({"selector", "labelSelector", "namespaceSelector", "fieldRef"})

# Associative lists of the built-in kinds and their keys (as server-side apply keys them).
_LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",),
    "hostAliases": ("ip",),
    "ownerReferences": ("uid",),
    "conditions": ("type",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
    "readinessGates": ("conditionType",),
}
_PORT_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("containerPort", "protocol"),
    "initContainers": ("containerPort", "protocol"),
    "ephemeralContainers": ("containerPort", "protocol"),
    "spec": ("port", "protocol"),  # a Service's ports
}
# Key fields that the schema defaults, so an item keyed without them still has the key.
_KEY_DEFAULTS = {"protocol": "TCP"}


class Shapes:
    """How the nodes of one kind's objects merge and are owned (a slice of its schema)."""

    def __init__(self, *, custom: bool) -> None:
        self.custom = custom
        """Schemaless custom resources: maps everywhere (outside metadata), lists atomic."""

    def map_kind(self, names: Names) -> MapKind:
        if not names:
            return "map" if self.custom else "struct"
        if names[0] == "metadata":
            return "map" if len(names) == 2 and names[1] in ("labels", "annotations") else "struct"
        if self.custom:
            return "map"
        last = names[-1]
        if last in _MAP_FIELDS:
            return "map"
        if last in _ATOMIC_STRUCTS:
            return "atomic"
        return "struct"

    def list_kind(self, names: Names) -> ListKind:
        if names == ("metadata", "finalizers"):
            return "set"
        if names == ("metadata", "ownerReferences"):
            return ("uid",)
        if self.custom or not names:
            return "atomic"
        last = names[-1]
        if last == "ports" and len(names) >= 2:
            return _PORT_KEYS.get(names[-2], "atomic")
        return _LIST_KEYS.get(last, "atomic")


def item_element(item: JSON, kind: ListKind, index: int) -> str:
    """The path element of one item of a non-atomic list."""
    if kind == "set":
        return "v:" + _compact(item)
    if kind == "atomic" or not isinstance(item, dict):
        return f"i:{index}"
    key = {name: item.get(name, _KEY_DEFAULTS.get(name)) for name in sorted(kind)}
    return "k:" + _compact({k: v for k, v in key.items() if v is not None})


def _compact(value: JSON) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# ------------------------------------------------------------------------------ walking values


def field_set(obj: Obj, shapes: Shapes) -> FieldSet:
    """The paths an applied configuration sets (what its manager will own)."""
    out: FieldSet = set()
    _collect(obj, (), (), shapes, out)
    return out - STRIPPED


def _collect(value: JSON, names: Names, path: Path, shapes: Shapes, out: FieldSet) -> None:
    if isinstance(value, dict):
        kind = shapes.map_kind(names)
        if kind == "atomic" and path:
            out.add(path)
            return
        for key, child in value.items():
            child_path = (*path, f"f:{key}")
            _collect(child, (*names, key), child_path, shapes, out)
            if child is None or child == {} or kind == "map":
                out.add(child_path)
    elif isinstance(value, list):
        list_kind = shapes.list_kind(names)
        if list_kind == "atomic":
            out.add(path)
            return
        for index, item in enumerate(value):
            item_path = (*path, item_element(item, list_kind, index))
            _collect(item, names, item_path, shapes, out)
            out.add(item_path)
    else:
        out.add(path)


class Comparison:
    """What changed between two versions of an object, as three field sets."""

    __slots__ = ("added", "modified", "removed")

    def __init__(self) -> None:
        self.added: FieldSet = set()
        self.modified: FieldSet = set()
        self.removed: FieldSet = set()

    @property
    def same(self) -> bool:
        return not (self.added or self.modified or self.removed)


def compare(old: JSON, new: JSON, shapes: Shapes) -> Comparison:
    """Added, modified and removed paths from ``old`` to ``new`` (system fields excluded)."""
    result = Comparison()
    _compare(old, new, (), (), shapes, result)
    result.added -= STRIPPED
    result.modified -= STRIPPED
    result.removed -= STRIPPED
    return result


def _compare(
    old: JSON, new: JSON, names: Names, path: Path, shapes: Shapes, out: Comparison
) -> None:
    if _both_or_missing(old, new, dict) and (not path or shapes.map_kind(names) != "atomic"):
        before_map: dict[str, JSON] = old if isinstance(old, dict) else {}
        after_map: dict[str, JSON] = new if isinstance(new, dict) else {}
        for key in [*before_map, *(k for k in after_map if k not in before_map)]:
            before = before_map.get(key, MISSING)
            after = after_map.get(key, MISSING)
            child_path = (*path, f"f:{key}")
            _compare(before, after, (*names, key), child_path, shapes, out)
            _item_hook(before, after, child_path, out)
        return
    list_kind = shapes.list_kind(names) if _both_or_missing(old, new, list) else "atomic"
    if list_kind != "atomic":
        before_items = _index_items(old if isinstance(old, list) else [], list_kind)
        after_items = _index_items(new if isinstance(new, list) else [], list_kind)
        for element in [*before_items, *(e for e in after_items if e not in before_items)]:
            before = before_items.get(element, MISSING)
            after = after_items.get(element, MISSING)
            item_path = (*path, element)
            _compare(before, after, names, item_path, shapes, out)
            _item_hook(before, after, item_path, out)
        return
    if old is MISSING:
        out.added.add(path)
    elif new is MISSING:
        out.removed.add(path)
    elif old != new or type(old) is not type(new):
        out.modified.add(path)


def _both_or_missing(old: JSON, new: JSON, kind: type) -> bool:
    """Whether both sides are of ``kind`` or absent, and not both absent."""
    old_ok, new_ok = isinstance(old, kind), isinstance(new, kind)
    return (old_ok or old is MISSING) and (new_ok or new is MISSING) and (old_ok or new_ok)


def _item_hook(before: JSON, after: JSON, path: Path, out: Comparison) -> None:
    if before is MISSING:
        out.added.add(path)
    elif after is MISSING:
        out.removed.add(path)


def _index_items(items: list[JSON], kind: ListKind) -> dict[str, JSON]:
    indexed: dict[str, JSON] = {}
    for index, item in enumerate(items):
        indexed.setdefault(item_element(item, kind, index), item)
    return indexed


# ------------------------------------------------------------------------------ FieldsV1


def encode_fields(paths: FieldSet) -> Obj:
    """The ``fieldsV1`` tree of a field set (children sorted as the apiserver sorts them)."""
    tree: dict[str, Any] = {}
    members: list[dict[str, Any]] = []
    for path in paths:
        node = tree
        for element in path:
            node = node.setdefault(element, {})
        members.append(node)
    for node in members:
        if node:
            node["."] = {}
    return _sorted(tree)


def _sorted(node: dict[str, Any]) -> dict[str, Any]:
    ordered: dict[str, Any] = {}
    if "." in node:
        ordered["."] = {}
    for key in sorted((k for k in node if k != "."), key=_element_order):
        ordered[key] = _sorted(node[key])
    return ordered


def _element_order(element: str) -> tuple[int, str]:
    return ("fkvi".find(element[0]), element[2:])


def decode_fields(tree: Any) -> FieldSet:
    """The field set of a ``fieldsV1`` tree; malformed parts are ignored."""
    out: FieldSet = set()
    if isinstance(tree, dict):
        _decode(tree, (), out)
    return out


def _decode(node: dict[str, Any], path: Path, out: FieldSet) -> None:
    children = [(k, v) for k, v in node.items() if k != "." and isinstance(v, dict)]
    if path and ("." in node or not children):
        out.add(path)
    for key, child in children:
        _decode(child, (*path, key), out)


def path_text(path: Path) -> str:
    """A path as conflict messages print it: ``.spec.containers[name="main"].image``."""
    parts: list[str] = []
    for element in path:
        kind, text = element[0], element[2:]
        if kind == "f":
            parts.append(f".{text}")
        elif kind == "k":
            key = json.loads(text)
            parts.append("[" + ",".join(f"{k}={_compact(v)}" for k, v in key.items()) + "]")
        elif kind == "v":
            parts.append(f"[={text}]")
        else:
            parts.append(f"[{text}]")
    return "".join(parts)


def prefixes(paths: FieldSet) -> set[Path]:
    """Every proper ancestor of the given paths."""
    return {path[:n] for path in paths for n in range(1, len(path))}
