"""What the operator remembers about each object between events, for as long as it exists.

A worker may idle out and be re-created many times for one object; its memory stays until the
object is gone (DELETED). Nothing here is persisted: on-cluster state lives in annotations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Sequence
from typing import Any

from trioperator._engine.ids import HandlerId
from trioperator._engine.memos import copy_memo
from trioperator._engine.patches import PatchFn
from trioperator._engine.progression import State
from trioperator._runtime.objects.daemon_state import DaemonsMemory


@dataclasses.dataclass(slots=True)
class ObjectMemory:
    """Slotted, and with shared empty defaults where a field is rarely set: there is one per
    known object for the object's whole life, so its size multiplies by the number of objects.
    """

    memo: Any
    """The per-object memo: a shallow copy of the operator's memo, made on first sight."""

    noticed_by_listing: bool = False
    """First seen in the initial listing (the object existed before the operator started)."""

    fully_handled_once: bool = False
    """All changing handlers of some cause finished in this process (ends resume handling)."""

    pending_fns: Sequence[PatchFn] = ()
    """Transformation functions rejected with 422, carried to the next cycle."""

    expected_version: str | None = None
    """The ``resourceVersion`` of our own last patch, until it comes back on the stream."""

    superseded_versions: Sequence[str] = ()
    """Versions of our own earlier writes of the same patch (the status before the body): a
    state of one of them is older than what we wrote, however long the stream lags."""

    consistency_deadline: float = 0.0
    """After this trio time, stop waiting for ``expected_version`` and assume consistency.

    Postponed by the time the watcher spent holding its stream back since then (see
    ``consistency_stalls``): our patch's event may be among what was not read meanwhile."""

    consistency_stalls: float = 0.0
    """The watcher's total stalled time (``Backlog.stalled_time()``) when the deadline was set."""

    settled_version: str | None = None
    """The version our last cycle wrote when it left nothing to do and its echo is known to be
    a no-op for the change handling (see ``_engine/echoes.py``): that event is not handled."""

    error_count: int = 0
    """Consecutive unexpected errors, to pick the throttling delay."""

    released: bool = False
    """Our finalizer was removed from the object marked for deletion: nothing more to do."""

    deletion_handled: bool = False
    """The delete handlers are done, but daemons still hold the object: do not run them again."""
    journal_unchecked: bool = True
    """The status may hold the journal of a body write of ours that did not land (see
    ``_engine/journal.py``): before this process's first change handling of the object, and
    after a write of ours that failed half-way. Looked at once, then cleared."""

    _daemons: DaemonsMemory | None = None

    indexing_state: State | None = None
    """Indexing failures being retried or excluded (``None`` when all indexers succeeded)."""

    @property
    def daemons(self) -> DaemonsMemory:
        """The object's daemons and timers, its live body and idle time.

        Made on first use: objects of resources without daemons or timers never need it, and
        its containers were a third of what the operator kept per object.
        """
        if self._daemons is None:
            self._daemons = DaemonsMemory()
        return self._daemons

    @property
    def forever_stopped(self) -> Collection[HandlerId]:
        """The daemons that ended on their own (without making the daemons' memory)."""
        return () if self._daemons is None else self._daemons.forever_stopped


class Memories:
    """The memories of one watcher's objects, keyed by uid (or a synthetic key)."""

    def __init__(self, memo: Any) -> None:
        self._memo = memo
        self._items: dict[str, ObjectMemory] = {}

    def recall(self, key: str, *, noticed_by_listing: bool = False) -> ObjectMemory:
        memory = self._items.get(key)
        if memory is None:
            memory = ObjectMemory(memo=copy_memo(self._memo), noticed_by_listing=noticed_by_listing)
            self._items[key] = memory
        return memory

    def forget(self, key: str) -> None:
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    def get(self, key: str) -> ObjectMemory | None:
        return self._items.get(key)
