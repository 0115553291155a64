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
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
from collections.abc import Iterator

import trio

__all__ = ["OrderedSlots", "current_ticket", "next_ticket"]

_tickets: Iterator[int] = itertools.count(1)

current_ticket: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "trioperator_ticket", default=None
)
"""The ticket of the work the current task does now (``None``: no particular work)."""


def next_ticket() -> int:
    """A ticket newer than every ticket taken before (in this process)."""
    return next(_tickets)


class OrderedSlots:
    """A semaphore whose waiters are admitted lowest ticket first.

    A release while tasks wait hands the slot straight to the lowest-ticketed one, so no task
    that comes later can take it in between.
    """

    __slots__ = ("_free", "_serial", "_total", "_waiters")

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError("OrderedSlots needs at least one slot.")
        self._total = total
        self._free = total
        self._serial = itertools.count()  # equal tickets: first come, first served
        self._waiters: list[tuple[int, int, trio.Event]] = []

    @property
    def free(self) -> int:
        return self._free

    def try_acquire(self) -> bool:
        """Take a slot now if one is free and nobody waits for one; False otherwise.

        No schedule point: for a caller that has one right after (e.g. a wait for the network).
        """
        if self._free and not self._waiters:
            self._free -= 1
            return True
        return False

    async def acquire(self, ticket: int | None = None) -> None:
        """Take a slot; ``ticket`` defaults to the current one, else a fresh one."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._free and not self._waiters:
            self._free -= 1
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        if ticket is None:
            ticket = current_ticket.get()
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

    def release(self) -> None:
        if self._waiters:
            _, _, granted = heapq.heappop(self._waiters)
            granted.set()  # the slot passes to it as it is: ``_free`` does not change
            return
        if self._free >= self._total:
            raise RuntimeError("OrderedSlots released more often than acquired.")
        self._free += 1
