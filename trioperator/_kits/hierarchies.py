"""Parents and children: owner references, names, namespaces and labels of child objects.

These are Kopf's helpers with Kopf's names and semantics. A handler builds the manifests of
the objects it creates, and ``adopt(children)`` makes them belong to the object being handled:
owned by it (garbage-collected with it), named after it, in its namespace, with its labels.

What counts as "an object" here:

* a mutable mapping (a plain ``dict`` manifest);
* a pykube-ng object (its ``.obj`` dict is edited in place);
* a model of the official ``kubernetes`` client or of ``kubernetes_asyncio`` (``V1Pod``, ...):
  its ``.metadata`` is edited, created as that library's ``V1ObjectMeta`` if missing;
* any iterable (list, tuple, generator, ...) of those, nested to any depth.

The third-party libraries are recognised by their classes' modules, never imported here for
that: ``import trioperator`` must not pay for importing them, and they are all optional.

Without an explicit owner (or name, namespace, labels) the helpers take them from the body of
the handler that is running now, read through a context variable the runtime sets around every
resource handler; outside of a handler (e.g. in a startup handler) they raise ``LookupError``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeAlias

from trioperator._engine.filters import FieldSpec
from trioperator._engine.references import OwnerReference, build_owner_reference
from trioperator._runtime.handling.execution import handler_body

__all__ = [
    "adjust_namespace",
    "adopt",
    "append_owner_reference",
    "harmonize_naming",
    "label",
    "remove_owner_reference",
]

K8sObject: TypeAlias = Any
"""A dict, a pykube-ng object, or a kubernetes/kubernetes_asyncio model (checked at run time)."""

K8sObjects: TypeAlias = Any
"""One ``K8sObject`` or an iterable of them, nested to any depth."""


# The model packages of the two official clients: {module prefix: package to take V1* from}.
_MODEL_PACKAGES = {
    "kubernetes.client.models.": "kubernetes.client",
    "kubernetes_asyncio.client.models.": "kubernetes_asyncio.client",
}


# ------------------------------------------------------------------------------ public helpers


def append_owner_reference(
    objs: K8sObjects,
    owner: Any = None,
    *,
    controller: bool | None = True,
    block_owner_deletion: bool | None = True,
) -> None:
    """Make ``owner`` an owner of every object, unless it already is one (by uid).

    The children are usually not yet created, so their manifests are edited in place; no
    patches are involved. ``owner`` defaults to the object of the running handler.
    """
    ref = build_owner_reference(
        _owner_body(owner), controller=controller, block_owner_deletion=block_owner_deletion
    )
    if not ref.get("uid"):
        # The API server would reject the child with a less helpful message, or worse, the
        # caller would only learn it after creating half of the children.
        raise ValueError(f"The owner has no uid (is it stored in the cluster yet?): {ref}")
    for obj in _objects(objs):
        if isinstance(obj, MutableMapping):
            refs = obj.setdefault("metadata", {}).setdefault("ownerReferences", [])
            if not any(_ref_uid(existing) == ref.get("uid") for existing in refs):
                refs.append(dict(ref))
        else:
            meta = _model_metadata(obj)
            if meta.owner_references is None:
                meta.owner_references = []
            if not any(_ref_uid(existing) == ref.get("uid") for existing in meta.owner_references):
                meta.owner_references.append(_model_owner_reference(obj, ref))


def remove_owner_reference(objs: K8sObjects, owner: Any = None) -> None:
    """Remove ``owner`` (matched by uid) from the owners of every object, if it is there."""
    uid = build_owner_reference(_owner_body(owner)).get("uid")
    for obj in _objects(objs):
        if isinstance(obj, MutableMapping):
            refs = obj.setdefault("metadata", {}).setdefault("ownerReferences", [])
            refs[:] = [existing for existing in refs if _ref_uid(existing) != uid]
        else:
            meta = _model_metadata(obj)
            if meta.owner_references is None:
                meta.owner_references = []
            meta.owner_references[:] = [
                existing for existing in meta.owner_references if _ref_uid(existing) != uid
            ]


def label(
    objs: K8sObjects,
    labels: Mapping[str, str | None] | None = None,
    *,
    forced: bool = False,
    nested: str | Iterable[FieldSpec] | None = None,
    force: bool | None = None,
) -> None:
    """Put ``labels`` on every object; existing labels are kept unless ``forced``.

    ``labels`` omitted or ``None``: the labels of the running handler's object (an empty dict
    labels nothing). ``nested`` names fields holding more objects to label as well (e.g.
    ``'spec.template'`` for a deployment's pods); absent ones are skipped. ``force`` is Kopf's
    deprecated spelling of ``forced``.
    """
    if force is not None:
        forced = force
    if labels is None:
        labels = _metadata_of(_current_body()).get("labels") or {}
    _label(objs, labels, forced=forced, nested=nested)


def harmonize_naming(
    objs: K8sObjects,
    name: str | None = None,
    *,
    forced: bool = False,
    strict: bool = False,
) -> None:
    """Name the objects after ``name`` (omitted or ``None``: the running handler's object).

    By default the name becomes a prefix, ``generateName: <name>-``, and the API server adds a
    random suffix, so several children of one parent never clash (read the real name from the
    API's response). With ``strict``, ``name`` is used exactly, as ``metadata.name``. Objects
    that already have a name or a generateName keep it, unless ``forced``; the other of the two
    fields is removed when one is set, so the result is never ambiguous.
    """
    if name is None:
        name = _metadata_of(_current_body()).get("name")
    _harmonize_naming(objs, name, forced=forced, strict=strict)


def adjust_namespace(
    objs: K8sObjects,
    namespace: str | None = None,
    *,
    forced: bool = False,
) -> None:
    """Put the objects into ``namespace`` (omitted or ``None``: the running handler's one).

    Objects that already have a namespace keep it, unless ``forced``.
    """
    if namespace is None:
        namespace = _metadata_of(_current_body()).get("namespace")
    _adjust_namespace(objs, namespace, forced=forced)


def adopt(
    objs: K8sObjects,
    owner: Any = None,
    *,
    forced: bool = False,
    strict: bool = False,
    nested: str | Iterable[FieldSpec] | None = None,
) -> None:
    """Make the objects children of ``owner`` (by default, the running handler's object).

    Owned by it, named after it (see ``harmonize_naming`` for ``strict``), in its namespace
    (if it has one), with its labels (also on ``nested`` objects); ``forced`` overrides what
    the children already have.
    """
    owner_body = _owner_body(owner)
    metadata = _metadata_of(owner_body)
    # Flatten once: a generator given by the caller must reach all four steps.
    children = list(_objects(objs))
    append_owner_reference(children, owner=owner_body)
    _harmonize_naming(children, metadata.get("name"), forced=forced, strict=strict)
    _adjust_namespace(children, metadata.get("namespace"), forced=forced)
    _label(children, metadata.get("labels") or {}, forced=forced, nested=nested)


# The steps with every value resolved: ``adopt`` passes its owner's values, which must not fall
# back to the running handler's object when they are absent (e.g. a cluster-scoped owner).


def _label(
    objs: K8sObjects,
    labels: Mapping[str, str | None],
    *,
    forced: bool,
    nested: str | Iterable[FieldSpec] | None,
) -> None:
    nested_fields: list[FieldSpec] = [nested] if isinstance(nested, str) else list(nested or [])
    for obj in _objects(objs, nested=nested_fields):
        existing: MutableMapping[str, Any]
        if isinstance(obj, MutableMapping):
            metadata = obj.setdefault("metadata", {})
            if metadata.get("labels") is None:
                metadata["labels"] = {}
            existing = metadata["labels"]
        else:
            meta = _model_metadata(obj)
            if meta.labels is None:
                meta.labels = {}
            existing = meta.labels
        for key, value in labels.items():
            if forced or key not in existing:
                existing[key] = value


def _harmonize_naming(objs: K8sObjects, name: str | None, *, forced: bool, strict: bool) -> None:
    if name is None:
        raise LookupError("The name must be given explicitly: the owner has none.")
    for obj in _objects(objs):
        if isinstance(obj, MutableMapping):
            metadata = obj.setdefault("metadata", {})
            unnamed = metadata.get("name") is None and metadata.get("generateName") is None
            if forced or unnamed:
                if strict:
                    metadata["name"] = name
                    metadata.pop("generateName", None)
                else:
                    metadata["generateName"] = f"{name}-"
                    metadata.pop("name", None)
        else:
            meta = _model_metadata(obj)
            if forced or (meta.name is None and meta.generate_name is None):
                if strict:
                    meta.name, meta.generate_name = name, None
                else:
                    meta.name, meta.generate_name = None, f"{name}-"


def _adjust_namespace(objs: K8sObjects, namespace: str | None, *, forced: bool) -> None:
    for obj in _objects(objs):
        if isinstance(obj, MutableMapping):
            metadata = obj.setdefault("metadata", {})
            if forced or metadata.get("namespace") is None:
                if namespace is not None:
                    metadata["namespace"] = namespace
                else:
                    metadata.pop("namespace", None)  # a cluster-scoped owner: none to inherit
        else:
            meta = _model_metadata(obj)
            if forced or meta.namespace is None:
                meta.namespace = namespace


# ------------------------------------------------------------------------------ objects


def _objects(objs: K8sObjects, *, nested: Iterable[FieldSpec] = ()) -> Iterator[Any]:
    """Every object in ``objs`` (flattened), and the ``nested`` objects inside each of them.

    pykube objects are given as their underlying dicts: that is what gets edited.
    """
    nested = list(nested)
    if objs is None:
        return
    if _is_pykube_object(objs):
        yield from _objects(objs.obj, nested=nested)
    elif isinstance(objs, Mapping) or _model_package(objs) is not None:
        if isinstance(objs, Mapping) and not isinstance(objs, MutableMapping):
            raise TypeError(f"Cannot edit a read-only mapping ({type(objs).__name__}).")
        yield objs
        for field in nested:
            found = _nested_object(objs, field)
            if found is not None:
                yield from _objects(found)
    elif isinstance(objs, str | bytes):
        raise TypeError(f"Expected Kubernetes objects, got a {type(objs).__name__}: {objs!r}.")
    elif isinstance(objs, Iterable):
        for obj in objs:
            yield from _objects(obj, nested=nested)
    else:
        raise TypeError(
            f"Unsupported Kubernetes object class: {type(objs).__module__}.{type(objs).__name__} "
            f"(expected a dict, a pykube-ng object or a kubernetes/kubernetes_asyncio model)."
        )


def _nested_object(obj: Any, field: FieldSpec) -> Any:
    """The value at ``field`` (dotted or a sequence of keys) in a dict or model, or None."""
    path = field.split(".") if isinstance(field, str) else list(field)
    value = obj
    for key in path:
        if isinstance(value, Mapping):
            value = value.get(key)
        elif _model_package(value) is not None:
            # Models name attributes in snake_case, the API in camelCase: map through the model.
            attribute_map: Mapping[str, str] = getattr(value, "attribute_map", {})
            attrs = [attr for attr, api_key in attribute_map.items() if api_key == key]
            value = getattr(value, attrs[0] if attrs else key, None)
        else:
            return None
        if value is None:
            return None
    return value


def _is_pykube_object(obj: object) -> bool:
    return any(cls.__module__.startswith("pykube.") for cls in type(obj).__mro__) and isinstance(
        getattr(obj, "obj", None), MutableMapping
    )


def _model_package(obj: object) -> str | None:
    """The client package of a kubernetes/kubernetes_asyncio model, or None for other objects."""
    for cls in type(obj).__mro__:
        for prefix, package in _MODEL_PACKAGES.items():
            if cls.__module__.startswith(prefix):
                return package
    return None


def _model_metadata(obj: Any) -> Any:
    """The model's ``V1ObjectMeta``, created (from the model's own library) if absent."""
    if getattr(obj, "metadata", None) is None:
        obj.metadata = _model_class(obj, "V1ObjectMeta")()
    return obj.metadata


def _model_owner_reference(obj: Any, ref: OwnerReference) -> Any:
    return _model_class(obj, "V1OwnerReference")(
        api_version=ref.get("apiVersion"),
        kind=ref.get("kind"),
        name=ref.get("name"),
        uid=ref.get("uid"),
        controller=ref.get("controller"),
        block_owner_deletion=ref.get("blockOwnerDeletion"),
    )


def _model_class(obj: Any, name: str) -> Any:
    package = _model_package(obj)
    assert package is not None  # only called for models
    return getattr(importlib.import_module(package), name)


def _ref_uid(ref: Any) -> Any:
    return ref.get("uid") if isinstance(ref, Mapping) else getattr(ref, "uid", None)


# ------------------------------------------------------------------------------ owners


def _current_body() -> Mapping[str, Any]:
    body = handler_body.get()
    if body is None:
        raise LookupError(
            "The owner must be given explicitly: no resource handler is running here."
        )
    return body


def _owner_body(owner: Any) -> Mapping[str, Any]:
    """The owner as a mapping: the running handler's body, a dict/Body, pykube or a model."""
    if owner is None:
        return _current_body()
    if isinstance(owner, Mapping):
        return owner
    if _is_pykube_object(owner):
        return owner.obj  # type: ignore[no-any-return]
    if _model_package(owner) is not None:
        meta = getattr(owner, "metadata", None)
        return {
            "apiVersion": getattr(owner, "api_version", None),
            "kind": getattr(owner, "kind", None),
            "metadata": {
                "name": getattr(meta, "name", None),
                "namespace": getattr(meta, "namespace", None),
                "uid": getattr(meta, "uid", None),
                "labels": getattr(meta, "labels", None),
            },
        }
    raise TypeError(f"Unsupported owner: {type(owner).__name__} (expected a body or an object).")


def _metadata_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = body.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}
