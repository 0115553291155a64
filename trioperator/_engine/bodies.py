"""Read-only, live views of Kubernetes objects as handlers receive them.

``RawBody`` is the object as decoded from JSON. ``Body`` wraps it without copying; its ``meta``,
``spec`` and ``status`` are views into it, so replacing the wrapped dict (as daemons' live bodies
do) is seen through every view that was handed out before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal, TypedDict

RawBody = dict[str, Any]
"""A Kubernetes object as decoded from JSON."""


RawEventType = Literal[None, "ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
"""The ``type`` of a watch event as Kopf declares it (``None`` for objects from a listing).
Bookmarks never reach handlers: the watcher consumes them."""


class RawEvent(TypedDict):
    """A watch event: ``type`` is ADDED/MODIFIED/DELETED, or ``None`` for objects from a listing."""

    type: Literal["ADDED", "MODIFIED", "DELETED"] | None
    object: RawBody


class _SourceHolder:
    """A shared, replaceable reference to the raw body, so all views stay live."""

    __slots__ = ("raw",)

    def __init__(self, raw: RawBody) -> None:
        self.raw = raw


class MappingView(Mapping[str, Any]):
    """A read-only view of a dict found at a path inside the raw body (empty if absent)."""

    __slots__ = ("_holder", "_path")

    def __init__(self, holder: _SourceHolder, path: tuple[str, ...]) -> None:
        self._holder = holder
        self._path = path

    def _resolve(self) -> Mapping[str, Any]:
        # Called on every key lookup: plain dicts (what JSON decodes to) skip the costlier
        # check against the Mapping ABC.
        value: Any = self._holder.raw
        for key in self._path:
            if type(value) is not dict and not isinstance(value, Mapping):
                return {}
            value = value.get(key)
        return value if type(value) is dict or isinstance(value, Mapping) else {}

    def __getitem__(self, key: str) -> Any:
        return self._resolve()[key]

    # The Mapping mixins would resolve the path once per step (and raise and catch a KeyError
    # for every absent key); these resolve it once, with the same results.
    def get(self, key: str, default: Any = None) -> Any | None:
        return self._resolve().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._resolve()

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolve())

    def __len__(self) -> int:
        return len(self._resolve())

    def __repr__(self) -> str:
        return repr(dict(self._resolve()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._resolve()) == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class Spec(MappingView):
    """The object's ``spec``: a live, read-only view of the body's field (empty if absent)."""


class Status(MappingView):
    """The object's ``status``: a live, read-only view of the body's field (empty if absent)."""


class Labels(MappingView):
    """The object's ``metadata.labels``: a live, read-only view (empty if absent)."""


class Annotations(MappingView):
    """The object's ``metadata.annotations``: a live, read-only view (empty if absent)."""


class Meta(MappingView):
    """``metadata`` with shortcuts for the fields handlers use most."""

    @property
    def labels(self) -> Labels:
        return Labels(self._holder, (*self._path, "labels"))

    @property
    def annotations(self) -> Annotations:
        return Annotations(self._holder, (*self._path, "annotations"))

    @property
    def uid(self) -> str | None:
        return self.get("uid")

    @property
    def name(self) -> str | None:
        return self.get("name")

    @property
    def namespace(self) -> str | None:
        return self.get("namespace")

    @property
    def resource_version(self) -> str | None:
        return self.get("resourceVersion")

    @property
    def creation_timestamp(self) -> str | None:
        return self.get("creationTimestamp")

    @property
    def deletion_timestamp(self) -> str | None:
        return self.get("deletionTimestamp")

    @property
    def finalizers(self) -> list[str]:
        return list(self.get("finalizers") or [])


class Body(MappingView):
    """The whole object, read-only; ``meta``/``metadata``, ``spec``, ``status`` are live views."""

    def __init__(self, raw: RawBody) -> None:
        super().__init__(_SourceHolder(raw), ())

    @property
    def raw(self) -> RawBody:
        """The wrapped dict itself (not a copy): treat as read-only."""
        return self._holder.raw

    def replace(self, raw: RawBody) -> None:
        """Point this body and all its views at a newer version of the object."""
        self._holder.raw = raw

    @property
    def metadata(self) -> Meta:
        return Meta(self._holder, ("metadata",))

    meta = metadata

    @property
    def spec(self) -> Spec:
        return Spec(self._holder, ("spec",))

    @property
    def status(self) -> Status:
        return Status(self._holder, ("status",))
