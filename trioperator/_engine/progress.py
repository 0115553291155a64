"""Where the per-handler progress of an object is kept between processing cycles.

A change (creation, update, deletion, resuming) may take several cycles to handle: handlers run
one by one, fail temporarily and are retried later, or the operator restarts in between. What each
handler has achieved so far is a small record, stored per handler id on the object itself:

* ``started``, ``stopped``, ``delayed``: ISO-8601 timestamps (first attempt, final outcome, next
  attempt);
* ``purpose``: the reason of the change the record belongs to (``create``, ``update``, …);
* ``retries``: attempts so far; ``success``/``failure``: final outcomes;
* ``message``: the last error; ``subrefs``: ids of sub-handlers, to purge their records later.

Records are independent of each other, so that operators with different handler ids can share one
place without merging anything, and are purged one by one when the change is fully handled.

The default is Kopf's: records in annotations ``kopf.zalando.org/<handler-id>`` as compact JSON,
plus the legacy ``status.kopf.progress.<handler-id>`` read as a fallback (written by Kopf < 1.44)
but never written any more. The formats match Kopf's byte for byte.
"""

from __future__ import annotations

import abc
import json
import logging
from collections.abc import Collection, Mapping
from typing import Any, TypedDict, TypeGuard, cast

from trioperator._engine.bodies import Body
from trioperator._engine.conventions import (
    ANNOTATIONS_LIMIT,
    DEFAULT_PREFIX,
    FieldPath,
    FieldSpec,
    StorageKeyFormingConvention,
    StorageKeyMarkingConvention,
    StorageStanzaCleaner,
    annotations_size_after,
    copy_json,
    ensure_field,
    format_field,
    has_field,
    purge_field,
    remove_field,
    resolve_field,
    set_field_if_changed,
)
from trioperator._engine.diffbase import BodyEssence
from trioperator._engine.ids import HandlerId
from trioperator._engine.patches import Patch
from trioperator._wire.compact_json import dumps_compact

__all__ = [
    "AnnotationsProgressStorage",
    "MultiProgressStorage",
    "ProgressRecord",
    "ProgressStorage",
    "SmartProgressStorage",
    "StatusProgressStorage",
]


class ProgressRecord(TypedDict, total=False):
    """The persisted state of one handler (``None`` fields are not stored unless verbose)."""

    started: str | None
    stopped: str | None
    delayed: str | None
    purpose: str | None
    retries: int | None
    success: bool | None
    failure: bool | None
    message: str | None
    subrefs: Collection[str] | None


_logger = logging.getLogger("trioperator.persistence")


def _encode(payload: Mapping[str, Any]) -> str:
    # No spaces: this is what Kopf writes, and what an operator moving between the two must find.
    return dumps_compact(payload)


class ProgressStorage(StorageStanzaCleaner, abc.ABC):
    """The interface of all progress storages; subclass it for a storage of your own.

    Records are read, written and purged one handler at a time. A storage that talks to an
    external system may buffer the writes and do them in ``flush()``, which is called after each
    batch of stores or purges of one object.
    """

    @abc.abstractmethod
    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        raise NotImplementedError

    @abc.abstractmethod
    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        """Set (or with ``None``, remove) a dummy field, so that a change event comes back."""
        raise NotImplementedError

    def clear(self, *, essence: BodyEssence) -> BodyEssence:
        """A copy of the essence without this storage's own fields (so they are not a change)."""
        essence = copy_json(essence)
        return essence

    def flush(self) -> None:
        pass


class AnnotationsProgressStorage(
    StorageKeyFormingConvention, StorageKeyMarkingConvention, ProgressStorage
):
    """Records in ``metadata.annotations`` as compact JSON, e.g.::

        kopf.zalando.org/create_fn: '{"started":"2020-02-14T16:58:25.396364+00:00",
                                      "stopped":"…","purpose":"create","retries":1,
                                      "success":true,"failure":false}'

    Handler ids become annotation names as described in ``conventions``: ``/`` is ``.``, long
    ids are cut and hashed, and with ``v1=True`` the legacy V1 key is written too if different.
    ``verbose=True`` keeps the ``null`` fields in the JSON. ``touch_key`` is the (dashed) name
    of the touch-dummy annotation under the same prefix.
    """

    def __init__(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        verbose: bool = False,
        touch_key: str = "touch-dummy",
        v1: bool = True,
    ) -> None:
        super().__init__(prefix=prefix, v1=v1)
        self.verbose = verbose
        self.touch_key = touch_key
        self.overflow: ProgressStorage | None = None
        """Where records too big for the annotations go instead (None: nowhere)."""

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        for name in self.make_keys(key, body=body):
            encoded = resolve_field(body, ("metadata", "annotations", name), None)
            decoded = json.loads(encoded) if isinstance(encoded, str) else None
            if isinstance(decoded, dict):
                return cast(ProgressRecord, decoded)
        return None

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        payload = {k: v for k, v in record.items() if self.verbose or v is not None}
        encoded = _encode(payload)
        names = list(self.make_keys(key, body=body))
        size = annotations_size_after(body=body, patch=patch, changes=dict.fromkeys(names, encoded))
        if size > ANNOTATIONS_LIMIT:
            # The API server would reject the whole patch. Not stored here (and any older record
            # is removed, not to be read as current), but in ``overflow`` if there is one (the
            # status, in SmartProgressStorage); without, the handler may run again (at least once).
            overflow = self.overflow
            where = "stored in the status instead" if overflow is not None else "not stored"
            _logger.warning(
                f"The progress of handler {key!r} does not fit into the annotations "
                f"({size} bytes with it, over the limit of {ANNOTATIONS_LIMIT}): {where}."
            )
            for name in names:
                purge_field(body=body, patch=patch, field=("metadata", "annotations", name))
            if overflow is not None:
                overflow.store(key=key, record=record, body=body, patch=patch)
            return
        for name in names:
            field = ("metadata", "annotations", name)
            set_field_if_changed(body=body, patch=patch, field=field, value=encoded)
        self.store_marker(prefix=self.prefix, patch=patch, body=body)

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        for name in self.make_keys(key, body=body):
            purge_field(body=body, patch=patch, field=("metadata", "annotations", name))

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        for name in self.make_keys(self.touch_key, body=body):
            field = ("metadata", "annotations", name)
            # Absent and None are the same here: removing what is not there is no change.
            if resolve_field(body, field, None) != value:
                ensure_field(patch, field, value)
                self.store_marker(prefix=self.prefix, patch=patch, body=body)

    def clear(self, *, essence: BodyEssence) -> BodyEssence:
        essence = super().clear(essence=essence)
        self._strip(essence)
        return essence

    def _strip(self, essence: BodyEssence) -> None:
        """Remove this storage's own fields from an essence that is already a private copy."""
        metadata = essence.get("metadata")
        annotations = metadata.get("annotations") if _is_mapping(metadata) else None
        if _is_mapping(annotations):
            head = f"{self.prefix}/"
            ours = {name for name in annotations if name.startswith(head)}
            self.remove_annotations(essence, ours)
        self.remove_empty_stanzas(essence)


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # Dicts without the ABC's Python-level instance check; other mappings as before.
    return value is not None and isinstance(value, (dict, Mapping))


class StatusProgressStorage(ProgressStorage):
    """Records as nested dicts in the status, e.g. ``status.kopf.progress.<handler-id>``.

    This is where Kopf kept the progress until 1.44. Kubernetes prunes unknown status fields of
    resources with structural schemas, so this works only where the schema preserves them.
    """

    def __init__(
        self,
        *,
        name: str = "kopf",
        field: FieldSpec = "status.{name}.progress",
        touch_field: FieldSpec = "status.{name}.dummy",
    ) -> None:
        super().__init__()
        self._name = name
        self._field = format_field(field, name)
        self._touch_field = format_field(touch_field, name)

    @property
    def field(self) -> FieldPath:
        return self._field

    @field.setter
    def field(self, field: FieldSpec) -> None:
        self._field = format_field(field, self._name)

    @property
    def touch_field(self) -> FieldPath:
        return self._touch_field

    @touch_field.setter
    def touch_field(self, field: FieldSpec) -> None:
        self._touch_field = format_field(field, self._name)

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        # Status is editable by anyone; a corrupted container or record counts as no record.
        container = resolve_field(body, self.field, None)
        record = container.get(key) if isinstance(container, Mapping) else None
        return cast(ProgressRecord, dict(record)) if isinstance(record, Mapping) else None

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        field = (*self.field, key)
        stored = resolve_field(body, field, None)
        essential = {k: v for k, v in record.items() if v is not None}
        if (
            not has_field(patch, field)
            and isinstance(stored, Mapping)
            and dict(stored) == essential
        ):
            return
        # The Nones go into the merge-patch as they are: they delete stale fields of the record.
        ensure_field(patch, field, dict(record))

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        purge_field(body=body, patch=patch, field=(*self.field, key))

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        if resolve_field(body, self.touch_field, None) != value:
            ensure_field(patch, self.touch_field, value)

    def clear(self, *, essence: BodyEssence) -> BodyEssence:
        essence = super().clear(essence=essence)
        self._strip(essence)
        return essence

    def _strip(self, essence: BodyEssence) -> None:
        """Remove this storage's own fields from an essence that is already a private copy."""
        try:
            remove_field(essence, self.field)
        except TypeError:
            pass  # a non-dict on the way: nothing of ours is there
        self.remove_empty_stanzas(essence)


class MultiProgressStorage(ProgressStorage):
    """Several storages at once: read from the first that has a record, write to all.

    Useful to move from one storage to another without losing the progress of running changes.
    """

    def __init__(self, storages: Collection[ProgressStorage]) -> None:
        super().__init__()
        self.storages = list(storages)

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        for storage in self.storages:
            record = storage.fetch(key=key, body=body)
            if record is not None:
                return record
        return None

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        for storage in self.storages:
            storage.store(key=key, record=record, body=body, patch=patch)

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        for storage in self.storages:
            storage.purge(key=key, body=body, patch=patch)

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        for storage in self.storages:
            storage.touch(body=body, patch=patch, value=value)

    def clear(self, *, essence: BodyEssence) -> BodyEssence:
        # One copy for all: this module's storages strip their fields from it in place (each
        # of their clear() would copy the essence again). Other storages, e.g. users' own
        # or with an overridden clear(), are asked through clear() as usual.
        copied: BodyEssence = copy_json(essence)
        return self._clear_copy(copied)

    def _clear_copy(self, result: BodyEssence) -> BodyEssence:
        """Clear a private copy: stripped in place where the storages allow it."""
        for storage in self.storages:
            if type(storage).clear in _STRIPPING_CLEARS:
                storage._strip(result)  # type: ignore[attr-defined]  # one of _Stripping
            else:
                result = storage.clear(essence=result)
        return result

    def flush(self) -> None:
        for storage in self.storages:
            storage.flush()


_Stripping = AnnotationsProgressStorage | StatusProgressStorage
_STRIPPING_CLEARS = frozenset({AnnotationsProgressStorage.clear, StatusProgressStorage.clear})


def clear_owned(storage: ProgressStorage, essence: BodyEssence) -> BodyEssence:
    """``storage.clear(essence=essence)`` for an essence that nobody else holds.

    An essence just built or decoded from its JSON is the caller's own: this module's storages
    strip their fields from it in place instead of copying it first (the result is equal;
    only the copy is saved). Any other storage's ``clear()`` is called as usual.
    """
    clear = type(storage).clear
    if clear in _STRIPPING_CLEARS:
        storage._strip(essence)  # type: ignore[attr-defined]  # one of _Stripping
        return essence
    if clear is MultiProgressStorage.clear:
        return storage._clear_copy(essence)  # type: ignore[attr-defined, no-any-return]
    return storage.clear(essence=essence)


class _ReadOnlyStatusProgressStorage(StatusProgressStorage):
    """The legacy status records: read and purged, never written or touched.

    Purging stays: a record left behind would be read as the progress of the next change of
    the same handlers, which would then be skipped as already done.
    """

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        pass

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        pass


class SmartProgressStorage(MultiProgressStorage):
    """The default: annotations (read-write) with the legacy status records as a read fallback.

    Operators that ran on Kopf < 1.44 (or trioperator configured so) may have progress in
    ``status.kopf.progress``; it is still honoured and purged, but new progress goes only to
    the annotations, which saves the extra status PATCH on every cycle.
    """

    def __init__(
        self,
        *,
        name: str = "kopf",
        field: FieldSpec = "status.{name}.progress",
        touch_key: str = "touch-dummy",
        touch_field: FieldSpec = "status.{name}.dummy",
        prefix: str = DEFAULT_PREFIX,
        v1: bool = True,
        verbose: bool = False,
    ) -> None:
        super().__init__(
            [
                AnnotationsProgressStorage(
                    prefix=prefix, verbose=verbose, touch_key=touch_key, v1=v1
                ),
                _ReadOnlyStatusProgressStorage(name=name, field=field, touch_field=touch_field),
            ]
        )
        # Records too big for the annotations go to the status (read from there as well).
        annotations = self.storages[0]
        assert isinstance(annotations, AnnotationsProgressStorage)
        annotations.overflow = StatusProgressStorage(
            name=name, field=field, touch_field=touch_field
        )
