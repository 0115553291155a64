"""Why handlers run: turning a low-level watch event into a cause.

A watch event only says that an object was added, modified or deleted. Which changing handlers
(create/update/delete/resume) apply is decided here, from the object's state: its deletion mark,
our finalizer, the stored diff-base ("old" essence) and the essential diff. The decision is a
pure function; the runtime does the invoking, logging and patching.

The cause dataclasses carry what the runtime hands to handlers; ``kwargs`` builds the keyword
arguments (indices go last so that an index named like a framework kwarg wins: a new kwarg in a
later version then cannot break an operator that already uses that name for an index).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from trioperator._client.resources import Resource
from trioperator._engine.bodies import Body, RawEvent
from trioperator._engine.diffs import EMPTY, Diff
from trioperator._engine.patches import Patch
from trioperator._engine.reasons import Reason


def is_deletion_ongoing(body: Mapping[str, Any]) -> bool:
    """The object is marked for deletion (it stays until all finalizers are gone)."""
    metadata = body.get("metadata") or {}
    return metadata.get("deletionTimestamp") is not None


def is_deletion_blocked(body: Mapping[str, Any], finalizer: str) -> bool:
    """Our finalizer is on the object, so the deletion waits for us."""
    metadata = body.get("metadata") or {}
    return finalizer in (metadata.get("finalizers") or ())


def detect_changing_cause(
    *,
    event_type: str | None,
    body: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    diff: Diff | None,
    initial: bool,
    finalizer: str,
) -> Reason:
    """Decide the reason of a changing cause, in Kopf's order (the first match wins).

    ``event_type`` is the watch event's type: ``None`` for objects from the initial listing;
    a type this code does not know is treated like ``MODIFIED``. ``old`` is the stored
    diff-base (``None`` if the object was never handled), ``new`` the current essence, ``diff``
    the essential difference between them. ``initial`` is true while the object, first seen by
    the initial listing, has not been fully handled by this process yet.

    For ``CREATE`` the cause must be built with ``initial=False`` (see :func:`cause_initial`):
    creation never mixes with resuming.
    """
    del new  # not needed to decide; accepted so the call mirrors the cause's contents

    # The object is really gone from the cluster; the event is only informational now.
    if event_type == "DELETED":
        return Reason.GONE

    deleting = is_deletion_ongoing(body)

    # Marked for deletion, but not blocked by us: nothing of ours to do (any more).
    if deleting and not is_deletion_blocked(body, finalizer):
        return Reason.FREE

    if deleting:
        return Reason.DELETE

    # Never handled before: the object is new to us, even if it came from the initial listing.
    if old is None:
        return Reason.CREATE

    # Nothing essential changed, but this process has not yet seen the object since it started:
    # give the resume handlers their go. (With essential changes, resume handlers are mixed into
    # the regular cause by the ``initial`` flag instead.)
    if not diff and initial:
        return Reason.RESUME

    # Only non-essential fields changed (status, our own annotations, other metadata).
    if not diff:
        return Reason.NOOP

    return Reason.UPDATE


def cause_initial(reason: Reason, initial: bool) -> bool:
    """The ``initial`` flag for a changing cause of ``reason``: always false for creation."""
    return False if reason is Reason.CREATE else initial


@dataclasses.dataclass(frozen=True)
class BaseCause:
    """What every handler gets: a logger, the memo and the indices."""

    logger: logging.Logger | logging.LoggerAdapter[Any]
    memo: Any
    indices: Mapping[str, Any]

    def _own_kwargs(self) -> dict[str, Any]:
        return {"logger": self.logger, "memo": self.memo}

    @property
    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments for a handler of this cause (indices override the rest).

        A new dict each time (callers add to it), copied from the one made on the first call:
        a cause is asked several times (filters, the lifecycle, each handler), and nothing in
        it changes meanwhile (the body's views are live, the rest is fixed for the cause).
        A ``dataclasses.replace()`` of a cause (e.g. for a field handler) makes its own.
        """
        made: dict[str, Any] | None = self.__dict__.get("_kwargs_made")
        if made is None:
            made = {**self._own_kwargs(), **self.indices}
            object.__setattr__(self, "_kwargs_made", made)
        return dict(made)


@dataclasses.dataclass(frozen=True)
class ResourceCause(BaseCause):
    """A cause about one object of one resource."""

    resource: Resource
    patch: Patch
    body: Body

    def _own_kwargs(self) -> dict[str, Any]:
        meta = self.body.metadata
        return {
            **super()._own_kwargs(),
            "resource": self.resource,
            "patch": self.patch,
            "body": self.body,
            "spec": self.body.spec,
            "meta": meta,
            "status": self.body.status,
            "uid": meta.uid,
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": meta.labels,
            "annotations": meta.annotations,
        }


@dataclasses.dataclass(frozen=True)
class WatchingCause(ResourceCause):
    """Any watch event, for ``@on.event`` handlers (no state, no diff)."""

    type: str | None
    event: RawEvent

    def _own_kwargs(self) -> dict[str, Any]:
        return {**super()._own_kwargs(), "type": self.type, "event": self.event}


@dataclasses.dataclass(frozen=True)
class ReconcilingCause(ResourceCause):
    """The current state of an object, for ``on.reconcile`` handlers (trioperator's own).

    ``deleting``: the object has a deletion timestamp (it waits for finalizers to go).
    """

    deleting: bool

    def _own_kwargs(self) -> dict[str, Any]:
        return {**super()._own_kwargs(), "deleting": self.deleting}


@dataclasses.dataclass(frozen=True)
class IndexingCause(ResourceCause):
    """An object to be (re)indexed by ``@index`` handlers."""


@dataclasses.dataclass(frozen=True)
class SpawningCause(ResourceCause):
    """An object whose daemons and timers may need spawning.

    ``reset`` is true when the essence has changed (``bool(diff)``); it is not a handler kwarg.
    """

    reset: bool


@dataclasses.dataclass(frozen=True)
class ChangingCause(ResourceCause):
    """A detected create/update/delete/resume (or an informational noop/free/gone).

    ``old``/``new``/``diff`` are the whole essences and their diff; field handlers get them
    reduced to their field (a ``dataclasses.replace`` of this cause). ``initial`` is not a
    handler kwarg; it mixes resume handlers into the cause.
    """

    reason: Reason
    initial: bool
    diff: Diff = dataclasses.field(default_factory=lambda: EMPTY)  # Diff is unhashable
    old: Any = None
    new: Any = None

    @property
    def deleted(self) -> bool:
        """The object is marked for deletion: resume handlers are skipped unless they opt in."""
        return is_deletion_ongoing(self.body)

    def _own_kwargs(self) -> dict[str, Any]:
        return {
            **super()._own_kwargs(),
            "reason": self.reason,
            "diff": self.diff,
            "old": self.old,
            "new": self.new,
        }
