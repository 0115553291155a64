"""A worker's mailbox: the newest event kept, and who wakes the waiting worker up."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from trioperator._runtime.objects.mailboxes import Backlog, Mailbox


def event(version: str, type_: str | None = "MODIFIED") -> Any:
    return {"type": type_, "object": {"metadata": {"name": "x", "resourceVersion": version}}}


async def woken_by(mailbox: Mailbox, *events: Any) -> list[Any]:
    """Put the events while the worker waits; what the wait returned with (none: not woken)."""
    received: list[Any] = []
    with trio.move_on_after(1):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(mailbox.wait, received)
            await trio.testing.wait_all_tasks_blocked()
            for item in events:
                mailbox.put(item)
                await trio.testing.wait_all_tasks_blocked()
    return received


async def test_every_event_wakes_the_worker_up_by_default(autojump_clock: Any) -> None:
    mailbox = Mailbox(Backlog(), keep_all=False)
    assert await woken_by(mailbox, event("2")) == [event("2")]


async def test_awaiting_its_version_the_worker_sleeps_through_other_states(
    autojump_clock: Any,
) -> None:
    backlog = Backlog()
    mailbox = Mailbox(backlog, keep_all=False)
    mailbox.await_version("3")
    assert await woken_by(mailbox, event("2")) == []  # queued, seen, but no wake-up
    assert len(mailbox) == 1
    assert backlog.held == 1
    assert mailbox.has_seen("2")
    mailbox.drain([])
    assert await woken_by(mailbox, event("2"), event("3")) == [event("3")]  # the newest only
    for other in (event("4", "DELETED"), event("5", None)):  # a deletion, a listing
        assert await woken_by(mailbox, other) == [other]


async def test_a_stall_wakes_the_awaiting_worker_up_to_free_its_room(
    autojump_clock: Any,
) -> None:
    backlog = Backlog()
    mailbox = Mailbox(backlog, keep_all=False)
    mailbox.await_version("3")
    received: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def worker() -> None:
            with backlog.waking_on_stall(mailbox):
                await mailbox.wait(received)

        nursery.start_soon(worker)
        await trio.testing.wait_all_tasks_blocked()
        mailbox.put(event("2"))
        await trio.testing.wait_all_tasks_blocked()
        assert received == []
        nursery.start_soon(backlog.wait_for_room, 1)  # full: the router stalls
        await trio.testing.wait_all_tasks_blocked()
    assert received == [event("2")]
    assert backlog.held == 0
