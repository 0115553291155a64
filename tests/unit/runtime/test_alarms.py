"""The alarm clock: many sleepers woken by one task, on trio's mock clock."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trioperator._runtime.objects.alarms import Alarm, AlarmClock, slack


class Slot:
    def __init__(self) -> None:
        self.alarm: Alarm | None = None
        self.flag = False

    def is_set(self) -> bool:
        return self.flag


async def test_sleepers_wake_at_their_deadlines(autojump_clock: Any) -> None:
    woken: list[tuple[str, float]] = []

    async def sleeper(clock: AlarmClock, name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woken.append((name, trio.current_time()))

    async with trio.open_nursery() as nursery:
        clock = AlarmClock(nursery)
        nursery.start_soon(sleeper, clock, "late", 10.0)
        nursery.start_soon(sleeper, clock, "early", 3.0)
        await trio.sleep(1)
        # A deadline earlier than any so far re-arms the clock.
        nursery.start_soon(sleeper, clock, "earliest", 1.5)

    # No one else is due within any one's slack: each wakes exactly on time.
    assert woken == [("earliest", 2.5), ("early", 3.0), ("late", 10.0)]


async def test_sleepers_due_close_together_share_one_wake_up_and_none_wakes_early(
    autojump_clock: Any,
) -> None:
    woken: list[tuple[str, float]] = []
    deadlines: dict[str, float] = {}

    async def sleeper(clock: AlarmClock, name: str, seconds: float) -> None:
        deadlines[name] = trio.current_time() + seconds
        await clock.sleep(seconds)
        woken.append((name, trio.current_time()))

    async with trio.open_nursery() as nursery:
        clock = AlarmClock(nursery)
        # Ten-second sleeps begun at 0, 0.05, 0.09 and 0.15 s: the first three are due within
        # the first one's slack (0.1 s) and wake together at the third one's deadline; the
        # fourth is due after the first one's slack has run out, and wakes on its own, on time.
        for name, start in (("a", 0.0), ("b", 0.05), ("c", 0.09), ("d", 0.15)):
            await trio.sleep_until(start)
            nursery.start_soon(sleeper, clock, name, 10.0)

    assert sorted(name for name, _ in woken[:3]) == ["a", "b", "c"]  # in any order: one pass
    times = dict(woken)
    assert times["a"] == times["b"] == times["c"] == pytest.approx(10.09)
    assert times["d"] == pytest.approx(10.15)
    for name, at in woken:
        assert deadlines[name] <= at <= deadlines[name] + slack(10.0) + 1e-9


def test_the_slack_is_a_part_of_the_sleep_and_limited() -> None:
    assert slack(1.0) == pytest.approx(0.01)
    assert slack(10.0) == pytest.approx(0.1)
    assert slack(3600.0) == pytest.approx(0.1)


async def test_a_sleep_can_be_rung_early_and_is_skipped_when_its_slot_is_set(
    autojump_clock: Any,
) -> None:
    slot = Slot()
    ended: list[float] = []

    async def sleeper(clock: AlarmClock) -> None:
        await clock.sleep(60, slot=slot)
        ended.append(trio.current_time())
        await clock.sleep(60, slot=slot)  # the slot is set now: no sleep at all
        ended.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        clock = AlarmClock(nursery)
        nursery.start_soon(sleeper, clock)
        await trio.sleep(5)
        assert slot.alarm is not None
        slot.flag = True
        slot.alarm.ring()
        slot.alarm.ring()  # ringing twice is harmless

    assert ended == [5.0, 5.0]
    assert slot.alarm is None


async def test_a_cancelled_sleeper_leaves_and_the_clock_does_not_outlive_the_sleepers(
    autojump_clock: Any,
) -> None:
    async with trio.open_nursery() as nursery:
        clock = AlarmClock(nursery)
        with trio.move_on_after(2):
            await clock.sleep(1000)
        assert trio.current_time() == 2.0
        await clock.sleep(3)  # the clock's task ended; it starts again for a new sleeper
        assert trio.current_time() == 5.0
    # The nursery closed when the last sleeper left, not at the cancelled one's deadline.
    assert trio.current_time() == 5.0


async def test_zero_and_negative_sleeps_are_checkpoints(autojump_clock: Any) -> None:
    async with trio.open_nursery() as nursery:
        clock = AlarmClock(nursery)
        await clock.sleep(0)
        await clock.sleep(-1)
    assert trio.current_time() == 0.0


async def test_a_daemons_timed_waits_on_its_flag_sleep_on_the_clock(autojump_clock: Any) -> None:
    from trioperator._engine.stoppers import DaemonStoppingReason
    from trioperator._runtime.objects.daemon_flags import AsyncDaemonStopped, TrioDaemonStopper

    woken: list[tuple[str, float, bool]] = []

    async def daemon(stopped: AsyncDaemonStopped, name: str, seconds: float) -> None:
        while not stopped:
            result = await stopped.wait(seconds)
            woken.append((name, trio.current_time(), bool(result)))

    async with trio.open_nursery() as nursery:
        clock = AlarmClock(nursery)
        stopper = TrioDaemonStopper(alarms=clock)
        stopped = AsyncDaemonStopped(stopper)
        nursery.start_soon(daemon, stopped, "first", 10.0)
        await trio.sleep(1)
        assert stopper.alarm is not None  # the first wait holds the flag's slot
        # A second wait at the same time: the usual way, and woken by the flag as well.
        nursery.start_soon(daemon, stopped, "second", 4.0)
        await trio.sleep(14)
        stopper.set(DaemonStoppingReason.RESOURCE_DELETED)

    assert woken[:4] == [
        ("second", 5.0, False),
        ("second", 9.0, False),
        ("first", 10.0, False),
        ("second", 13.0, False),
    ]
    assert sorted(woken[4:]) == [("first", 15.0, True), ("second", 15.0, True)]  # any order
    assert stopper.alarm is None
    assert await stopped.wait(10)  # a stopped flag: no sleep at all
    assert trio.current_time() == 15.0


async def test_an_outer_cancellation_ends_the_sleepers_and_the_clock(autojump_clock: Any) -> None:
    ended: list[str] = []

    async def sleeper(clock: AlarmClock, name: str) -> None:
        try:
            await clock.sleep(10)
        except trio.Cancelled:
            ended.append(name)
            raise

    with trio.move_on_after(5):
        async with trio.open_nursery() as nursery:
            clock = AlarmClock(nursery)
            nursery.start_soon(sleeper, clock, "a")
            nursery.start_soon(sleeper, clock, "b")
    assert sorted(ended) == ["a", "b"]
    assert trio.current_time() == 5.0


async def test_an_outer_deadline_together_with_the_clocks_own_wakes_and_ends_cleanly(
    autojump_clock: Any,
) -> None:
    # The outer scope's deadline and the only sleeper's come in the same pass of the scheduler:
    # the clock is asked to stop (by the outer scope) when its own sleeper is due already.
    woken: list[float] = []

    async def sleeper(clock: AlarmClock) -> None:
        await clock.sleep(5)
        woken.append(trio.current_time())
        await trio.sleep_forever()

    with trio.move_on_after(5) as outer:
        async with trio.open_nursery() as nursery:
            clock = AlarmClock(nursery)
            nursery.start_soon(sleeper, clock)
    assert outer.cancelled_caught
    assert trio.current_time() == 5.0
    assert woken in ([], [5.0])  # either way: no error, nothing left behind
