"""The queues between a watcher's router and its per-object workers, bounded under storms.

A worker runs the change handling for the newest state of its object only (level-triggered),
so its mailbox keeps only the newest event: a new event replaces the queued one (coalescing).
The exception are resources with ``on.event`` handlers: those see every event, so every event
is queued until the worker takes it. Either way, the bodies queued in all the mailboxes of one
watcher are counted (:class:`Backlog`); when ``settings.queueing.max_pending`` are queued, the
router stops reading the watch-stream until workers have taken some (backpressure). Listings
are never held back: they hold one body per object at most, and a listing held for long could
expire between its pages. Nor is anything held back while the indexing gate is closed: the
workers cannot take anything until it opens, which needs the listings to go on.

Counters of what is queued (for tests, probes and benchmarks) are kept per watcher and for the
whole operator (:class:`QueueStats`).

A worker with nothing left to wait for but new events *parks* instead of waiting in its task
(:class:`IdleWorkers`): the task ends, the mailbox stays where the router finds it, and the next
event starts a task on it again, as if the worker had been woken up. Waiting out
``settings.queueing.idle_timeout`` in a task costs ~9 KiB per object (coroutine frames, a cancel
scope, events): after a listing of many objects, that is one waiting task per object at once,
and CPython never gives back the heap grown for such a peak while anything else lives in it.
A worker whose last write settled its object parks at once too, instead of waiting for that
write's echo: the router takes the echo for it (:meth:`Mailbox.absorbs`), since the cycle it
would wake up for is known to find nothing to do (see ``_engine/echoes.py``). That is a
wake-up of the task and a cancel scope less per handled object.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections.abc import Callable, Sequence

import trio

from trioperator._engine.bodies import RawEvent
from trioperator._util.ordering import next_ticket

__all__ = ["Backlog", "IdleWorkers", "Mailbox", "QueueStats"]

VERSIONS_KEPT = 32
"""How many recent resource versions a mailbox remembers, coalesced events' included.

The worker waits for the version of its own last patch to come back on the stream; if a newer
event replaced that one before the worker looked, the version is still known here. Only more
than this many events of one object between our patch and the worker's next look would make it
wait (at most ``settings.persistence.consistency_timeout``) instead."""


@dataclasses.dataclass
class QueueStats:
    """What the mailboxes of one operator hold now and have held (all its watchers)."""

    held: int = 0
    """Event bodies queued for workers right now."""

    peak: int = 0
    """The most ever queued at once."""

    coalesced: int = 0
    """Events replaced by a newer one of the same object before a worker took them."""

    stalls: int = 0
    """How many times a watcher stopped reading its stream because too much was queued."""

    def _add(self, count: int) -> None:
        self.held += count
        self.peak = max(self.peak, self.held)


class Backlog:
    """The bodies queued in the mailboxes of one watcher, and the wait for room among them."""

    __slots__ = (
        "_room",
        "_stall_watchers",
        "_stalled",
        "_stalled_since",
        "_stats",
        "held",
        "peak",
    )

    def __init__(self, stats: QueueStats | None = None) -> None:
        self._stats = stats if stats is not None else QueueStats()
        self._room = trio.Event()
        self._stalled = 0.0
        self._stalled_since: float | None = None
        self._stall_watchers: set[Mailbox] = set()
        self.held = 0
        self.peak = 0

    @property
    def stalled(self) -> bool:
        """Whether the router is waiting for room now (the stream is not read meanwhile)."""
        return self._stalled_since is not None

    def waking_on_stall(self, mailbox: Mailbox) -> _StallWaking:
        """While inside, a stall (the router beginning to wait for room) wakes ``mailbox``'s
        waiting worker up, without a task of its own to wait for the stall."""
        return _StallWaking(self._stall_watchers, mailbox)

    def stalled_time(self) -> float:
        """The total time the router has waited for room so far, the ongoing wait included."""
        ongoing = 0.0
        if self._stalled_since is not None:
            ongoing = trio.current_time() - self._stalled_since
        return self._stalled + ongoing

    @property
    def stats(self) -> QueueStats:
        return self._stats

    def add(self, count: int = 1) -> None:
        self.held += count
        self.peak = max(self.peak, self.held)
        self._stats._add(count)

    def remove(self, count: int) -> None:
        if count:
            self.held -= count
            self._stats._add(-count)
            self._room.set()

    def coalesced(self) -> None:
        self._stats.coalesced += 1

    async def wait_for_room(self, limit: int) -> None:
        """Return once fewer than ``limit`` bodies are queued (at once if they already are)."""
        if self.held < limit:
            return
        self._stats.stalls += 1
        self._stalled_since = trio.current_time()
        for mailbox in self._stall_watchers:
            mailbox.wake()
        try:
            while self.held >= limit:
                self._room = trio.Event()
                await self._room.wait()
        finally:
            self._stalled += trio.current_time() - self._stalled_since
            self._stalled_since = None


class _StallWaking:
    """The context of :meth:`Backlog.waking_on_stall` (entered once or twice per handled
    object: a plain class, not a generator-based context manager)."""

    __slots__ = ("_mailbox", "_watchers")

    def __init__(self, watchers: set[Mailbox], mailbox: Mailbox) -> None:
        self._watchers = watchers
        self._mailbox = mailbox

    def __enter__(self) -> None:
        self._watchers.add(self._mailbox)

    def __exit__(self, *exc_info: object) -> None:
        self._watchers.discard(self._mailbox)


class Mailbox:
    """The events of one object on their way from the router to the object's worker.

    One sender (the router) and one receiver (the worker). ``keep_all=False`` keeps only the
    newest event; ``keep_all=True`` keeps every one, in order (for ``on.event`` handlers).
    """

    __slots__ = (
        "_arrived",
        "_awaited",
        "_backlog",
        "_closed",
        "_discarded",
        "_events",
        "_keep_all",
        "_queued_ticket",
        "_versions",
        "_woken",
        "echo",
        "idling",
        "parked_until",
        "revive",
        "ticket",
    )

    def __init__(self, backlog: Backlog, *, keep_all: bool) -> None:
        self._backlog = backlog
        self._keep_all = keep_all
        # Lists, not deques: a mailbox lives as long as its object has recent work, and an
        # empty list costs a tenth of an empty deque (which keeps a 64-slot block).
        self._events: list[RawEvent] = []
        self._versions: list[str] = []  # the newest VERSIONS_KEPT, oldest first
        self._closed = False
        self._discarded = False
        self._woken = False
        self._awaited: str | None = None
        self._arrived: trio.Event | None = None  # while the worker waits in wait()
        self.echo: str | None = None
        """While its worker is parked: the version of that worker's own last write, which
        settled the object (see ``_engine/echoes.py``); its echo needs no worker at all (see
        ``absorbs``)."""
        self.idling = False
        """While the worker waits with nothing to do but new events: a reconcile request
        (see reconciling.py) may wake it up then, and only then."""
        # When the queued work arrived (see _util/ordering.py): a ticket is taken as an event
        # lands in an empty mailbox and kept while newer events join or replace it.
        self._queued_ticket = 0
        self.ticket: int | None = None
        """The ticket of the oldest work the worker has taken (before that: of the first
        event), by which its waits are ordered."""
        self.parked_until: float | None = None
        """While its worker is parked (see :class:`IdleWorkers`): when its idleness ends."""
        self.revive: Callable[[], None] | None = None
        """While its worker is parked: starts a task for it again (the router calls it before
        it puts the next event in)."""

    @property
    def parked(self) -> bool:
        """No task serves this mailbox now, but the next event starts one (see IdleWorkers)."""
        return self.revive is not None

    def __len__(self) -> int:
        return len(self._events)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def discarded(self) -> bool:
        """Taken away from its worker (e.g. the object moved to another shard): the worker
        finishes the step in progress and starts nothing more, not even a retry."""
        return self._discarded

    def would_grow(self) -> bool:
        """Whether the next :meth:`put` adds a body to the backlog (rather than replacing one)."""
        return self._keep_all or not self._events

    def put(self, event: RawEvent) -> None:
        """Queue an event (never blocks: the router waits for room before, if it must)."""
        if self._closed:
            raise trio.ClosedResourceError("The mailbox is closed.")
        metadata = event["object"].get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if isinstance(version, str):
            versions = self._versions
            versions.append(version)
            if len(versions) > VERSIONS_KEPT:
                del versions[0]
        if not self._events:
            self._queued_ticket = next_ticket()
            if self.ticket is None:
                self.ticket = self._queued_ticket
        if self._events and not self._keep_all:
            self._events[-1] = event  # the newest state supersedes the queued one
            self._backlog.coalesced()
        else:
            self._events.append(event)
            self._backlog.add()
        awaited = self._awaited
        if awaited is None or version == awaited or not isinstance(version, str):
            self._notify()
        elif event["type"] not in ("MODIFIED", "ADDED"):
            self._notify()  # a deletion, a listing: the worker sees it at once

    def absorbs(self, event: RawEvent, superseded: Sequence[str]) -> bool:
        """Whether the event is the parked worker's own echo (see :attr:`echo`), taken here
        instead of reviving the worker: that of its settling write, or of an earlier write of
        the same cycle (``superseded``: a waiting worker is not woken up for it either, and
        the settling write's echo comes after it). Remembered as seen (:meth:`has_seen`)."""
        echo = self.echo
        if echo is None or self._events or event["type"] != "MODIFIED":
            return False
        metadata = event["object"].get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if not isinstance(version, str) or (version != echo and version not in superseded):
            return False
        versions = self._versions
        versions.append(version)
        if len(versions) > VERSIONS_KEPT:
            del versions[0]
        if version == echo:
            self.echo = None  # once: a later event of the same version is not ours
        return True

    def await_version(self, version: str | None) -> None:
        """Wake the waiting worker only for this version (or a deletion, or a listing).

        For a worker that waits for its own patch and has nothing to do with the states in
        between (no ``on.event`` handlers, no daemons): each of them would wake it up only to
        wait again. They are still queued (the newest one) and remembered (:meth:`has_seen`).
        ``None``: every event wakes it up (the default).
        """
        self._awaited = version

    def drain(self, into: list[RawEvent]) -> bool:
        """Move everything queued into ``into``; return False once closed (nothing more comes).

        The ticket of what is drained becomes :attr:`ticket`, unless ``into`` still holds
        older work (whose ticket stays)."""
        count = len(self._events)
        if count:
            if not into:
                self.ticket = self._queued_ticket
            into.extend(self._events)
            self._events.clear()
            self._backlog.remove(count)
        return not self._closed

    async def wait(self, into: list[RawEvent]) -> bool:
        """Wait for at least one event (moved into ``into``) or the closing; as :meth:`drain`.

        A :meth:`wake` during the wait ends it too, possibly with nothing received.
        """
        try:
            while not self._events and not self._closed and not self._woken:
                arrived = self._arrived = trio.Event()
                await arrived.wait()
        finally:
            self._woken = False
            self._arrived = None
        return self.drain(into)

    def wake(self) -> None:
        """End the worker's current :meth:`wait` (if any) even without an event."""
        self._woken = True
        self._notify()

    def _notify(self) -> None:
        if self._arrived is not None:
            self._arrived.set()

    def has_seen(self, version: str) -> bool:
        """Whether an event of this resource version has come (recently; see VERSIONS_KEPT)."""
        return version in self._versions

    def close(self) -> None:
        """No more events will come; the worker still takes what is queued."""
        self._closed = True
        self._notify()

    def discard(self) -> None:
        """The worker is gone, or must go: drop what is queued (no longer counted as held)."""
        self._closed = True
        self._discarded = True
        self.revive = None  # a parked worker never comes back
        self.parked_until = None
        self._notify()
        self._backlog.remove(len(self._events))
        self._events.clear()


RETIREMENT_SLACK = 1.0
"""How late (seconds) a parked mailbox may be retired after its idleness has ended, at most
(the watcher allows a tenth of ``idle_timeout`` up to that)."""


class IdleWorkers:
    """The parked workers of one watcher, each until its ``idle_timeout`` has passed.

    A parked worker has no task: its mailbox stays in the watcher's streams with
    :attr:`Mailbox.revive` set, and the router revives it for the next event (the same mailbox,
    the same memory), exactly where a waiting worker would have woken up. :meth:`run` retires
    each parked mailbox when its time is up, as the waiting worker would have exited then.
    """

    __slots__ = ("_changed", "_heap", "_serial")

    def __init__(self) -> None:
        # (when its idleness ends, serial, the mailbox, its retirement, how late it may come):
        # revived mailboxes stay in the heap until then, recognised by a different (or no)
        # ``parked_until``.
        self._heap: list[tuple[float, int, Mailbox, Callable[[], bool], float]] = []
        self._serial = itertools.count()
        self._changed = trio.Event()

    def __len__(self) -> int:
        return sum(1 for entry in self._heap if entry[2].parked_until == entry[0])

    def park(
        self,
        mailbox: Mailbox,
        until: float,
        revive: Callable[[], None],
        retire: Callable[[], bool],
        *,
        slack: float = 0.0,
    ) -> None:
        """The worker of ``mailbox`` ends its task; ``revive`` starts it again, ``retire`` (at
        ``until``, or up to ``slack`` seconds later, unless revived before) ends it for good."""
        mailbox.parked_until = until
        mailbox.revive = revive
        if not self._heap or until + slack < self._heap[0][0] + self._heap[0][4]:
            self._changed.set()  # the retirer sleeps until a later time: wake it up
        heapq.heappush(self._heap, (until, next(self._serial), mailbox, retire, slack))

    @staticmethod
    def unpark(mailbox: Mailbox) -> None:
        """Start the parked worker of ``mailbox`` again (a new event is coming)."""
        revive = mailbox.revive
        mailbox.revive = None
        mailbox.parked_until = None
        mailbox.echo = None
        if revive is not None:
            revive()

    def retire_due(self, now: float) -> int:
        """Retire the parked mailboxes whose idleness has ended by ``now``; how many."""
        retired = 0
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, mailbox, retire, _ = heapq.heappop(heap)
            if mailbox.parked_until != deadline:
                continue  # revived (and maybe parked again, with a later entry) or discarded
            mailbox.parked_until = None
            mailbox.revive = None
            retire()
            retired += 1
        return retired

    async def run(self) -> None:
        """Retire parked mailboxes as their time comes; runs until cancelled.

        A retirement may come late by the slack it was parked with, so that one wake-up retires
        all the mailboxes parked within that time (after a listing of thousands of objects, each
        parked at its own moment, a wake-up for each cost more than the retirements themselves).
        """
        while True:
            self._changed = trio.Event()
            until = self._heap[0][0] + self._heap[0][4] if self._heap else math.inf
            with trio.move_on_at(until):
                await self._changed.wait()
            self.retire_due(trio.current_time())
