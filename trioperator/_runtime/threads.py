"""Running a sync function in one of trio's cached worker threads, at the least cost per call.

``trio.to_thread.run_sync`` does more per call than a handler needs: it names the OS thread
and renames it back (two ``pthread_setname_np`` calls through ctypes), formats that name from
the task's, waits a scheduler pass for a free token even when the limiter has plenty, and
registers the thread for ``trio.from_thread``. That was about a third of the hop's CPU: ~205
vs. ~130 microseconds a call with 8 calls in flight on the 2-core benchmark machine.
Here the same hop is made of trio's public parts only: a token of the ``CapacityLimiter`` taken
without a pass when one is free, ``trio.lowlevel.start_thread_soon`` (trio's own thread cache),
and the results sent back with ``TrioToken.run_sync_soon``, several at once when they come
together (see ``_Inbox``).

What stays as in ``trio.to_thread.run_sync``: the function runs in a copy of the caller's
context variables, with sniffio's "current async library" unset (there is no event loop in
the thread); cancellation is checked before the thread starts; once it runs, a cancellation
waits for it to return, unless ``abandon_on_cancel``, when the caller leaves at once and the
thread's token is given back when it ends. What differs: the thread is not known to
``trio.from_thread`` as the caller's; to call into trio from it, pass ``trio_token=`` (a
``trio.lowlevel.current_trio_token()`` taken in the trio thread).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import threading
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

    def report(result: outcome.Outcome[T]) -> None:
        # In the trio thread: the token goes back even if the caller has left (abandoned).
        limiter.release_on_behalf_of(borrower)
        if task is not None:
            trio.lowlevel.reschedule(task, result)

    inbox = _inbox()

    def deliver(result: outcome.Outcome[T]) -> None:
        inbox.put(report, result)  # in the worker thread

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


class _Inbox:
    """The results of the worker threads, taken in the trio thread in batches.

    Waking the trio thread up costs the worker a syscall (``run_sync_soon`` writes to a
    socket), and the syscall gives the GIL away: the worker then has to win it back from a busy
    trio thread before it can return to the cache, a switch of a few milliseconds and several
    context switches. So a result is only queued when a batch is already announced: the trio
    thread is woken once per batch, and a worker holds the GIL from its job to its idle wait.
    """

    __slots__ = ("_announced", "_lock", "_results", "_token")

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token
        self._results: collections.deque[tuple[Callable[[Any], None], Any]] = collections.deque()
        self._lock = threading.Lock()
        self._announced = False

    def put(self, report: Callable[[Any], None], result: Any) -> None:
        """In a worker thread: have ``report(result)`` called in the trio thread."""
        self._results.append((report, result))
        with self._lock:
            if self._announced:
                return  # the announced batch takes this one too
            self._announced = True
        # If the run is over already, there is no one to tell.
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._take)

    def _take(self) -> None:
        # In the trio thread. Unannounced first: a result queued after this line announces a
        # batch of its own; one queued before it is taken below.
        with self._lock:
            self._announced = False
        results = self._results
        while results:
            report, result = results.popleft()
            report(result)


_INBOX: trio.lowlevel.RunVar[_Inbox] = trio.lowlevel.RunVar("trioperator_thread_inbox")


def _inbox() -> _Inbox:
    try:
        return _INBOX.get()
    except LookupError:
        inbox = _Inbox(trio.lowlevel.current_trio_token())
        _INBOX.set(inbox)
        return inbox


class _Borrower:
    """Who holds the limiter's token for one call (each call its own, as the limiter wants)."""

    __slots__ = ()
