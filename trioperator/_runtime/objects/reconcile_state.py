"""The state of reconcile handlers (trioperator's own handler kind), shared by the tasks.

A :class:`Reconciler` belongs to the watcher of one (resource, namespace) that has reconcile
handlers: it keeps the newest body of each object (a reconcile run always sees the newest known
state, whatever asked for it), which objects want a run (:class:`Coalescer`), when each is due
again (:class:`DueTimes`: requeues and backoffs) and the failures in a row per object. The
watcher installs :attr:`Reconciler.wake`, which makes sure the object's worker runs.

The :class:`ReconcileHub` (one per operator) finds the reconcilers of a resource, so that the
watchers of child and watched resources can enqueue their owners (see reconciling.py).

State only: no behaviour is imported here (see docs/architecture.md, "state apart from
behaviour").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import trio

from trioperator._client.resources import Resource
from trioperator._engine.bodies import RawBody
from trioperator._engine.handlers import ReconcilingHandler
from trioperator._engine.reconciling import Coalescer, DueTimes, ObjectKey, key_of
from trioperator._engine.selectors import Selector

__all__ = ["ReconcileHub", "Reconciler"]


class Reconciler:
    """Reconcile requests and the newest bodies of one watcher's objects (keyed by uid)."""

    def __init__(
        self,
        resource: Resource,
        namespace: str | None,
        handlers: Sequence[ReconcilingHandler],
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.handlers = tuple(handlers)
        # The same handlers without their ``when``: it filters the object's own changes only;
        # a run asked for by a child, a requeue or a resync goes to every matching handler.
        self.unfiltered = tuple(dataclasses.replace(handler, when=None) for handler in handlers)
        self.filtered = any(handler.when is not None for handler in handlers)
        resyncs = [handler.resync for handler in handlers if handler.resync is not None]
        self.resync: float | None = min(resyncs) if resyncs else None
        self.bodies: dict[str, RawBody] = {}
        self.uids: dict[ObjectKey, str] = {}
        self.coalescer = Coalescer()
        self.due = DueTimes()
        self.failures: dict[str, int] = {}
        self.changed = trio.Event()
        """Set when the earliest due time moves earlier (the timers' task sleeps less)."""
        self.wake: Callable[[str], None] = lambda uid: None
        """Makes sure the worker of an object runs (installed by the watcher)."""

    def remember(self, uid: str, body: RawBody) -> RawBody | None:
        """The newest body of an object; returns the one it replaces."""
        old = self.bodies.get(uid)
        self.bodies[uid] = body
        key = key_of(body)
        if key is not None:
            self.uids[key] = uid
        return old

    def forget(self, uid: str) -> None:
        """The object is gone: nothing of it is kept, no run is wanted."""
        body = self.bodies.pop(uid, None)
        if body is not None:
            key = key_of(body)
            if key is not None and self.uids.get(key) == uid:
                del self.uids[key]
        self.coalescer.forget(uid)
        self.due.cancel(uid)
        self.failures.pop(uid, None)

    def request(self, uid: str) -> None:
        """A run of the object is wanted: queued (coalesced) and its worker woken up."""
        if uid not in self.bodies:
            return  # not (or no longer) known: nothing to reconcile
        self.coalescer.request(uid)
        if not self.coalescer.is_running(uid):
            self.wake(uid)

    def request_key(self, key: ObjectKey, uid: str | None) -> bool:
        """A run of the object named ``key`` (and of ``uid``, if given); False if unknown."""
        if not self.resource.namespaced:
            # A namespaced child may be owned by a cluster-scoped object: its name is enough.
            key = ObjectKey(None, key.name)
        elif self.namespace is not None and key.namespace != self.namespace:
            return False
        known = self.uids.get(key)
        if known is None or (uid is not None and uid != known):
            return False  # not cached (yet), or a namesake: not the child's owner
        self.request(known)
        return True

    def schedule(self, uid: str, when: float) -> None:
        if self.due.schedule(uid, when):
            self.changed.set()


class ReconcileHub:
    """The running reconcilers of one operator, by resource (each watcher adds its own)."""

    def __init__(self) -> None:
        self._reconcilers: list[Reconciler] = []

    def __len__(self) -> int:
        return len(self._reconcilers)

    def add(self, reconciler: Reconciler) -> None:
        self._reconcilers.append(reconciler)

    def remove(self, reconciler: Reconciler) -> None:
        if reconciler in self._reconcilers:
            self._reconcilers.remove(reconciler)

    def matching(self, target: Selector) -> list[Reconciler]:
        return [reconciler for reconciler in self._reconcilers if target.check(reconciler.resource)]

    def request(self, target: Selector, key: ObjectKey, uid: str | None = None) -> int:
        """Ask every reconciler of a resource ``target`` selects to run ``key``; how many did."""
        count = 0
        for reconciler in self._reconcilers:
            if target.check(reconciler.resource) and reconciler.request_key(key, uid):
                count += 1
        return count
