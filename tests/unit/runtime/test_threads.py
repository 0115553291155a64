"""Sync functions in worker threads (``run_in_thread``): results, errors, context, the limiter,
cancellation."""

from __future__ import annotations

import contextvars
import threading

import pytest
import sniffio
import trio
import trio.testing
from trioperator._runtime.threads import run_in_thread

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
