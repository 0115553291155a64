"""Running a sync function in one of trio's cached worker threads, at the least cost per call.

``trio.to_thread.run_sync`` does more per call than a handler needs: it names the OS thread
and renames it back (two ``pthread_setname_np`` calls through ctypes), formats that name from
the task's, waits a scheduler pass for a free token even when the limiter has plenty, and
registers the thread for ``trio.from_thread``. That was about a third of the hop's CPU: ~205
vs. ~130 microseconds a call with 8 calls in flight on the 2-core benchmark machine.
Here the same hop is made of trio's public parts only: a token of the ``CapacityLimiter`` taken
without a pass when one is free, ``trio.lowlevel.start_thread_soon`` (trio's own thread cache),
and the result sent back with ``TrioToken.run_sync_soon``.

What stays as in ``trio.to_thread.run_sync``: the function runs in a copy of the caller's
context variables, with sniffio's "current async library" unset (there is no event loop in
the thread); cancellation is checked before the thread starts; once it runs, a cancellation
waits for it to return, unless ``abandon_on_cancel``, when the caller leaves at once and the
thread's token is given back when it ends. What differs: the thread is not known to
``trio.from_thread`` as the caller's; to call into trio from it, pass ``trio_token=`` (a
``trio.lowlevel.current_trio_token()`` taken in the trio thread).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import sniffio
import trio

__all__ = ["run_in_thread"]

T = TypeVar("T")


async def run_in_thread(
    fn: Callable[[], T],
    *,
    limiter: trio.CapacityLimiter,
    abandon_on_cancel: bool = False,
) -> T:
    """Call ``fn()`` in a worker thread, holding one of ``limiter``'s tokens, and return or
    raise what it did."""
    await trio.lowlevel.checkpoint_if_cancelled()
    borrower = _Borrower()
    try:
        limiter.acquire_on_behalf_of_nowait(borrower)
    except trio.WouldBlock:
        await limiter.acquire_on_behalf_of(borrower)  # all taken: wait, cancellably
    task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()

    def report(result: outcome.Outcome[T]) -> None:
        # In the trio thread: the token goes back even if the caller has left (abandoned).
        limiter.release_on_behalf_of(borrower)
        if task is not None:
            trio.lowlevel.reschedule(task, result)

    def deliver(result: outcome.Outcome[T]) -> None:
        # In the worker thread. If the run is over already, there is no one to tell.
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(report, result)

    context = contextvars.copy_context()
    context.run(sniffio.current_async_library_cvar.set, None)
    try:
        trio.lowlevel.start_thread_soon(lambda: context.run(fn), deliver)
    except BaseException:
        limiter.release_on_behalf_of(borrower)
        raise

    def abort(_: Any) -> trio.lowlevel.Abort:
        nonlocal task
        if abandon_on_cancel:
            task = None  # the thread's result is dropped; its token is released by report()
            return trio.lowlevel.Abort.SUCCEEDED
        return trio.lowlevel.Abort.FAILED  # wait for the thread; the result comes as usual

    result: T = await trio.lowlevel.wait_task_rescheduled(abort)
    return result


class _Borrower:
    """Who holds the limiter's token for one call (each call its own, as the limiter wants)."""

    __slots__ = ()
