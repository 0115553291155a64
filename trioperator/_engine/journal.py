"""The journal: the status write of a cycle carries the body write that follows it.

A cycle of a resource with a ``status`` subresource ends with two writes
(``_runtime/handling/applying``): first the status (the handlers' results), then the body (the marks
of "handled": progress records, the diff-base). A crash between the two used to leave the results
without the marks, and the next operator ran those handlers again, with their side effects. Under
load the two writes of one object are far apart (they queue with everybody else's), so this happened
to dozens of objects at a time.

So the first write says what the second will be: ``status.kopf.journal`` holds the body's
merge-patch (marks, the handlers' own changes of the body) as a JSON string -- as a dict, its
``null``s (removals) would be taken by the status write itself, and it would be merged into the
previous journal -- and ``base``, a digest of what that write changes (the annotations of the
progress and diff-base storages, and the generation) as it is before it. The status write is
then the commit point of the cycle: once the results are stored, the marks are stored too, or
they are in the journal.

What remains is a crash after a handler has finished and before the status write has landed:
nothing of its outcome is stored, and the handler runs again (at least once). Handlers whose
cycle writes no status (no results) have one write only, the body's: the same holds for them.

When an operator starts (or a write of its own failed half-way), it looks at the journal of
each object once, before the first change handling: if ``base`` still describes the object,
the body write never landed, and it is done now, instead of running the handlers again. If the
marks moved on since (the body write landed, or anything else wrote them), the journal is a
stale copy and is ignored; it is replaced or removed by the next status write.

A stale journal must never look current again. It could only if the marks returned to exactly
what they were before its write; after a body write of ours that does that (e.g. a resume
handled over two cycles, whose records are purged at the end), the journal is removed in the
same cycle, even if that costs a status write of its own (the only case that does).

Kopf neither reads nor writes ``status.kopf.journal``: everything Kopf reads is as before. A
Kopf operator taking over after such a crash runs those handlers again, as Kopf would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from trioperator._engine.conventions import StorageKeyFormingConvention
from trioperator._wire.compact_json import dumps_compact

__all__ = ["JOURNAL_FIELD", "annotation_prefixes", "base_of", "pending_write", "prepare"]

JOURNAL_FIELD = ("status", "kopf", "journal")


def annotation_prefixes(progress: Any, diffbase: Any) -> tuple[str, ...]:
    """The ``prefix/`` of every annotation-keyed storage among these (and inside them).

    Empty if neither keeps its marks in annotations (e.g. users' own storages): no journal
    then. Kept per pair of storage objects (as the startup handlers leave them).
    """
    key = (id(progress), id(diffbase))
    cached = _PREFIXES.get(key)
    if cached is not None and cached[0] is progress and cached[1] is diffbase:
        return cached[2]
    prefixes = _find_prefixes(progress, diffbase)
    if len(_PREFIXES) >= 64:
        _PREFIXES.clear()
    # The storages are kept with the answer: their ids cannot be reused while it is here.
    _PREFIXES[key] = (progress, diffbase, prefixes)
    return prefixes


_PREFIXES: dict[tuple[int, int], tuple[object, object, tuple[str, ...]]] = {}


def _find_prefixes(*storages: Any) -> tuple[str, ...]:
    found: dict[str, None] = {}
    pending = list(storages)
    while pending:
        storage = pending.pop(0)
        if isinstance(storage, StorageKeyFormingConvention):
            found[f"{storage.prefix}/"] = None
        inner = getattr(storage, "storages", None)
        if isinstance(inner, Iterable):
            pending.extend(inner)
    return tuple(found)


def base_of(body: Mapping[str, Any], prefixes: tuple[str, ...]) -> str:
    """A digest of the marks a body write of ours changes: as they are in ``body``."""
    metadata = body.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    annotations = metadata.get("annotations")
    return _digest(
        metadata.get("generation"),
        _marks(annotations if isinstance(annotations, dict) else {}, prefixes),
        prefixes,
    )


def prepare(
    body: Mapping[str, Any],
    patch: dict[str, Any],
    prefixes: tuple[str, ...],
) -> None:
    """Put the journal into the status part of ``patch`` (a resource with a status subresource).

    With a status write and a body write that changes the marks: the journal of that body
    write. With a status write otherwise: the removal of an earlier journal, if any. Without a
    status write: the removal of an earlier journal only if the body write would make it
    look current again (this adds the status write).
    """
    if not prefixes:
        return
    existing = _journal(body)
    status = patch.get("status")
    if not status and existing is None:
        return  # one write (the body's), and no journal to look after
    body_part = {key: value for key, value in patch.items() if key != "status"}
    changes_marks = bool(body_part) and _changes_marks(body, body_part, prefixes)
    if status:
        if changes_marks:
            encoded = dumps_compact(body_part)
            _put(patch, {"base": base_of(body, prefixes), "patch": encoded})
        elif existing is not None:
            _put(patch, None)
    elif (
        existing is not None
        and changes_marks
        and existing.get("base") == _base_after(body, body_part, prefixes)
    ):
        _put(patch, None)


def pending_write(body: Mapping[str, Any], prefixes: tuple[str, ...]) -> dict[str, Any] | None:
    """The body write that the journal has and the object lacks; ``None`` if there is none."""
    journal = _journal(body)
    if journal is None or not prefixes:
        return None
    encoded = journal.get("patch")
    if not isinstance(encoded, str) or journal.get("base") != base_of(body, prefixes):
        return None  # the marks moved on: the write landed, or someone else has written since
    try:
        written = json.loads(encoded)
    except ValueError:
        return None  # not ours, or broken: as if there were none (the handlers may run again)
    if not isinstance(written, dict) or not written:
        return None
    if not _changes_marks(body, written, prefixes):
        return None  # nothing of it is missing
    return written


def _journal(body: Mapping[str, Any]) -> dict[str, Any] | None:
    value: Any = body
    for key in JOURNAL_FIELD:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else None


def _put(patch: dict[str, Any], journal: dict[str, Any] | None) -> None:
    status = patch.setdefault("status", {})
    if not isinstance(status, dict):
        return
    kopf = status.setdefault("kopf", {})
    if isinstance(kopf, dict):
        kopf["journal"] = journal


def _marks(annotations: Mapping[str, Any], prefixes: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in annotations.items() if key.startswith(prefixes)}


def _patched_annotations(body_part: Mapping[str, Any]) -> Any:
    metadata = body_part.get("metadata")
    if not isinstance(metadata, dict):
        return {}  # the metadata is not written: nothing of the annotations changes
    if "annotations" not in metadata:
        return {}
    return metadata["annotations"]  # a dict of changes, or None: all annotations removed


def _changes_marks(
    body: Mapping[str, Any], body_part: Mapping[str, Any], prefixes: tuple[str, ...]
) -> bool:
    metadata = body.get("metadata")
    current = metadata.get("annotations") if isinstance(metadata, dict) else None
    current = current if isinstance(current, dict) else {}
    changes = _patched_annotations(body_part)
    if not isinstance(changes, dict):
        return bool(_marks(current, prefixes))
    return any(
        key.startswith(prefixes) and current.get(key) != value for key, value in changes.items()
    )


def _base_after(
    body: Mapping[str, Any], body_part: Mapping[str, Any], prefixes: tuple[str, ...]
) -> str:
    """The base of ``body`` after the body write (taking its generation as unchanged)."""
    metadata = body.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    current = metadata.get("annotations")
    marks = _marks(current if isinstance(current, dict) else {}, prefixes)
    changes = _patched_annotations(body_part)
    if isinstance(changes, dict):
        for key, value in changes.items():
            if not key.startswith(prefixes):
                continue
            if value is None:
                marks.pop(key, None)
            else:
                marks[key] = value
    else:
        marks = {}
    return _digest(metadata.get("generation"), marks, prefixes)


def _digest(generation: Any, marks: Mapping[str, Any], prefixes: tuple[str, ...]) -> str:
    # Unambiguous: NUL never occurs in annotation names, and values are strings (or, if someone
    # wrote something else, their repr, which is stable for the same value).
    digest = hashlib.blake2b(digest_size=12)
    digest.update(f"{generation!r}\0{'|'.join(prefixes)}".encode())
    for key in sorted(marks):
        value = marks[key]
        digest.update(f"\0{key}\0{value if isinstance(value, str) else repr(value)}".encode())
    return digest.hexdigest()
