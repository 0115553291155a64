"""The echo of the operator's own write: when it is known in advance to be a no-op.

Every cycle that writes its results and marks makes the API server send the written state back
as a watch event (the echo). The worker must see it (it is how consistency is known), but the
change handling of it finds nothing to do when all of these hold:

* the cycle that wrote it left nothing to do: its cause was fully handled (or there was
  none), no handler is due later, no finalizer was added or removed;
* what it wrote can change nothing the change handling looks at: only ``status`` and
  ``metadata.annotations``, none of it in the essence (the diff-base of the object is what it
  was before the write), and the need of the finalizer depends on the labels alone;
* the write landed on the state the cycle handled: the API server's answer is that state with
  the patch, nothing else changed in between that the change handling reads;
* the echo is exactly that write: a ``MODIFIED`` event with the ``resourceVersion`` the API
  server answered, so its body is the answer, byte for byte.

The worker then skips the change handling of that one event (the echo still counts for
consistency, ``on.event`` handlers, daemons and indices as usual). The check compares dicts
that are already there (C-level equality, no copies) and builds the essence of the annotations
alone, not of the whole body.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from trioperator._engine.bodies import Body, RawBody
from trioperator._engine.diffbase import BodyEssence, DiffBaseStorage, gives_own_essences
from trioperator._engine.patches import Patch
from trioperator._engine.progress import ProgressStorage, clear_owned

_WRITABLE_TOP_LEVEL = frozenset({"metadata", "status"})
_UNREAD_TOP_LEVEL = ("metadata", "status")
_READ_METADATA = ("labels", "finalizers", "deletionTimestamp", "ownerReferences")


def echo_is_noop(
    *,
    before: RawBody,
    patch: Patch,
    written: RawBody,
    diffbase: DiffBaseStorage,
    progress: ProgressStorage,
    extra_fields: Collection[Any],
) -> bool:
    """Whether the change handling of ``written`` would find nothing new after ``before``.

    ``before`` is the state a settled cycle handled, ``patch`` what it wrote, ``written`` the
    API server's answer to the write (the state the echo will bring). The write may have landed
    on a newer state than ``before`` (someone else's change in between): then ``written`` is not
    ``before`` with the patch, and the answer is ``False``. Conservative: also ``False`` whenever
    it cannot be told cheaply (transformation functions, fields outside the status and the
    annotations, fields the handlers watch, users' own diff-base storages, which may build
    essences from anything).
    """
    if patch.fns or extra_fields or not gives_own_essences(diffbase):
        return False
    if any(key not in _WRITABLE_TOP_LEVEL for key in patch):
        return False  # e.g. the spec, or anything a handler put into its patch
    patched_metadata = patch.get("metadata", {})
    if not isinstance(patched_metadata, dict) or any(k != "annotations" for k in patched_metadata):
        return False  # labels, finalizers, owner references, ...
    patched = patched_metadata.get("annotations", {})
    if not isinstance(patched, dict):
        return False  # null: all annotations are gone
    # The spec and every other field but the status and metadata: as handled, or someone
    # else has changed them meanwhile (dict equality, no copies).
    for key in before.keys() | written.keys():
        if key not in _UNREAD_TOP_LEVEL and before.get(key) != written.get(key):
            return False
    metadata, written_metadata = before.get("metadata"), written.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(written_metadata, dict):
        return False
    for key in _READ_METADATA:
        if metadata.get(key) != written_metadata.get(key):
            return False
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict):
        return False
    expected = {**annotations, **patched}
    for key, value in patched.items():
        if value is None:
            del expected[key]  # merge-patch: null removes
    if expected != (written_metadata.get("annotations") or {}):
        return False
    if not patched:
        return True  # the status alone: it is not in the essence without extra fields
    kind = before.get("kind")
    if kind == "ReplicaSet":  # its storage keys depend on its owner: no shortcut
        return _essence(diffbase, progress, kind, metadata, annotations) == _essence(
            diffbase, progress, kind, metadata, expected
        )
    same, counted = _counted_names(diffbase, progress, kind, annotations, expected)
    # The written annotations must not count (even if some value stayed as it was).
    return same and counted.isdisjoint(patched)


def _counted_names(
    diffbase: DiffBaseStorage,
    progress: ProgressStorage,
    kind: Any,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
) -> tuple[bool, frozenset[str]]:
    """Whether the essence keeps the same annotations before and after, and which ones.

    A question of names only: which annotations count depends on their names and on the
    other names (the markers of Kopf-based operators), not on the values. The answer for two
    sets of names is kept: the objects of a resource usually have the same ones. It is kept
    per storage object, whose settings (prefixes, ignored fields) are those of the operator's
    start, as the startup handlers leave them.
    """
    names = (frozenset(before), frozenset(after))
    key = (id(diffbase), id(progress), kind, *names)
    cached = _COUNTED.get(key)
    if cached is not None and cached[0] is diffbase and cached[1] is progress:
        return cached[2], cached[3]
    kept = [_kept_names(diffbase, progress, kind, each) for each in names]
    same, counted = kept[0] == kept[1], kept[0] | kept[1]
    if len(_COUNTED) >= _COUNTED_LIMIT:
        _COUNTED.clear()  # e.g. objects with many different annotations: stay small
    # The storages are kept with the answer: their ids cannot be reused while it is here.
    _COUNTED[key] = (diffbase, progress, same, counted)
    return same, counted


_COUNTED: dict[tuple[Any, ...], tuple[object, object, bool, frozenset[str]]] = {}
_COUNTED_LIMIT = 256


def _kept_names(
    diffbase: DiffBaseStorage, progress: ProgressStorage, kind: Any, names: frozenset[str]
) -> frozenset[str]:
    essence = _essence(diffbase, progress, kind, {}, dict.fromkeys(names, ""))
    metadata = essence.get("metadata")
    kept = metadata.get("annotations") if isinstance(metadata, dict) else None
    return frozenset(kept) if isinstance(kept, dict) else frozenset()


def _essence(
    diffbase: DiffBaseStorage,
    progress: ProgressStorage,
    kind: Any,
    metadata: Mapping[str, Any],
    annotations: dict[str, Any],
) -> BodyEssence:
    # Only metadata: everything else of the body is the same before and after the write.
    body = Body({"kind": kind, "metadata": {**metadata, "annotations": annotations}})
    return clear_owned(progress, diffbase.build(body=body, extra_fields=()))
