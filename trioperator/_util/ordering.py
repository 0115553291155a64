"""First come, first served: tickets for work as it arrives, and slots given by ticket.

Handling an object waits for shared, limited things in a row: a worker slot under
``settings.queueing.worker_limit``, then a request slot for its patches. A plain FIFO semaphore
admits in the order the tasks *began to wait*, which is not the order the objects arrived in:
trio wakes the tasks that became ready together (e.g. handlers that finished in the same tick,
workers spawned from one read of the stream) in an arbitrary order, so a burst can be worked off
shuffled, and one unlucky object waits behind hundreds that came after it.

A *ticket* is a number from one counter, taken when work arrives (an event lands in an object's
empty mailbox). The worker makes it the current ticket (a context variable) while it does that
work, and :class:`OrderedSlots` admits the lowest ticket first. Waits without a current ticket
take a fresh one: they queue behind everything already waiting, as in a FIFO.

A cycle's first write carries the handlers' results (the status); the writes after it (the
body's marks) only record that they are done. When the API server cannot keep up, giving them
slots in turn with the first writes of the objects behind halves the rate at which results get
out. So a *follow-up* (the ticket is :data:`SPENT`) waits behind every first write for up to
``defer_limit`` seconds; after that, it takes its turn by the fresh ticket it took when it began
to wait (as any wait without a ticket does): it is never starved, and a backlog that outlasts
the deferral is worked off in the order the work came, as without it.
"""

from __future__ import annotations

import collections
import contextvars
import heapq
import itertools
from collections.abc import Iterator

import trio

__all__ = ["SPENT", "OrderedSlots", "current_ticket", "next_ticket"]

_tickets: Iterator[int] = itertools.count(1)

current_ticket: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "trioperator_ticket", default=None
)
"""The ticket of the work the current task does now (``None``: no particular work)."""

SPENT = 0
"""The current ticket once its work's first write has been sent: the writes after it are
follow-ups (see above). No ticket is ever 0: the counter starts at 1."""

DEFER_LIMIT = 5.0
"""Seconds a follow-up gives way to first writes before it takes its turn by its ticket.

As long as the default ``settings.persistence.consistency_timeout``: the operator already
accepts a write of its own lagging that long. Longer would leave more objects with their
results but without their marks (handled again if the operator dies meanwhile); much shorter
would end the deferral before a backlog of a few seconds is worked off (measured with the
open-loop benchmark at 160 objects/s: 2 s still left the results waiting about as long as the
marks under a heavy load)."""


def next_ticket() -> int:
    """A ticket newer than every ticket taken before (in this process)."""
    return next(_tickets)


class OrderedSlots:
    """A semaphore whose waiters are admitted lowest ticket first.

    A release while tasks wait hands the slot straight to the lowest-ticketed one, so no task
    that comes later can take it in between. Follow-ups (ticket :data:`SPENT`) wait in a queue
    of their own, first come first served, behind the others for up to ``defer_limit`` seconds,
    then by the ticket they took when they began to wait.
    """

    __slots__ = ("_defer_limit", "_followups", "_free", "_serial", "_total", "_waiters")

    def __init__(self, total: int, *, defer_limit: float = DEFER_LIMIT) -> None:
        if total < 1:
            raise ValueError("OrderedSlots needs at least one slot.")
        self._total = total
        self._free = total
        self._defer_limit = defer_limit
        self._serial = itertools.count()  # equal tickets: first come, first served
        self._waiters: list[tuple[int, int, trio.Event]] = []
        # Follow-ups: (when it began to wait, its ticket, event), oldest first.
        self._followups: collections.deque[tuple[float, int, trio.Event]] = collections.deque()

    @property
    def free(self) -> int:
        return self._free

    @property
    def waiting(self) -> int:
        return len(self._waiters) + len(self._followups)

    async def acquire(self, ticket: int | None = None) -> None:
        """Take a slot; ``ticket`` defaults to the current one, else a fresh one; a follow-up
        if it is :data:`SPENT`."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._free and not self._waiters and not self._followups:
            self._free -= 1
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        if ticket is None:
            ticket = current_ticket.get()
        if ticket == SPENT:
            await self._acquire_followup()
            return
        if ticket is None:
            ticket = next_ticket()
        entry = (ticket, next(self._serial), trio.Event())
        heapq.heappush(self._waiters, entry)
        try:
            await entry[2].wait()
        except BaseException:
            if entry[2].is_set():
                self.release()  # handed over, but cancelled before it ran: pass it on
            else:
                self._waiters.remove(entry)
                heapq.heapify(self._waiters)
            raise

    async def _acquire_followup(self) -> None:
        entry = (trio.current_time(), next_ticket(), trio.Event())
        self._followups.append(entry)
        try:
            await entry[2].wait()
        except BaseException:
            if entry[2].is_set():
                self.release()
            else:
                self._followups.remove(entry)
            raise

    def release(self) -> None:
        followups = self._followups
        if followups and (
            not self._waiters
            or (
                followups[0][1] < self._waiters[0][0]
                and trio.current_time() - followups[0][0] >= self._defer_limit
            )
        ):
            followups.popleft()[2].set()
            return
        if self._waiters:
            _, _, granted = heapq.heappop(self._waiters)
            granted.set()  # the slot passes to it as it is: ``_free`` does not change
            return
        if self._free >= self._total:
            raise RuntimeError("OrderedSlots released more often than acquired.")
        self._free += 1
