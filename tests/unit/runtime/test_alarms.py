"""The alarm clock: many sleepers woken by one task, on trio's mock clock."""

from __future__ import annotations

from typing import Any

import trio
from trioperator._runtime.alarms import Alarm, AlarmClock


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

    assert woken == [("earliest", 2.5), ("early", 3.0), ("late", 10.0)]


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
