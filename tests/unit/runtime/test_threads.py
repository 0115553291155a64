"""Sync functions in worker threads (``run_in_thread``): results, errors, context, the limiter,
cancellation, quick calls waited for in place."""

from __future__ import annotations

import contextvars
import inspect
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import outcome
import pytest
import sniffio
import trio
import trio.testing
from trioperator._runtime.handling import threads
from trioperator._runtime.handling.threads import run_in_thread

marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")


async def test_the_function_runs_in_another_thread_and_its_result_comes_back() -> None:
    limiter = trio.CapacityLimiter(2)
    result = await run_in_thread(lambda: threading.get_ident(), limiter=limiter)
    assert result != threading.get_ident()
    assert limiter.borrowed_tokens == 0


async def test_an_error_of_the_function_is_raised_to_the_caller_and_the_token_returned() -> None:
    limiter = trio.CapacityLimiter(1)

    def failing() -> None:
        raise LookupError("from the thread")

    with pytest.raises(LookupError, match="from the thread"):
        await run_in_thread(failing, limiter=limiter)
    assert limiter.borrowed_tokens == 0


async def test_the_thread_sees_a_copy_of_the_callers_context_and_no_async_library() -> None:
    marker.set("caller's")
    seen: dict[str, object] = {}

    def look() -> None:
        seen["marker"] = marker.get()
        marker.set("thread's")  # a copy: the caller's value stays
        try:
            seen["library"] = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            seen["library"] = None

    await run_in_thread(look, limiter=trio.CapacityLimiter(1))
    assert seen == {"marker": "caller's", "library": None}
    assert marker.get() == "caller's"
    assert sniffio.current_async_library() == "trio"


async def test_no_more_threads_run_at_once_than_the_limiter_has_tokens() -> None:
    limiter = trio.CapacityLimiter(2)
    lock = threading.Lock()
    running = 0
    most = 0
    entered = threading.Semaphore(0)
    release = threading.Event()

    def busy() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        entered.release()
        release.wait(10)
        with lock:
            running -= 1

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(lambda: run_in_thread(busy, limiter=limiter))
        for _ in range(2):
            await trio.to_thread.run_sync(entered.acquire)
        await trio.testing.wait_all_tasks_blocked()  # the other three are parked on the limiter
        assert limiter.statistics().tasks_waiting == 3
        release.set()
    assert most == 2
    assert limiter.borrowed_tokens == 0


async def test_a_caller_cancelled_before_the_start_runs_nothing() -> None:
    ran = threading.Event()
    with trio.CancelScope() as scope:
        scope.cancel()
        await run_in_thread(ran.set, limiter=trio.CapacityLimiter(1))
    assert scope.cancelled_caught
    assert not ran.is_set()


async def test_a_caller_waiting_for_a_token_can_be_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = trio.CapacityLimiter(1)
    await limiter.acquire()  # the only token is taken
    ran = threading.Event()
    with trio.move_on_after(5) as scope:
        await run_in_thread(ran.set, limiter=limiter)
    assert scope.cancelled_caught
    assert not ran.is_set()
    limiter.release()
    assert limiter.borrowed_tokens == 0


async def test_a_cancellation_waits_for_the_thread_to_return() -> None:
    limiter = trio.CapacityLimiter(1)
    started = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        finished.set()
        return "done"

    async def release_when_cancelled(scope: trio.CancelScope) -> None:
        await trio.to_thread.run_sync(started.wait, 10)
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert not finished.is_set()  # the caller is still waiting: the thread runs
        release.set()

    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as scope:
            nursery.start_soon(release_when_cancelled, scope)
            result = await run_in_thread(slow, limiter=limiter)
    # The thread's result is not lost; the cancellation hits the caller's next checkpoint.
    assert scope.cancel_called
    assert result == "done"
    assert finished.is_set()
    assert limiter.borrowed_tokens == 0


async def test_an_abandoned_thread_runs_on_and_gives_its_token_back_when_it_ends() -> None:
    limiter = trio.CapacityLimiter(1)
    started = threading.Event()
    release = threading.Event()

    def slow() -> None:
        started.set()
        release.wait(10)

    with trio.CancelScope() as scope:

        async def cancel_when_started() -> None:
            await trio.to_thread.run_sync(started.wait, 10)
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_started)
            await run_in_thread(slow, limiter=limiter, abandon_on_cancel=True)
    assert scope.cancelled_caught
    assert limiter.borrowed_tokens == 1  # the thread still holds it
    release.set()
    with trio.fail_after(10):
        await limiter.acquire()  # given back by the thread's end


async def test_results_that_finish_together_while_the_trio_thread_is_busy_reach_their_callers() -> (
    None
):
    # The threads finish while the trio thread cannot take their results (it is blocked here,
    # without a checkpoint): they are taken in one batch later, each by its own caller.
    count = 16
    limiter = trio.CapacityLimiter(count)
    go = threading.Event()
    returning = threading.Semaphore(0)
    results: dict[int, int] = {}

    def work(number: int) -> int:
        go.wait()
        returning.release()
        return number * number

    async def call(number: int) -> None:
        results[number] = await run_in_thread(lambda: work(number), limiter=limiter)

    async with trio.open_nursery() as nursery:
        for number in range(count):
            nursery.start_soon(call, number)
        await trio.testing.wait_all_tasks_blocked()
        go.set()
        for _ in range(count):
            returning.acquire()  # blocks the trio thread: the results queue up meanwhile
    assert results == {number: number * number for number in range(count)}
    assert limiter.borrowed_tokens == 0


# ------------------------------------------------------------- quick calls, waited for in place
#
# Whether a call is waited for in place is a matter of the trio thread's real time, which no
# mock clock governs. So these tests take no real-time measurements: they see the decision for
# each call and the trio thread's wait where ``_Call`` makes and does them (``CallSpy``), and
# they set the measured durations of the calls with a clock of their own (``ThreadsClock``).


class CallSpy:
    """What ``run_in_thread`` decided for each call, and what the trio thread's waits saw."""

    def __init__(self) -> None:
        self.in_place: list[bool] = []
        """Per call, in order: whether it was to be waited for in place."""
        self.waits: list[bool] = []
        """Per wait in place, in order: whether the result was handed over within it."""
        self.waiting = threading.Event()
        """Set as the trio thread begins to wait in place (it is blocked from then on)."""


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> CallSpy:
    spy = CallSpy()
    init, wait = threads._Call.__init__, threads._Call.wait

    def spied_init(self: Any, fn: Any, context: Any, *, in_place: bool) -> None:
        spy.in_place.append(in_place)
        init(self, fn, context, in_place=in_place)

    def spied_wait(self: Any, timeout: float) -> Any:
        spy.waiting.set()
        result = wait(self, timeout)
        spy.waits.append(result is not None)
        return result

    monkeypatch.setattr(threads._Call, "__init__", spied_init)
    monkeypatch.setattr(threads._Call, "wait", spied_wait)
    return spy


class ThreadsClock:
    """The clock the calls in threads are timed by: it moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def threads_clock(monkeypatch: pytest.MonkeyPatch) -> ThreadsClock:
    clock = ThreadsClock()
    monkeypatch.setattr(threads, "time", clock)
    return clock


async def test_a_quick_call_is_waited_for_in_place_before_the_loop_runs_anything_else(
    monkeypatch: pytest.MonkeyPatch, spy: CallSpy
) -> None:
    monkeypatch.setattr(threads, "QUICK_WAIT", 30.0)  # the result is handed over long before
    other_ran = threading.Event()

    async def other() -> None:
        other_ran.set()

    def quick() -> bool:
        # Once the trio thread waits for this call, it runs nothing else until the result is
        # handed over: the other task, ready since before the call, has not run.
        assert spy.waiting.wait(30)
        return other_ran.is_set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)  # ready to run at the next checkpoint of this task
        ran_meanwhile = await run_in_thread(quick, limiter=trio.CapacityLimiter(1), known_as=quick)
    assert ran_meanwhile is False
    assert other_ran.is_set()
    assert (spy.in_place, spy.waits) == ([True], [True])


async def test_a_function_slower_than_the_wait_is_not_waited_for_in_place_again(
    monkeypatch: pytest.MonkeyPatch, spy: CallSpy, threads_clock: ThreadsClock
) -> None:
    monkeypatch.setattr(threads, "QUICK_WAIT", 30.0)
    limiter = trio.CapacityLimiter(1)

    def slow() -> None:
        threads_clock.now += threads.QUICK_WAIT  # this call takes as long as the whole wait

    def quick() -> None:
        pass

    for function in (slow, slow, quick, quick):
        await run_in_thread(function, limiter=limiter, known_as=function)
    # Unknown functions count as quick. The first call of ``slow`` ran longer than half the
    # wait, so the second is not waited for; ``quick`` stays quick.
    assert spy.in_place == [True, False, True, True]
    assert limiter.borrowed_tokens == 0


async def test_a_function_that_got_quick_again_is_waited_for_in_place_again(
    monkeypatch: pytest.MonkeyPatch, spy: CallSpy, threads_clock: ThreadsClock
) -> None:
    monkeypatch.setattr(threads, "QUICK_WAIT", 30.0)
    limiter = trio.CapacityLimiter(1)
    durations = iter([threads.QUICK_WAIT, 0.0, 0.0])

    def varying() -> None:
        threads_clock.now += next(durations)

    for _ in range(3):
        await run_in_thread(varying, limiter=limiter, known_as=varying)
    # Slow once: the next call is not waited for; it was quick, so the one after it is.
    assert spy.in_place == [True, False, True]


async def test_calls_that_start_while_a_slow_one_runs_are_not_waited_for_in_place(
    monkeypatch: pytest.MonkeyPatch, spy: CallSpy
) -> None:
    # The durations are only known when a call ends: a call that outlasts the wait marks its
    # function slow at once, or every call started meanwhile (sync daemons, a burst of slow
    # handlers) would block the trio thread for the whole wait.
    monkeypatch.setattr(threads, "QUICK_WAIT", 0.001)
    limiter = trio.CapacityLimiter(2)
    first = threading.Event()

    def slow(event: threading.Event) -> None:
        # The first call ends only when the test lets it, after the second has begun: the
        # trio thread's wait for it ends without its result whatever the machine's speed.
        event.wait(30)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: run_in_thread(lambda: slow(first), limiter=limiter, known_as=slow)
        )
        await trio.testing.wait_all_tasks_blocked()  # the wait in place is over, and given up
        done = threading.Event()
        done.set()
        await run_in_thread(lambda: slow(done), limiter=limiter, known_as=slow)
        first.set()
    assert spy.in_place == [True, False]
    assert spy.waits == [False]  # the one wait in place ended without the result
    assert limiter.borrowed_tokens == 0


async def test_an_error_of_a_quick_call_is_raised_in_place_and_the_token_returned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(threads, "QUICK_WAIT", 10.0)
    limiter = trio.CapacityLimiter(1)

    def failing() -> None:
        raise LookupError("quick and wrong")

    with pytest.raises(LookupError, match="quick and wrong"):
        await run_in_thread(failing, limiter=limiter, known_as=failing)
    assert limiter.borrowed_tokens == 0


async def test_a_signal_raising_during_the_wait_in_place_leaves_and_the_token_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(threads, "QUICK_WAIT", 10.0)
    limiter = trio.CapacityLimiter(1)
    release = threading.Event()
    main_thread = threading.get_ident()

    class Interrupted(Exception):
        pass

    interrupted = threading.Event()
    sending = threading.Lock()  # held while the worker sends; taken at the end to stop it

    def interrupt(signum: int, frame: object) -> None:
        if not interrupted.is_set():  # once: the signals sent until one lands are ignored
            interrupted.set()
            raise Interrupted

    # The line where the trio thread blocks, waiting for the call's result in place.
    lines, first = inspect.getsourcelines(threads._Call.wait)
    blocking = first + next(i for i, line in enumerate(lines) if "_signal.acquire(" in line)

    def in_the_wait() -> bool:
        frame = sys._current_frames().get(main_thread)
        return (
            frame is not None
            and frame.f_code is threads._Call.wait.__code__
            and frame.f_lineno == blocking
        )

    def interrupting() -> str:
        # Signalled once the trio thread is seen at the blocking line, not after a fixed sleep
        # (a busy machine can outlast any); and again until the handler has run, as a signal
        # that comes between the line's start and the lock's wait does not interrupt the wait.
        deadline = time.monotonic() + 10
        while not interrupted.is_set() and time.monotonic() < deadline:
            with sending:
                if in_the_wait() and not interrupted.is_set():
                    signal.pthread_kill(main_thread, signal.SIGUSR1)
            interrupted.wait(0.01)
        release.wait(10)
        return "done"

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with pytest.raises(Interrupted):
            await run_in_thread(interrupting, limiter=limiter, known_as=interrupting)
    finally:
        with sending:  # no signal is sent any more: the handler can go
            interrupted.set()
        signal.signal(signal.SIGUSR1, previous)
    assert limiter.borrowed_tokens == 1  # the thread runs on and holds it
    release.set()
    with trio.fail_after(10):
        await limiter.acquire()  # given back when the thread ends


async def test_a_call_that_ends_before_the_trio_thread_starts_waiting_is_still_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def start_and_finish(job: Callable[[], Any], deliver: Callable[[Any], None]) -> None:
        # The thread ends, and hands its result over, before start_thread_soon() returns.
        thread = threading.Thread(target=lambda: deliver(outcome.capture(job)))
        thread.start()
        thread.join()

    monkeypatch.setattr(trio.lowlevel, "start_thread_soon", start_and_finish)
    limiter = trio.CapacityLimiter(1)

    def quick() -> str:
        return "already done"

    with trio.fail_after(10):  # (abandoned on cancel: a lost result fails, not hangs)
        result = await run_in_thread(quick, limiter=limiter, known_as=quick, abandon_on_cancel=True)
    assert result == "already done"
    assert limiter.borrowed_tokens == 0


def test_a_result_handed_over_after_the_wait_ended_is_refused() -> None:
    call = threads._Call(lambda: None, contextvars.copy_context(), in_place=True)
    assert call.wait(0.001) is None  # nothing came in time: the trio thread goes on
    assert not call.hand_over(outcome.Value("late"))  # so the result takes the loop's way
    assert not call.handed_over


def test_a_result_handed_over_before_the_wait_is_taken_at_once() -> None:
    call = threads._Call(lambda: None, contextvars.copy_context(), in_place=True)
    assert call.hand_over(outcome.Value("early"))
    taken = call.wait(10)
    assert taken is not None
    assert taken.unwrap() == "early"


def test_a_call_not_waited_for_in_place_refuses_every_hand_over() -> None:
    call = threads._Call(lambda: None, contextvars.copy_context(), in_place=False)
    assert not call.hand_over(outcome.Value("any"))


def test_durations_tell_quick_functions_from_slow_ones_and_stay_bounded() -> None:
    durations = threads._Durations()

    def quick() -> None: ...
    def slow() -> None: ...

    assert durations.quick(quick)  # unknown: quick until shown otherwise
    durations.record(quick, threads.QUICK_WAIT / 10)
    durations.record(slow, threads.QUICK_WAIT)
    assert durations.quick(quick)
    assert not durations.quick(slow)
    durations.record(slow, 0.0)  # got quick again
    assert durations.quick(slow)

    durations.record(slow, 1.0)
    keep = [object() for _ in range(threads._Durations.LIMIT)]
    for key in keep:
        durations.record(key, 1.0)
    # Full: cleared, so what was known is forgotten (unknown counts as quick).
    assert durations.quick(slow)
    assert len(durations) <= threads._Durations.LIMIT
