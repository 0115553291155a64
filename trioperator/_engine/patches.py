"""The patch that handlers fill and the framework applies at the end of a processing cycle.

A ``Patch`` is a JSON merge-patch dict (``None`` deletes a key) plus ``fns``: transformation
functions that edit a copy of the freshest body and are turned into a JSON-patch (RFC 6902)
guarded by a ``test`` on ``metadata.resourceVersion``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from trioperator._engine.bodies import RawBody

PatchFn = Callable[[RawBody], None]
"""A transformation function: edits the given (copied) body in place."""

JSONPatch = list[dict[str, Any]]


class _SubPatch(MutableMapping[str, Any]):
    """A view of one top-level stanza of a patch that creates the stanza on first write."""

    __slots__ = ("_key", "_patch")

    def __init__(self, patch: Patch, key: str) -> None:
        self._patch = patch
        self._key = key

    def _get(self) -> dict[str, Any]:
        value = self._patch.get(self._key)
        return value if isinstance(value, dict) else {}

    def _ensure(self) -> dict[str, Any]:
        value = self._patch.get(self._key)
        if not isinstance(value, dict):
            value = self._patch[self._key] = {}
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
        return _NestedPatch(self, "labels")

    @property
    def annotations(self) -> MutableMapping[str, Any]:
        return _NestedPatch(self, "annotations")


class _NestedPatch(_SubPatch):
    def __init__(self, parent: _SubPatch, key: str) -> None:  # noqa: D107
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


class Patch(dict[str, Any]):
    """A merge-patch dict with ``meta``/``metadata``, ``spec``, ``status`` views and ``fns``."""

    def __init__(self, src: dict[str, Any] | None = None, *, fns: list[PatchFn] | None = None) -> None:
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
        return bool(dict(self)) or bool(self.fns)

    def __repr__(self) -> str:
        extra = f", fns={len(self.fns)}" if self.fns else ""
        return f"Patch({dict.__repr__(self)}{extra})"
