"""References to Kubernetes objects: for events (``ObjectReference``) and ownership.

Both are built from a body as it is, without validation: cluster-scoped objects have no
namespace, and a body that was never stored has no uid. Fields that are absent are left out,
so that the API server can tell "not given" from "empty".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast


class ObjectReference(TypedDict, total=False):
    """Which object something is about (the ``involvedObject`` of an event)."""

    apiVersion: str
    kind: str
    namespace: str | None
    name: str
    uid: str


class OwnerReference(TypedDict, total=False):
    """An entry of ``metadata.ownerReferences``: the owner of the object that holds it."""

    controller: bool
    blockOwnerDeletion: bool
    apiVersion: str
    kind: str
    name: str
    uid: str


def build_object_reference(body: Mapping[str, Any]) -> ObjectReference:
    """The reference to ``body`` for events; empty or absent fields are omitted."""
    metadata = body.get("metadata") or {}
    fields = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
        "namespace": metadata.get("namespace"),
    }
    return cast(ObjectReference, {key: value for key, value in fields.items() if value})


def build_owner_reference(
    body: Mapping[str, Any],
    *,
    controller: bool | None = True,
    block_owner_deletion: bool | None = True,
) -> OwnerReference:
    """The owner reference that makes ``body`` the owner (by default: the controller).

    ``None`` for ``controller`` or ``block_owner_deletion`` leaves that flag out, so the API
    server applies its default (false).
    """
    metadata = body.get("metadata") or {}
    fields = {
        "controller": controller,
        "blockOwnerDeletion": block_owner_deletion,
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
    }
    return cast(OwnerReference, {key: value for key, value in fields.items() if value is not None})
