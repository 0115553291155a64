"""Our finalizer on objects: blocking their deletion until the operator has released them.

Kubernetes keeps an object marked for deletion (``metadata.deletionTimestamp``) until its
``metadata.finalizers`` list is empty. The operator adds its finalizer when deletion handlers or
daemons need to run before the object goes, and removes it when they are done.

Adding and removing are not merge-patches: a merge-patch replaces the whole list and could drop
a finalizer that another controller added meanwhile. They are transformation functions appended
to ``patch.fns``; the patch applier runs them on a copy of the freshest body and sends the
resulting JSON-patch guarded by a ``test`` of ``metadata.resourceVersion``. So when ours is the
only finalizer, its removal is exactly::

    [{"op": "test", "path": "/metadata/resourceVersion", "value": "<rv>"},
     {"op": "remove", "path": "/metadata/finalizers"}]

which is why a list left empty is removed rather than kept as ``[]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from trioperator._engine.bodies import RawBody
from trioperator._engine.patches import Patch

__all__ = [
    "AddFinalizer",
    "RemoveFinalizer",
    "allow_deletion",
    "block_deletion",
    "is_deletion_blocked",
    "is_deletion_ongoing",
]


def _metadata(body: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = body.get("metadata")
    if isinstance(metadata, dict):  # what JSON decodes to: no check against the ABC
        return metadata
    return metadata if isinstance(metadata, Mapping) else {}


def is_deletion_ongoing(body: Mapping[str, Any]) -> bool:
    """Whether the object is marked for deletion (and waits for its finalizers to go)."""
    return _metadata(body).get("deletionTimestamp") is not None


def is_deletion_blocked(body: Mapping[str, Any], finalizer: str) -> bool:
    """Whether our finalizer is on the object."""
    return finalizer in (_metadata(body).get("finalizers") or ())


@dataclasses.dataclass(frozen=True)
class AddFinalizer:
    """A patch fn: append the finalizer to ``metadata.finalizers`` unless it is there already."""

    finalizer: str

    def __call__(self, body: RawBody) -> None:
        metadata = body.get("metadata")
        if not isinstance(metadata, dict):
            metadata = body["metadata"] = {}
        finalizers = metadata.get("finalizers") or []
        if self.finalizer not in finalizers:
            metadata["finalizers"] = [*finalizers, self.finalizer]


@dataclasses.dataclass(frozen=True)
class RemoveFinalizer:
    """A patch fn: remove the finalizer; drop ``finalizers`` (and ``metadata``) left empty."""

    finalizer: str

    def __call__(self, body: RawBody) -> None:
        metadata = body.get("metadata")
        if not isinstance(metadata, dict):
            return
        finalizers = metadata.get("finalizers")
        if not isinstance(finalizers, list) or self.finalizer not in finalizers:
            return
        remaining = [item for item in finalizers if item != self.finalizer]
        if remaining:
            metadata["finalizers"] = remaining
        else:
            del metadata["finalizers"]
            if not metadata:
                del body["metadata"]


def block_deletion(*, body: Mapping[str, Any], patch: Patch, finalizer: str) -> None:
    """Schedule adding our finalizer, if the object does not have it (idempotent)."""
    if not is_deletion_blocked(body, finalizer):
        _append_once(patch, AddFinalizer(finalizer))


def allow_deletion(*, body: Mapping[str, Any], patch: Patch, finalizer: str) -> None:
    """Schedule removing our finalizer, if the object has it (idempotent)."""
    if is_deletion_blocked(body, finalizer):
        _append_once(patch, RemoveFinalizer(finalizer))


def _append_once(patch: Patch, fn: AddFinalizer | RemoveFinalizer) -> None:
    # The fns are idempotent anyway; not repeating them keeps the patch tidy in logs.
    if fn not in patch.fns:
        patch.fns.append(fn)
