"""Waiting for the first of several things: the first one wins, the others are cancelled."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from trioperator._runtime.support.waiting import first_of, wait_any


async def _after(seconds: float, value: str, log: list[str]) -> str:
    try:
        await trio.sleep(seconds)
    except trio.Cancelled:
        log.append(f"{value} cancelled")
        raise
    log.append(f"{value} done")
    return value


async def test_the_first_to_return_wins_and_the_others_are_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    first = await first_of(
        lambda: _after(3, "slow", log),
        lambda: _after(1, "fast", log),
        lambda: _after(2, "middle", log),
    )
    assert (first.index, first.value) == (1, "fast")
    assert trio.current_time() == 1
    assert sorted(log) == ["fast done", "middle cancelled", "slow cancelled"]


async def test_a_cancelled_caller_cancels_every_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    with trio.move_on_after(5) as scope:
        await first_of(lambda: _after(10, "a", log), lambda: _after(20, "b", log))
    assert scope.cancelled_caught
    assert trio.current_time() == 5
    assert sorted(log) == ["a cancelled", "b cancelled"]


async def test_an_error_of_one_wait_cancels_the_others_and_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []

    async def fail() -> str:
        await trio.sleep(1)
        raise LookupError("boom")

    with pytest.RaisesGroup(LookupError):
        await first_of(fail, lambda: _after(10, "other", log))
    assert log == ["other cancelled"]
    assert trio.current_time() == 1


async def test_wait_any_returns_the_position_of_the_event_set_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = [trio.Event(), trio.Event(), trio.Event()]
    async with trio.open_nursery() as nursery:

        async def set_later(event: trio.Event, seconds: float) -> None:
            await trio.sleep(seconds)
            event.set()

        nursery.start_soon(set_later, events[2], 4)
        nursery.start_soon(set_later, events[0], 7)
        assert await wait_any(*events) == 2
        assert trio.current_time() == 4
    with trio.move_on_after(1) as scope:
        assert await wait_any(*events) in (0, 2)  # already set: at once, either of them
    assert not scope.cancelled_caught
    assert trio.current_time() == 7


async def test_nothing_to_wait_for_is_an_error() -> None:
    with pytest.raises(ValueError, match="Nothing to wait for"):
        await first_of()
