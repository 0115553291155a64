"""The patch that handlers fill and the framework applies at the end of a processing cycle.

A ``Patch`` is a JSON merge-patch dict (``None`` deletes a key) plus ``fns``: transformation
functions that edit a copy of the freshest body and are turned into a JSON-patch (RFC 6902)
guarded by a ``test`` on ``metadata.resourceVersion``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

from trioperator._engine.bodies import RawBody

PatchFn = Callable[[RawBody], None]
"""A transformation function: edits the given (copied) body in place."""

JSONPatch = list[dict[str, Any]]


class _SubPatch(MutableMapping[str, Any]):
    """A view of one stanza of a patch (or of a stanza) that creates it on first write."""

    __slots__ = ("_key", "_parent")

    def __init__(self, parent: MutableMapping[str, Any], key: str) -> None:
        self._parent = parent
        self._key = key

    def _get(self) -> dict[str, Any]:
        value = self._parent.get(self._key)
        return value if isinstance(value, dict) else {}

    def _ensure(self) -> dict[str, Any]:
        value = self._parent.get(self._key)
        if not isinstance(value, dict):
            value = {}
            self._parent[self._key] = value
        return value

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._ensure()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._ensure()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())


class MetaPatch(_SubPatch):
    @property
    def labels(self) -> MutableMapping[str, Any]:
        return _SubPatch(self, "labels")

    @property
    def annotations(self) -> MutableMapping[str, Any]:
        return _SubPatch(self, "annotations")


class Patch(dict[str, Any]):
    """A merge-patch dict with ``meta``/``metadata``, ``spec``, ``status`` views and ``fns``."""

    def __init__(
        self, src: dict[str, Any] | None = None, *, fns: list[PatchFn] | None = None
    ) -> None:
        super().__init__(src or {})
        self.fns: list[PatchFn] = list(fns or [])
        if isinstance(src, Patch) and fns is None:
            self.fns = list(src.fns)

    @property
    def metadata(self) -> MetaPatch:
        return MetaPatch(self, "metadata")

    meta = metadata

    @property
    def spec(self) -> _SubPatch:
        return _SubPatch(self, "spec")

    @property
    def status(self) -> _SubPatch:
        return _SubPatch(self, "status")

    def __bool__(self) -> bool:
        return dict.__len__(self) != 0 or bool(self.fns)

    def __repr__(self) -> str:
        extra = f", fns={len(self.fns)}" if self.fns else ""
        return f"Patch({dict.__repr__(self)}{extra})"


# ------------------------------------------------------------------ JSON-patch (RFC 6902)


class JSONPatchError(ValueError):
    """A JSON-patch cannot be applied: a bad operation, or a path that does not exist."""


class JSONPatchTestFailed(JSONPatchError):
    """A ``test`` operation found a different value (the API answers such a patch with 422)."""


RESOURCE_VERSION_POINTER = "/metadata/resourceVersion"


def build_json_patch(
    body: Mapping[str, Any],
    fns: Sequence[PatchFn],
    *,
    resource_version: str | None,
) -> JSONPatch:
    """Run the transformation functions on a copy of ``body``; return the ops they amount to.

    The ops turn ``body`` into the transformed copy. When ``resource_version`` is given, they
    are guarded by a leading ``test`` of ``metadata.resourceVersion``, so the API rejects them
    (422) if the object changed since ``body`` was seen: the fns can then be re-run on the newer
    body. Returns ``[]`` if the functions changed nothing, so that no API call is needed.
    """
    original = copy.deepcopy(dict(body))
    result = copy.deepcopy(original)
    for fn in fns:
        fn(result)

    ops: JSONPatch = []
    _diff_values(original, result, "", ops)
    if not ops:
        return []
    if resource_version is not None:
        ops.insert(0, {"op": "test", "path": RESOURCE_VERSION_POINTER, "value": resource_version})
    return ops


def escape_pointer_token(key: str) -> str:
    """Escape one key for a JSON pointer (RFC 6901): ``~`` → ``~0``, ``/`` → ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


def unescape_pointer_token(token: str) -> str:
    """Reverse :func:`escape_pointer_token` (``~1`` first, so ``~01`` stays ``~1``)."""
    return token.replace("~1", "/").replace("~0", "~")


def _kind(value: Any) -> str:
    """The JSON type of a value, so that ``True`` differs from ``1`` and ``1`` from ``"1"``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: booleans are not numbers (unlike ``True == 1`` in Python), and
    the key order of objects does not matter."""
    kind = _kind(a)
    if kind != _kind(b):
        return False
    if kind == "object":
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    if kind == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _diff_values(old: Any, new: Any, pointer: str, ops: JSONPatch) -> None:
    """Append the ops that turn ``old`` (found at ``pointer``) into ``new``."""
    kind = _kind(old)
    if kind != _kind(new):
        ops.append({"op": "replace", "path": pointer, "value": new})
    elif kind == "object":
        _diff_objects(old, new, pointer, ops)
    elif kind == "array":
        _diff_arrays(old, new, pointer, ops)
    elif not json_equal(old, new):
        ops.append({"op": "replace", "path": pointer, "value": new})


def _diff_objects(
    old: Mapping[str, Any], new: Mapping[str, Any], pointer: str, ops: JSONPatch
) -> None:
    for key, value in old.items():
        path = f"{pointer}/{escape_pointer_token(key)}"
        if key not in new:
            ops.append({"op": "remove", "path": path})
        else:
            _diff_values(value, new[key], path, ops)
    for key, value in new.items():
        if key not in old:
            ops.append(
                {"op": "add", "path": f"{pointer}/{escape_pointer_token(key)}", "value": value}
            )


def _diff_arrays(old: Sequence[Any], new: Sequence[Any], pointer: str, ops: JSONPatch) -> None:
    """Precise index ops: keep the common head and tail, edit only the middle.

    This turns the usual list edits (append, insert or remove one item, e.g. a finalizer)
    into one op each. Inside the middle, items are compared pairwise; the surplus is added in
    ascending order or removed from the end backwards, so every index is valid when applied.
    """
    shortest = min(len(old), len(new))
    head = 0
    while head < shortest and json_equal(old[head], new[head]):
        head += 1
    tail = 0
    while tail < shortest - head and json_equal(old[-1 - tail], new[-1 - tail]):
        tail += 1
    old_mid = old[head : len(old) - tail]
    new_mid = new[head : len(new) - tail]

    paired = min(len(old_mid), len(new_mid))
    for offset in range(paired):
        _diff_values(old_mid[offset], new_mid[offset], f"{pointer}/{head + offset}", ops)
    for offset in range(paired, len(new_mid)):
        ops.append({"op": "add", "path": f"{pointer}/{head + offset}", "value": new_mid[offset]})
    for offset in reversed(range(paired, len(old_mid))):
        ops.append({"op": "remove", "path": f"{pointer}/{head + offset}"})


def _parse_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise JSONPatchError(f"A JSON pointer must be empty or start with '/': {pointer!r}")
    return [unescape_pointer_token(token) for token in pointer[1:].split("/")]


def _array_index(container: list[Any], token: str, *, for_insert: bool = False) -> int:
    if for_insert and token == "-":
        return len(container)
    # ASCII digits only: str.isdigit() also accepts e.g. superscripts, which int() refuses.
    if not (token.isascii() and token.isdigit()) or (token != "0" and token.startswith("0")):
        raise JSONPatchError(f"Not an array index: {token!r}")
    index = int(token)
    limit = len(container) + (1 if for_insert else 0)
    if index >= limit:
        raise JSONPatchError(f"Array index {index} is out of range (length {len(container)}).")
    return index


def _walk(doc: Any, tokens: list[str]) -> Any:
    value = doc
    for token in tokens:
        if isinstance(value, dict):
            if token not in value:
                raise JSONPatchError(f"No such key: {token!r}")
            value = value[token]
        elif isinstance(value, list):
            value = value[_array_index(value, token)]
        else:
            raise JSONPatchError(f"Cannot descend into a {_kind(value)} with {token!r}")
    return value


def _get(doc: Any, pointer: str) -> Any:
    return _walk(doc, _parse_pointer(pointer))


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _parse_pointer(pointer)
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_array_index(parent, tokens[-1], for_insert=True), value)
    else:
        raise JSONPatchError(f"Cannot add into a {_kind(parent)} at {pointer!r}")
    return doc


def _replace(doc: Any, pointer: str, value: Any) -> Any:
    """Replace an existing value in place (a dict keeps its key order)."""
    tokens = _parse_pointer(pointer)
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise JSONPatchError(f"No such key to replace: {pointer!r}")
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent[_array_index(parent, tokens[-1])] = value
    else:
        raise JSONPatchError(f"Cannot replace in a {_kind(parent)} at {pointer!r}")
    return doc


def _remove(doc: Any, pointer: str) -> tuple[Any, Any]:
    """Remove the value at ``pointer``; return the document and the removed value."""
    tokens = _parse_pointer(pointer)
    if not tokens:
        raise JSONPatchError("Cannot remove the whole document.")
    parent = _walk(doc, tokens[:-1])
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise JSONPatchError(f"No such key to remove: {pointer!r}")
        return doc, parent.pop(tokens[-1])
    if isinstance(parent, list):
        return doc, parent.pop(_array_index(parent, tokens[-1]))
    raise JSONPatchError(f"Cannot remove from a {_kind(parent)} at {pointer!r}")


def apply_json_patch(doc: Any, ops: Sequence[Mapping[str, Any]]) -> Any:
    """Apply RFC 6902 operations to a deep copy of ``doc`` and return it; ``doc`` is untouched.

    All six operations are supported. The patch is atomic: on any error (including a failed
    ``test``), :class:`JSONPatchError` is raised and nothing is returned.
    """
    result = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, Mapping):
            raise JSONPatchError(f"An operation must be an object: {op!r}")
        name = op.get("op")
        path = op.get("path")
        if not isinstance(path, str):
            raise JSONPatchError(f"An operation without a valid path: {op!r}")
        if name in ("add", "replace", "test") and "value" not in op:
            raise JSONPatchError(f"An operation without a value: {op!r}")
        if name in ("move", "copy") and not isinstance(op.get("from"), str):
            raise JSONPatchError(f"An operation without a valid 'from': {op!r}")

        if name == "add":
            result = _add(result, path, copy.deepcopy(op["value"]))
        elif name == "remove":
            result, _ = _remove(result, path)
        elif name == "replace":
            result = _replace(result, path, copy.deepcopy(op["value"]))
        elif name == "move":
            source = op["from"]
            if path != source and path.startswith(source + "/"):
                raise JSONPatchError(f"Cannot move a value into itself: {op!r}")
            result, value = _remove(result, source)
            result = _add(result, path, value)
        elif name == "copy":
            result = _add(result, path, copy.deepcopy(_get(result, op["from"])))
        elif name == "test":
            if not json_equal(_get(result, path), op["value"]):
                raise JSONPatchTestFailed(f"The test failed at {path!r}: {op['value']!r}")
        else:
            raise JSONPatchError(f"Unknown operation: {op!r}")
    return result


# ------------------------------------------------------------------ merge-patch (RFC 7386)


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """Apply a JSON merge-patch to a deep copy of ``doc`` and return it; ``doc`` is untouched.

    Dicts merge recursively, ``None`` deletes a key, anything else (lists included) replaces
    the value. A dict patch over a non-dict value starts from an empty dict.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(dict(doc)) if isinstance(doc, Mapping) else {}
    _merge_into(result, patch)
    return result


def _merge_into(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping):
            current = target.get(key)
            if not isinstance(current, dict):
                current = target[key] = {}
            _merge_into(current, value)
        else:
            target[key] = copy.deepcopy(value)


# ------------------------------------------------------------------ status subresource


def split_status(patch: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a merge-patch for a resource with a ``status`` subresource.

    Returns ``(body_patch, status_patch)``: the patch without ``status`` for the object's URL,
    and ``{'status': ...}`` for the ``/status`` URL (the main URL ignores status changes for
    such resources). Either may be empty, meaning that no request is needed for it.
    """
    body_patch = {key: value for key, value in patch.items() if key != "status"}
    status_patch = {"status": patch["status"]} if "status" in patch else {}
    return body_patch, status_patch


def split_json_patch_status(ops: Sequence[Mapping[str, Any]]) -> tuple[JSONPatch, JSONPatch]:
    """Split JSON-patch ops into those for the object's URL and those for ``/status``.

    A leading ``test`` of the resourceVersion goes with each part that has other ops. Note
    that applying the first part changes the resourceVersion: refresh the second part's test
    value from the first response before sending it.
    """
    guard: list[dict[str, Any]] = []
    rest = list(ops)
    if rest and rest[0].get("op") == "test" and rest[0].get("path") == RESOURCE_VERSION_POINTER:
        guard = [dict(rest.pop(0))]
    body_ops: JSONPatch = []
    status_ops: JSONPatch = []
    for op in rest:
        path = op.get("path", "")
        target = status_ops if path == "/status" or path.startswith("/status/") else body_ops
        target.append(dict(op))
    return (
        [*copy.deepcopy(guard), *body_ops] if body_ops else [],
        [*copy.deepcopy(guard), *status_ops] if status_ops else [],
    )
