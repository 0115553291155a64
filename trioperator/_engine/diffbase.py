"""The last-handled configuration ("diff-base"): what an object looked like when last handled.

Changes are detected by comparing the object's *essence* now with the essence stored when its
previous change was fully handled. The essence is what a user means by the object: everything
but the system-managed parts. Precisely (the same as Kopf, so both agree on what changed):

* ``apiVersion``, ``kind``, ``status`` and all of ``metadata`` are dropped, except
  ``metadata.labels`` and ``metadata.annotations``;
* from the annotations, ``kubectl.kubernetes.io/last-applied-configuration`` and all annotations
  under prefixes of Kopf-based operators (see ``conventions``) are dropped, and so are the
  storage's own keys;
* fields that handlers watch explicitly (``extra_fields``, e.g. ``status.phase`` for a
  ``field='status.phase'`` handler) are put back from the body;
* emptied ``metadata.annotations``/``labels``, ``metadata`` and ``status`` are removed;
* finally, the storage's ``ignored_fields`` are removed (with parents they leave empty).

Kopf stores it as compact JSON plus a newline in the annotation
``kopf.zalando.org/last-handled-configuration``, or, with ``StatusDiffBaseStorage``, as a JSON
string (no newline) in ``status.kopf.last-handled-configuration``. The key order of the JSON
follows from the steps above and matches Kopf's.
"""

from __future__ import annotations

import abc
import json
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TypeAlias

from trioperator._engine.bodies import Body, MappingView
from trioperator._engine.conventions import (
    ANNOTATIONS_LIMIT,
    DEFAULT_PREFIX,
    KUBECTL_LAST_APPLIED,
    FieldPath,
    FieldSpec,
    StorageKeyFormingConvention,
    StorageKeyMarkingConvention,
    StorageStanzaCleaner,
    annotations_size_after,
    cherrypick_fields,
    copy_json,
    format_field,
    purge_field,
    remove_field,
    resolve_field,
    set_field_if_changed,
)
from trioperator._engine.patches import Patch
from trioperator._wire.compact_json import dumps_compact

__all__ = [
    "AnnotationsDiffBaseStorage",
    "BodyEssence",
    "DiffBaseStorage",
    "MultiDiffBaseStorage",
    "StatusDiffBaseStorage",
]

BodyEssence: TypeAlias = dict[str, Any]
"""An object reduced to what counts for change detection (JSON-compatible, nested dicts)."""

_IMPLICIT_METADATA = (("metadata", "labels"), ("metadata", "annotations"))
_DROPPED_TOP_LEVEL = ("apiVersion", "kind", "metadata", "status")


_logger = logging.getLogger("trioperator.persistence")

OVERSIZED_FALLBACK = ("status", "kopf", "last-handled-configuration")
"""Where :class:`AnnotationsDiffBaseStorage` keeps an essence too big for the annotations (the
field of :class:`StatusDiffBaseStorage`'s default, so either storage reads it)."""


def _describe(body: Body) -> str:
    metadata = body.get("metadata")
    meta = metadata if isinstance(metadata, Mapping) else {}
    namespace, name = meta.get("namespace"), meta.get("name")
    return f"{namespace}/{name}" if namespace else f"{name}"


def _encode(essence: Mapping[str, Any]) -> str:
    return dumps_compact(essence)


class CorruptDiffBaseError(ValueError):
    """A stored diff-base cannot be read; the object is not handled until it is fixed."""


def _decode(encoded: Any, where: str = "the diff-base") -> BodyEssence | None:
    """Parse a stored essence; ``None`` if there is none (absent, or not a string/JSON object).

    Invalid JSON raises :class:`CorruptDiffBaseError` instead: taking it for "never handled"
    would re-run creation handlers. The object is retried with the usual error throttling, so
    fixing or removing the value by hand resumes its handling.
    Surrounding whitespace, such as the trailing newline, is fine for ``json.loads``.
    """
    if not isinstance(encoded, str):
        return None
    try:
        decoded = json.loads(encoded)
    except ValueError as exc:
        raise CorruptDiffBaseError(
            f"The diff-base in {where} is not valid JSON ({exc}): fix or remove it by hand; "
            "the object is not handled until then, to not run its creation handlers again."
        ) from None
    return decoded if isinstance(decoded, dict) else None


class DiffBaseStorage(StorageKeyMarkingConvention, StorageStanzaCleaner, abc.ABC):
    """The interface of all diff-base storages, and the essence building they share.

    ``ignored_fields`` (dotted strings, tuples or lists) are excluded from the essence: changes
    there never trigger update handlers.
    """

    def __init__(self, ignored_fields: Iterable[FieldSpec] | None = None) -> None:
        super().__init__()
        self.ignored_fields: list[FieldSpec] = list(ignored_fields or [])

    def build(self, *, body: Body, extra_fields: Iterable[FieldSpec] | None = None) -> BodyEssence:
        """The essence of the object: only the fields whose changes matter (see the module)."""
        # Only what stays is copied (status and metadata can be the bulk of a body); the key
        # order is the body's, as if everything were copied and the dropped keys popped.
        # (Through to the dict at once: a view would resolve itself again for every key.)
        source = body._resolve() if isinstance(body, MappingView) else body
        essence: BodyEssence = {
            key: copy_json(value) for key, value in source.items() if key not in _DROPPED_TOP_LEVEL
        }

        cherrypick_fields(body, essence, _IMPLICIT_METADATA)
        metadata = essence.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
        if isinstance(annotations, dict):
            kopf_prefixes = self.detect_marked_prefixes(annotations)
            for name in list(annotations):
                prefix, slash, _ = name.partition("/")
                if name == KUBECTL_LAST_APPLIED or (slash and prefix in kopf_prefixes):
                    del annotations[name]

        cherrypick_fields(body, essence, extra_fields)
        self.remove_empty_stanzas(essence)

        for field in self.ignored_fields:
            try:
                remove_field(essence, field)
            except TypeError:
                pass  # a non-dict on the way: the field cannot be there
        return essence

    @abc.abstractmethod
    def fetch(self, *, body: Body) -> BodyEssence | None:
        raise NotImplementedError

    @abc.abstractmethod
    def store(self, *, body: Body, patch: Patch, essence: BodyEssence) -> None:
        raise NotImplementedError


class AnnotationsDiffBaseStorage(StorageKeyFormingConvention, DiffBaseStorage):
    """The essence as compact JSON with a trailing newline in the annotation ``prefix/key``.

    (The newline keeps ``kubectl``'s output readable, as with its own last-applied annotation.)
    """

    def __init__(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        key: str = "last-handled-configuration",
        ignored_fields: Iterable[FieldSpec] | None = None,
        v1: bool = True,
    ) -> None:
        super().__init__(prefix=prefix, v1=v1, ignored_fields=ignored_fields)
        self.key = key

    def build(self, *, body: Body, extra_fields: Iterable[FieldSpec] | None = None) -> BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        # Our own key must go even when the prefix is not (yet) recognised as Kopf-managed.
        self.remove_annotations(essence, set(self.make_keys(self.key, body=body)))
        self.remove_empty_stanzas(essence)
        return essence

    def fetch(self, *, body: Body) -> BodyEssence | None:
        for name in self.make_keys(self.key, body=body):
            value = resolve_field(body, ("metadata", "annotations", name), None)
            essence = _decode(value, where=f"the annotation {name!r}")
            if essence is not None:
                return essence
        where = "the status field " + ".".join(OVERSIZED_FALLBACK)
        return _decode(resolve_field(body, OVERSIZED_FALLBACK, None), where=where)

    def store(self, *, body: Body, patch: Patch, essence: BodyEssence) -> None:
        encoded = _encode(essence) + "\n"
        names = list(self.make_keys(self.key, body=body))
        size = annotations_size_after(body=body, patch=patch, changes=dict.fromkeys(names, encoded))
        if size > ANNOTATIONS_LIMIT:
            # The API server would reject the whole patch (and the handlers' results with it):
            # keep the essence in the status instead, where fetch() finds it too.
            _logger.warning(
                f"The diff-base of {_describe(body)} does not fit into its annotations "
                f"({size} bytes with it, over the limit of {ANNOTATIONS_LIMIT}): it is stored "
                f"in the status field {'.'.join(OVERSIZED_FALLBACK)} instead."
            )
            for name in names:
                purge_field(body=body, patch=patch, field=("metadata", "annotations", name))
            set_field_if_changed(
                body=body, patch=patch, field=OVERSIZED_FALLBACK, value=_encode(essence)
            )
            return
        for name in names:
            field = ("metadata", "annotations", name)
            set_field_if_changed(body=body, patch=patch, field=field, value=encoded)
        purge_field(body=body, patch=patch, field=OVERSIZED_FALLBACK)
        self.store_marker(prefix=self.prefix, patch=patch, body=body)


class StatusDiffBaseStorage(DiffBaseStorage):
    """The essence as a compact JSON string (no newline) in a status field.

    A string rather than a nested dict: a merge-patch of a dict would merge with the old
    essence instead of replacing it.
    """

    def __init__(
        self,
        *,
        name: str = "kopf",
        field: FieldSpec = "status.{name}.last-handled-configuration",
        ignored_fields: Iterable[FieldSpec] | None = None,
    ) -> None:
        super().__init__(ignored_fields=ignored_fields)
        self._name = name
        self._field = format_field(field, self._name)

    @property
    def field(self) -> FieldPath:
        return self._field

    @field.setter
    def field(self, field: FieldSpec) -> None:
        self._field = format_field(field, self._name)

    def build(self, *, body: Body, extra_fields: Iterable[FieldSpec] | None = None) -> BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        try:
            remove_field(essence, self.field)  # if restored as (a part of) an extra field
        except TypeError:
            pass
        return essence

    def fetch(self, *, body: Body) -> BodyEssence | None:
        return _decode(resolve_field(body, self.field, None))

    def store(self, *, body: Body, patch: Patch, essence: BodyEssence) -> None:
        set_field_if_changed(body=body, patch=patch, field=self.field, value=_encode(essence))


class MultiDiffBaseStorage(DiffBaseStorage):
    """Several storages at once: read from the first that has an essence, write to all.

    This is the way to move an operator from one storage to another (new one first).
    """

    def __init__(self, storages: Collection[DiffBaseStorage]) -> None:
        super().__init__()
        self.storages = list(storages)

    def build(self, *, body: Body, extra_fields: Iterable[FieldSpec] | None = None) -> BodyEssence:
        extra = list(extra_fields or [])  # used repeatedly: an iterator would run out
        essence = super().build(body=body, extra_fields=extra)
        # Each storage removes its own fields too; what is left of the body is its input.
        for storage in self.storages:
            essence = storage.build(body=Body(essence), extra_fields=extra)
        return essence

    def fetch(self, *, body: Body) -> BodyEssence | None:
        for storage in self.storages:
            essence = storage.fetch(body=body)
            if essence is not None:
                return essence
        return None

    def store(self, *, body: Body, patch: Patch, essence: BodyEssence) -> None:
        for storage in self.storages:
            storage.store(body=body, patch=patch, essence=essence)


_OWNING_STORAGES = frozenset({AnnotationsDiffBaseStorage, StatusDiffBaseStorage})


def gives_own_essences(storage: DiffBaseStorage) -> bool:
    """Whether ``build()`` and ``fetch()`` return essences nobody else holds (new dicts).

    This module's storages do (built anew, or decoded from their JSON): callers may change
    those in place instead of copying them. Other storages (users' own) might keep theirs.
    """
    return type(storage) in _OWNING_STORAGES
