"""OrderedSlots: waiters are admitted lowest ticket first, whatever order they came to wait in."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock
from trioperator._util.ordering import OrderedSlots, current_ticket, next_ticket


async def test_waiters_are_admitted_by_ticket_not_by_arrival(autojump_clock: MockClock) -> None:
    slots = OrderedSlots(1)
    admitted: list[int] = []

    async def user(ticket: int) -> None:
        await slots.acquire(ticket)
        admitted.append(ticket)
        await trio.sleep(1)
        slots.release()

    await slots.acquire()  # held while the others line up
    async with trio.open_nursery() as nursery:
        for ticket in (5, 3, 9, 1, 7):  # they begin to wait in this order
            nursery.start_soon(user, ticket)
            await trio.sleep(0.1)
        assert admitted == []  # all five wait
        slots.release()
    assert admitted == [1, 3, 5, 7, 9]
    assert slots.free == 1


async def test_the_current_ticket_is_used_and_no_ticket_queues_last(
    autojump_clock: MockClock,
) -> None:
    slots = OrderedSlots(1)
    admitted: list[str] = []
    old = next_ticket()

    async def user(name: str, ticket: int | None) -> None:
        current_ticket.set(ticket)
        await slots.acquire()
        admitted.append(name)
        slots.release()

    await slots.acquire()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(user, "no ticket", None)  # a fresh ticket: newer than ``old``
        await trio.sleep(0.1)
        nursery.start_soon(user, "old work", old)
        await trio.sleep(0.1)
        slots.release()
    assert admitted == ["old work", "no ticket"]


async def test_a_cancelled_waiter_leaves_the_line_and_loses_no_slot(
    autojump_clock: MockClock,
) -> None:
    slots = OrderedSlots(2)
    await slots.acquire(1)
    await slots.acquire(2)
    with trio.move_on_after(1) as waited:
        await slots.acquire(0)
    assert waited.cancelled_caught
    # Had it stayed in the line, the slot released now would be handed to it, not freed.
    slots.release()
    assert slots.free == 1
    assert slots.try_acquire()  # nobody waits in front of it
    slots.release()
    slots.release()
    assert slots.free == 2
    with pytest.raises(RuntimeError, match="released more often"):
        slots.release()


async def test_a_slot_handed_to_a_cancelled_waiter_passes_on(autojump_clock: MockClock) -> None:
    slots = OrderedSlots(1)
    admitted: list[int] = []
    doomed = trio.CancelScope()
    await slots.acquire()

    async def user(ticket: int) -> None:
        await slots.acquire(ticket)
        admitted.append(ticket)
        slots.release()

    async def first() -> None:
        with doomed:
            await slots.acquire(1)
            admitted.append(1)  # never: cancelled as the slot is handed over
            slots.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(user, 2)
        await trio.sleep(0.1)
        nursery.start_soon(first)
        await trio.sleep(0.1)
        doomed.cancel()  # ticket 1 is cancelled, but has not run yet ...
        slots.release()  # ... when the slot is handed to it
    assert admitted == [2]
    assert slots.free == 1


async def test_try_acquire_takes_only_a_free_slot_nobody_waits_for(
    autojump_clock: MockClock,
) -> None:
    slots = OrderedSlots(1)
    assert slots.try_acquire()
    assert not slots.try_acquire()  # none free
    admitted: list[str] = []

    async def waiter() -> None:
        await slots.acquire(1)
        admitted.append("waiter")
        slots.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(0.1)
        slots.release()  # handed to the waiter: not free for a try_acquire in between
        assert not slots.try_acquire()
    assert admitted == ["waiter"]
    assert slots.try_acquire()  # free again, nobody waiting
    assert slots.free == 0
