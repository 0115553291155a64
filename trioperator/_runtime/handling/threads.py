"""Running a sync function in one of trio's cached worker threads, at the least cost per call.

``trio.to_thread.run_sync`` does more per call than a handler needs: it names the OS thread
and renames it back (two ``pthread_setname_np`` calls through ctypes), formats that name from
the task's, waits a scheduler pass for a free token even when the limiter has plenty, and
registers the thread for ``trio.from_thread``: a large share of the hop's CPU for the short
calls most sync handlers are (figures: benchmarks/README.md, "Figures behind the design").
Here the same hop is made of trio's public parts only: a token of the ``CapacityLimiter`` taken
without a pass when one is free, ``trio.lowlevel.start_thread_soon`` (trio's own thread cache),
and the results sent back with ``TrioToken.run_sync_soon``, several at once when they come
together (see ``_Inbox``).

A call that is expected to be quick is waited for in place (see ``_Call``). Most sync
handlers return within microseconds; while the trio thread runs on, the worker woken for such a
call has to win the GIL from it, and is often moved to the other core for that, which makes
a sync handler cost measurably more CPU per call than an async one. So the trio thread blocks
instead, for at most ``QUICK_WAIT``: the worker finds the GIL free, runs the
call and hands the result over, and the trio thread reports it. A function whose last call
took longer (``_Durations``) is not waited for: the trio thread goes on at once, and its
result comes through the inbox. A function counts as quick when its last call ran for less
than half of ``QUICK_WAIT``.

When every token of the limiter is taken and calls have to wait (more sync handlers at once than
``settings.execution.max_workers``), that is logged: a warning when the first call has to wait,
naming the setting to raise, and an info line when none waits any more, with how many waited
and for how long (see ``_Saturation``). Once per such episode, and at most once per
``SATURATION_WARNING_INTERVAL``: a limiter that fills up and drains again and again is one
warning a minute, not one per handler. Only the calls that wait pay for it.

What stays as in ``trio.to_thread.run_sync``: the function runs in a copy of the caller's
context variables, with sniffio's "current async library" unset (there is no event loop in
the thread); cancellation is checked before the thread starts; once it runs, a cancellation
waits for it to return, unless ``abandon_on_cancel``, when the caller leaves at once and the
thread's token is given back when it ends. What differs: the thread is not known to
``trio.from_thread`` as the caller's; to call into trio from it, pass ``trio_token=`` (a
``trio.lowlevel.current_trio_token()`` taken in the trio thread).

One way for each kind of call: user code (handlers and every other user function, through
``invocation.invoke``) goes through here, per event and under the operator's limiter; the
framework's own blocking calls, which are rare and not per event (certificates and CAs, the
fallback logins, decoding an admission review), use ``trio.to_thread.run_sync`` as it is,
keeping trio's thread names and ``trio.from_thread``.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import outcome
import sniffio
import trio

from trioperator._util.lognames import framework_logger

__all__ = ["QUICK_WAIT", "SATURATION_WARNING_INTERVAL", "run_in_thread"]

logger = framework_logger("kopf._core.actions.invocation", "trioperator.threads")

SATURATION_WARNING_INTERVAL = 60.0
"""The least time between two warnings that calls wait for a free thread (seconds)."""

T = TypeVar("T")

QUICK_WAIT = 0.0005
"""The longest the trio thread blocks for a call expected to be quick (seconds). It covers
waking a worker up, the call itself and the way back; a call that takes longer is left to its
thread, and its result comes through the trio loop as any other."""


async def run_in_thread(
    fn: Callable[[], T],
    *,
    limiter: trio.CapacityLimiter,
    abandon_on_cancel: bool = False,
    known_as: object = None,
) -> T:
    """Call ``fn()`` in a worker thread, holding one of ``limiter``'s tokens, and return or
    raise what it did.

    ``known_as``: what the durations of such calls are remembered by (the user's function,
    when ``fn`` wraps it); a call is waited for in place if the last one was quick. ``None``:
    never waited for in place.
    """
    await trio.lowlevel.checkpoint_if_cancelled()
    borrower = _Borrower()
    run = _run_state()
    try:
        limiter.acquire_on_behalf_of_nowait(borrower)
    except trio.WouldBlock:
        saturation = run.saturation(limiter)
        saturation.wait_starts(limiter)
        try:
            await limiter.acquire_on_behalf_of(borrower)  # all taken: wait, cancellably
        finally:
            saturation.wait_ends(limiter)
    task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
    context = contextvars.copy_context()
    context.run(sniffio.current_async_library_cvar.set, None)
    durations = run.durations
    in_place = known_as is not None and durations.quick(known_as)
    call = _Call(fn, context, in_place=in_place)

    def report(result: outcome.Outcome[T]) -> None:
        # In the trio thread: the token goes back even if the caller has left (abandoned).
        limiter.release_on_behalf_of(borrower)
        durations.record(known_as, call.elapsed)
        if task is not None:
            trio.lowlevel.reschedule(task, result)

    inbox = run.inbox

    def deliver(result: outcome.Outcome[T]) -> None:
        if not call.hand_over(result):  # in the worker thread
            inbox.put(report, result)

    try:
        trio.lowlevel.start_thread_soon(call.run, deliver)
    except BaseException:
        limiter.release_on_behalf_of(borrower)
        raise

    if in_place:  # decided above: the call may have ended (and changed its state) already
        try:
            quick = call.wait(QUICK_WAIT)
        except BaseException:
            # Interrupted in the wait (an exception from a signal handler): the caller leaves.
            if call.handed_over:
                limiter.release_on_behalf_of(borrower)  # report() will not run for it
            task = None
            raise
        if quick is None:
            # Marked slow now, not when it ends: the calls that start meanwhile (sync daemons,
            # a burst of slow handlers) do not block the trio thread each.
            durations.record(known_as, QUICK_WAIT)
        else:
            # Reported through the run's queue of calls from other threads, as a result that
            # comes the loop's way is: what the thread put there before it returned (e.g. the
            # events it posted) is taken first, so the caller sees the same order either way.
            run.token.run_sync_soon(report, quick)

    def abort(_: Any) -> trio.lowlevel.Abort:
        nonlocal task
        if abandon_on_cancel:
            task = None  # the thread's result is dropped; its token is released by report()
            return trio.lowlevel.Abort.SUCCEEDED
        return trio.lowlevel.Abort.FAILED  # wait for the thread; the result comes as usual

    result: T = await trio.lowlevel.wait_task_rescheduled(abort)
    return result


_WAITING, _HANDED_OVER, _GONE = "waiting", "handed over", "gone"


class _Call(Generic[T]):
    """One call of a sync function in a worker thread, and its result's way back.

    Waited for in place, the worker hands the result over to the blocked trio thread
    (``hand_over``, ``wait``): it does not wake the trio loop up, and it keeps the GIL from the
    call to its idle wait. Otherwise, or once the trio thread has stopped waiting,
    ``hand_over`` refuses and the result goes through the inbox.
    """

    __slots__ = ("_context", "_fn", "_mutex", "_result", "_signal", "_state", "elapsed")

    def __init__(
        self, fn: Callable[[], T], context: contextvars.Context, *, in_place: bool
    ) -> None:
        self._fn = fn
        self._context = context
        self.elapsed = 0.0
        self._result: outcome.Outcome[T] | None = None
        self._state = _WAITING if in_place else _GONE
        if in_place:
            self._mutex = threading.Lock()
            self._signal = threading.Lock()
            self._signal.acquire()  # released by hand_over()

    @property
    def handed_over(self) -> bool:
        return self._state is _HANDED_OVER

    def run(self) -> T:
        """In the worker thread: the call itself, timed."""
        started = time.perf_counter()
        try:
            return self._context.run(self._fn)
        finally:
            self.elapsed = time.perf_counter() - started

    def hand_over(self, result: outcome.Outcome[T]) -> bool:
        """In the worker thread: give the result to the waiting trio thread, if it waits."""
        if self._state is _GONE:
            return False
        with self._mutex:
            if self._state is not _WAITING:
                return False
            self._result = result
            self._state = _HANDED_OVER
        self._signal.release()
        return True

    def wait(self, timeout: float) -> outcome.Outcome[T] | None:
        """In the trio thread: the result if it is handed over within ``timeout``, else None
        (and it will not be: it comes through the inbox then)."""
        try:
            self._signal.acquire(timeout=timeout)
        finally:
            with self._mutex:
                if self._state is _WAITING:
                    self._state = _GONE
        return self._result if self._state is _HANDED_OVER else None


class _Durations:
    """How long each function's last call in a thread ran, to tell the quick ones.

    Kept by the function's ``id()``, not by the function: this holds nothing alive, and a
    reused id only costs one wrong guess (a wait of ``QUICK_WAIT`` or a trip through the loop).
    Functions made anew for every call (e.g. sub-handlers defined inside a handler) would fill
    it up, so it is cleared when it reaches ``LIMIT``; an unknown function counts as quick.
    """

    LIMIT = 1024

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self._last)

    def quick(self, key: object) -> bool:
        # The limit is read at each call: tests change QUICK_WAIT.
        return self._last.get(id(key), 0.0) < QUICK_WAIT / 2

    def record(self, key: object, elapsed: float) -> None:
        if key is None:
            return
        last = self._last
        if len(last) >= self.LIMIT and id(key) not in last:
            last.clear()
        last[id(key)] = elapsed


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


class _Saturation:
    """The episodes of one limiter with every token taken and calls waiting for one.

    An episode starts when a call has to wait and no other does, and ends when no call waits
    any more (each got its token, or was cancelled). Its warning is skipped if the last one was
    less than ``SATURATION_WARNING_INTERVAL`` ago, and then so is its end's info line.
    """

    __slots__ = ("_episode_start", "_last_warning", "_waited", "_waiting", "_warned")

    def __init__(self) -> None:
        self._waiting = 0
        self._waited = 0
        self._episode_start = 0.0
        self._last_warning = -math.inf
        self._warned = False

    def wait_starts(self, limiter: trio.CapacityLimiter) -> None:
        self._waiting += 1
        self._waited += 1
        if self._waiting > 1:
            return
        now = trio.current_time()
        self._episode_start = now
        self._waited = 1
        self._warned = now - self._last_warning >= SATURATION_WARNING_INTERVAL
        if self._warned:
            self._last_warning = now
            logger.warning(
                f"Sync handlers wait for a free thread: all {limiter.total_tokens} are busy."
                " Raise settings.execution.max_workers, or make the long-running handlers"
                " async."
            )

    def wait_ends(self, limiter: trio.CapacityLimiter) -> None:
        self._waiting -= 1
        if self._waiting or not self._warned:
            return
        self._warned = False
        lasted = trio.current_time() - self._episode_start
        logger.info(
            f"Sync handlers no longer wait for threads: {self._waited} call(s) waited for one"
            f" of the {limiter.total_tokens} in the last {lasted:.3f}s."
        )


class _RunState:
    """What the calls of one trio run share: its token, their inbox, their functions'
    durations, and the saturation episodes of their limiters."""

    __slots__ = ("_saturations", "durations", "inbox", "token")

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self.token = token
        self.inbox = _Inbox(token)
        self.durations = _Durations()
        # By the limiter, without keeping it alive (an operator's limiter ends with it).
        self._saturations: weakref.WeakKeyDictionary[trio.CapacityLimiter, _Saturation] = (
            weakref.WeakKeyDictionary()
        )

    def saturation(self, limiter: trio.CapacityLimiter) -> _Saturation:
        found = self._saturations.get(limiter)
        if found is None:
            found = self._saturations[limiter] = _Saturation()
        return found


_RUN_STATE: trio.lowlevel.RunVar[_RunState] = trio.lowlevel.RunVar("trioperator_threads")


def _run_state() -> _RunState:
    try:
        return _RUN_STATE.get()
    except LookupError:
        state = _RunState(trio.lowlevel.current_trio_token())
        _RUN_STATE.set(state)
        return state


class _Borrower:
    """Who holds the limiter's token for one call (each call its own, as the limiter wants)."""

    __slots__ = ()
