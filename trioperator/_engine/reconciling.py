"""Decisions of the reconcile handler kind (trioperator's own, beyond Kopf), without I/O.

- which objects a changed child or watched object asks to reconcile (:func:`controller_owner`,
  :func:`mapped_keys`);
- what a reconcile handler's result asks for (:class:`Requeue`, :func:`requested_delay`);
- the exponential per-object backoff after errors (:func:`backoff_delay`);
- the coalescing of requests per object: one run at a time, and many requests while one is
  queued or running make exactly one more (:class:`Coalescer`);
- when each object is due again (:class:`DueTimes`);
- the ``generation_changed`` filter, usable on Kopf's change handlers too.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from trioperator._engine.diffs import DiffItem

__all__ = [
    "Coalescer",
    "DueTimes",
    "ObjectKey",
    "Requeue",
    "backoff_delay",
    "controller_owner",
    "generation_changed",
    "key_of",
    "mapped_keys",
    "requested_delay",
]


class ObjectKey(NamedTuple):
    """What identifies an object to reconcile within its resource: namespace (``None`` for
    cluster-scoped objects) and name."""

    namespace: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclasses.dataclass(frozen=True)
class Requeue:
    """Returned by a reconcile handler: run it again for this object after ``after`` seconds
    (unless something changes earlier, which runs it at once)."""

    after: float

    def __post_init__(self) -> None:
        if not isinstance(self.after, (int, float)) or isinstance(self.after, bool):
            raise TypeError(f"Requeue(after=...) takes seconds, not {self.after!r}")
        if math.isnan(self.after) or self.after < 0:
            raise ValueError(f"Requeue(after=...) must be 0 or more seconds, not {self.after!r}")


def requested_delay(result: object) -> float | None:
    """The delay a handler's result asks for: a :class:`Requeue`, or plain seconds (an int or a
    float, not a bool); anything else (``None``, a dict for the status, ...) asks for none."""
    if isinstance(result, Requeue):
        return float(result.after)
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        if math.isnan(result) or result < 0:
            return None
        return float(result)
    return None


DEFAULT_BACKOFF_BASE: Final = 1.0
DEFAULT_BACKOFF_MAX: Final = 300.0


def backoff_delay(
    failures: int,
    *,
    base: float = DEFAULT_BACKOFF_BASE,
    cap: float = DEFAULT_BACKOFF_MAX,
) -> float:
    """Seconds before the next attempt after ``failures`` failed runs in a row (1, 2, ...):
    ``base``, then doubling, never more than ``cap``."""
    if failures <= 0:
        return 0.0
    # 2 ** 1000 overflows a float: the exponent stops growing once past the cap anyway.
    exponent = min(failures - 1, 64)
    return float(min(cap, base * (2.0**exponent)))


def key_of(body: Mapping[str, Any]) -> ObjectKey | None:
    """The key of an object's body, or ``None`` without a name."""
    metadata = body.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    name = metadata.get("name")
    namespace = metadata.get("namespace")
    if not isinstance(name, str) or not name:
        return None
    return ObjectKey(namespace if isinstance(namespace, str) and namespace else None, name)


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def controller_owner(
    child: Mapping[str, Any], *, group: str, kind: str
) -> tuple[ObjectKey, str | None] | None:
    """The owner a child asks to reconcile: its controller ownerReference (``controller:
    true``) if it points at an object of ``group``/``kind``; the owner is in the child's own
    namespace (ownerReferences never cross namespaces). Returns the key and the owner's uid."""
    metadata = child.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    references = metadata.get("ownerReferences")
    if not isinstance(references, list):
        return None
    namespace = metadata.get("namespace")
    for reference in references:
        if not isinstance(reference, Mapping) or reference.get("controller") is not True:
            continue
        api_version = reference.get("apiVersion")
        name = reference.get("name")
        if not isinstance(api_version, str) or not isinstance(name, str) or not name:
            return None
        if reference.get("kind") != kind or _group_of(api_version) != group:
            return None  # at most one controller: and it is not ours
        uid = reference.get("uid")
        return (
            ObjectKey(namespace if isinstance(namespace, str) and namespace else None, name),
            uid if isinstance(uid, str) else None,
        )
    return None


def mapped_keys(result: object, *, default_namespace: str | None) -> list[ObjectKey]:
    """Keys from what a ``watches=`` mapper returned: ``None``, one or many of: an
    :class:`ObjectKey`, a ``(namespace, name)`` pair, ``"namespace/name"``, a plain ``"name"``
    (in the mapped object's own namespace) or an object's body (its metadata's name and
    namespace). Raises ``TypeError`` for anything else, naming it."""
    if result is None:
        return []
    items: Iterable[object]
    if isinstance(result, (str, ObjectKey, Mapping)) or (
        isinstance(result, tuple)
        and len(result) == 2
        and all(isinstance(part, str) or part is None for part in result)
    ):
        items = [result]
    elif isinstance(result, Iterable):
        items = result
    else:
        raise TypeError(f"A mapper must return keys of objects, not {result!r}")
    keys: list[ObjectKey] = []
    for item in items:
        if isinstance(item, ObjectKey):
            keys.append(item)
        elif isinstance(item, str):
            namespace, _, name = item.rpartition("/")
            if not name:
                raise TypeError(f"A mapper returned a key without a name: {item!r}")
            keys.append(ObjectKey(namespace or default_namespace, name))
        elif isinstance(item, tuple) and len(item) == 2:
            namespace, name = item
            if not isinstance(name, str) or not name:
                raise TypeError(f"A mapper returned a key without a name: {item!r}")
            keys.append(ObjectKey(namespace if isinstance(namespace, str) else None, name))
        elif isinstance(item, Mapping):
            key = key_of(item)
            if key is None:
                raise TypeError(f"A mapper returned an object without a name: {item!r}")
            keys.append(key)
        else:
            raise TypeError(f"A mapper must return keys of objects, not {item!r}")
    return keys


class Coalescer:
    """Requests to reconcile objects, coalesced: at most one run per object at a time, and
    any number of requests while a run is queued or running make exactly one more run.

    States per key: absent (idle), ``queued`` (a run is wanted, none running), ``running``,
    ``running + again`` (a request came during the run).
    """

    __slots__ = ("_again", "_queued", "_running")

    def __init__(self) -> None:
        self._queued: set[Any] = set()
        self._running: set[Any] = set()
        self._again: set[Any] = set()

    def request(self, key: Any) -> bool:
        """A run of ``key`` is wanted; True if its worker must be woken up (it was idle)."""
        if key in self._running:
            self._again.add(key)
            return False
        if key in self._queued:
            return False
        self._queued.add(key)
        return True

    def is_queued(self, key: Any) -> bool:
        return key in self._queued

    def is_running(self, key: Any) -> bool:
        return key in self._running

    def start(self, key: Any) -> bool:
        """The worker is about to run ``key``; False if no run is wanted (nothing to do)."""
        if key not in self._queued or key in self._running:
            return False
        self._queued.discard(key)
        self._running.add(key)
        return True

    def finish(self, key: Any) -> bool:
        """The run of ``key`` has ended; True if requests came meanwhile (it is queued again)."""
        self._running.discard(key)
        if key in self._again:
            self._again.discard(key)
            self._queued.add(key)
            return True
        return False

    def forget(self, key: Any) -> None:
        """The object is gone: no run is wanted any more."""
        self._queued.discard(key)
        self._again.discard(key)


class DueTimes:
    """When each object is due to be reconciled again (a requeue, a backoff); one time per
    object, the earlier one winning (a request at once overrides it in the :class:`Coalescer`)."""

    __slots__ = ("_due", "_heap", "_serial")

    def __init__(self) -> None:
        self._due: dict[Any, float] = {}
        self._heap: list[tuple[float, int, Any]] = []
        self._serial = itertools.count()

    def __len__(self) -> int:
        return len(self._due)

    def schedule(self, key: Any, when: float) -> bool:
        """Due at ``when`` (kept if an earlier time is already set); True if it is the new
        earliest of all (the sleeper must wake up to sleep less)."""
        current = self._due.get(key)
        if current is not None and current <= when:
            return False
        earliest = self.next_time()
        self._due[key] = when
        heapq.heappush(self._heap, (when, next(self._serial), key))
        return earliest is None or when < earliest

    def cancel(self, key: Any) -> None:
        self._due.pop(key, None)

    def next_time(self) -> float | None:
        heap = self._heap
        while heap and self._due.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)  # cancelled or superseded
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> list[Any]:
        """The keys due by ``now``, in time order; they are no longer scheduled."""
        due: list[Any] = []
        while (when := self.next_time()) is not None and when <= now:
            _, _, key = heapq.heappop(self._heap)
            del self._due[key]
            due.append(key)
        return due


_UNCHANGING: Final = frozenset({"metadata", "status"})


def _generation(body: Any) -> int | None:
    if not isinstance(body, Mapping):
        return None
    metadata = body.get("metadata")
    generation = metadata.get("generation") if isinstance(metadata, Mapping) else None
    return generation if isinstance(generation, int) and not isinstance(generation, bool) else None


def _deleting(body: Any) -> bool:
    metadata = body.get("metadata") if isinstance(body, Mapping) else None
    return isinstance(metadata, Mapping) and bool(metadata.get("deletionTimestamp"))


def generation_changed(
    *,
    old: Any = None,
    new: Any = None,
    diff: Any = None,
    body: Any = None,
    reason: Any = None,
    **_: Any,
) -> bool:
    """A ``when=`` filter: only changes that move ``metadata.generation`` (the spec and other
    non-metadata fields) pass; writes of the status, labels or annotations alone do not.

    For Kopf's change handlers (``old``/``new`` are essences without ``metadata.generation``)
    it looks at the ``diff``: a change outside ``metadata`` and ``status``; creation and
    resuming, deletion (any cause but an update) pass. For reconcile handlers (``old`` is the
    object's previous state) it compares the generations.
    """
    if old is None or (reason is not None and str(reason) != "update"):
        return True
    current = new if new is not None else body
    old_generation, new_generation = _generation(old), _generation(current)
    if old_generation is not None and new_generation is not None:
        # The deletion timestamp appearing counts as a change of the spec would.
        return old_generation != new_generation or _deleting(current) != _deleting(old)
    if diff is None:
        return True  # nothing to judge by: let it pass rather than drop a change
    for item in diff:
        field = item.field if isinstance(item, DiffItem) else item[1]
        if not field or field[0] not in _UNCHANGING:
            return True
    return False
