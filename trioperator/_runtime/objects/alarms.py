"""An alarm clock: many tasks sleep, one task of the clock wakes them at their deadlines.

A plain ``trio.sleep()`` (or ``move_on_after()`` around a wait) costs a cancel scope per sleep
and, when the time is up, a delivered cancellation: a ``Cancelled`` exception raised into the
sleeping task and caught again. With a thousand timers, that was the largest part of what an
operator at rest spends on them. Here a sleeping task is only parked (``wait_task_rescheduled``)
and put into a heap; the clock's own task sleeps until the earliest deadline, then reschedules
every task that is due, without any exception. Its cancel scope is one for all of them.

The clock's own sleep is cheap too: when its deadline comes, trio asks the clock's task (through
the abort function of its wait) whether it may raise ``Cancelled`` into it; the clock says no,
reschedules the due sleepers and itself right there, and so they all run in the same pass of the
scheduler as the expiry itself, without an exception, and without a hop through the clock's task
(which would cost a second pass). Only a real cancellation (of the clock or from outside) gets
``Cancelled``.

Sleepers whose deadlines are close together are woken together. Each sleep may end a little
late -- by 1% of its length, 100 ms at most (its slack) -- if that lets it share a wake-up with
sleepers due after it: the clock gathers the sleepers in order of their deadlines for as long as
each one gathered so far can still wait for the next one, and wakes at the last one's deadline.
No sleep ends early, none ends later than its slack allows, and a sleeper with no one due
within its slack wakes exactly on time. At rest, a thousand 10-second timers started at
scattered moments would otherwise wake the process a hundred times a second, and each wake-up
(the system call, the scheduler's pass, caches gone cold) cost more than the timer's own run.
This is the timer slack of kernels and service managers, well within what an interval timer
promises.

The clock's task runs only while someone sleeps: it is started in the given nursery by the
first sleeper and ends when no one sleeps any more, so it never keeps its nursery open. A
sleeping task that is cancelled leaves at once (its entry stays in the heap, marked, until the
clock passes it). An alarm can be rung early (``Alarm.ring()``), e.g. when a daemon is stopped.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Protocol

import trio

__all__ = ["SLACK_FRACTION", "SLACK_LIMIT", "Alarm", "AlarmClock", "AlarmSlot", "slack"]

SLACK_FRACTION = 0.01
"""How late a sleep may end, as a part of its length (see the module's docstring)."""

SLACK_LIMIT = 0.1
"""The most a sleep may end late, in seconds, however long it is."""


def slack(seconds: float) -> float:
    """How much later than asked a sleep of ``seconds`` may end, to share a wake-up."""
    return min(seconds * SLACK_FRACTION, SLACK_LIMIT)


class Alarm:
    """One sleeping task's wake-up; ``ring()`` wakes it now (no-op if it is awake already)."""

    __slots__ = ("_clock", "_task", "done")

    def __init__(self, clock: AlarmClock, task: trio.lowlevel.Task) -> None:
        self._clock = clock
        self._task = task
        self.done = False

    def ring(self) -> None:
        if not self.done:
            self.done = True
            self._clock._forget()
            trio.lowlevel.reschedule(self._task)

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        # Cancelled while sleeping: it leaves now; the clock skips the entry when it comes up.
        self.done = True
        self._clock._forget()
        return trio.lowlevel.Abort.SUCCEEDED


class AlarmClock:
    """Sleeps of many tasks, woken by one task of the clock, in ``nursery``."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        # (deadline, arrival, alarm, deadline + slack), by deadline: who is due first.
        self._heap: list[tuple[float, int, Alarm, float]] = []
        self._order = itertools.count()  # ties by deadline: first come, first woken
        self._sleeping = 0
        self._running = False
        self._scope: trio.CancelScope | None = None

    async def sleep(self, seconds: float, *, slot: AlarmSlot | None = None) -> None:
        """Sleep for ``seconds`` (a checkpoint at least), or until ``slot`` rings the alarm.

        ``slot.alarm`` holds the sleeping task's alarm while it sleeps; if ``slot.is_set()``
        already, there is no sleep at all.
        """
        if seconds <= 0 or (slot is not None and slot.is_set()):
            await trio.lowlevel.checkpoint()
            return
        deadline = trio.current_time() + seconds
        latest = deadline + slack(seconds)
        alarm = Alarm(self, trio.lowlevel.current_task())
        heapq.heappush(self._heap, (deadline, next(self._order), alarm, latest))
        self._sleeping += 1
        if not self._running:
            self._running = True
            self._nursery.start_soon(self._run, name="alarm clock")
        elif self._scope is not None and deadline <= self._scope.deadline + SLACK_LIMIT:
            # Due near the planned wake-up: it may have to be woken earlier, or may let the
            # others wait for it, within their slack. (Due later, it changes nothing now.)
            self._scope.deadline = self._next_wake()
        if slot is not None:
            slot.alarm = alarm
        try:
            await trio.lowlevel.wait_task_rescheduled(alarm._abort)
        finally:
            if slot is not None and slot.alarm is alarm:
                slot.alarm = None

    def _forget(self) -> None:
        self._sleeping -= 1
        scope = self._scope
        if not self._sleeping and scope is not None and not scope.cancel_called:
            scope.cancel()  # no one sleeps: the clock's task ends now, not at a deadline

    def _ring_due(self) -> None:
        heap = self._heap
        now = trio.current_time()
        while heap and (heap[0][2].done or heap[0][0] <= now):
            heapq.heappop(heap)[2].ring()

    def _next_wake(self) -> float:
        """When to wake: the deadline of the last of the first sleepers who can all wait for it.

        The first few sleepers are taken off the heap in order (a wake-up gathers a handful at
        most) and put back; the entries of cancelled sleepers met on the way are dropped.
        """
        heap = self._heap
        gathered: list[tuple[float, int, Alarm, float]] = []
        bound = math.inf  # the earliest that any gathered sleeper must be woken by
        while heap and (heap[0][2].done or heap[0][0] <= bound):
            entry = heapq.heappop(heap)
            if not entry[2].done:
                gathered.append(entry)
                bound = min(bound, entry[3])
        for entry in gathered:
            heapq.heappush(heap, entry)
        return gathered[-1][0] if gathered else math.inf

    async def _run(self) -> None:
        heap = self._heap
        task = trio.lowlevel.current_task()

        def wake(raise_cancel: object) -> trio.lowlevel.Abort:
            # Called by trio when the clock's task is to be cancelled: at its deadline (then
            # wake the due sleepers and go on, without an exception), or for real.
            scope = self._scope
            if scope is None or trio.current_time() < scope.deadline:
                return trio.lowlevel.Abort.SUCCEEDED
            # Awake now: ringing the last sleeper need not cancel the scope (the loop ends).
            self._scope = None
            self._ring_due()
            trio.lowlevel.reschedule(task)
            return trio.lowlevel.Abort.FAILED

        try:
            while self._sleeping:
                with trio.CancelScope(deadline=self._next_wake()) as scope:
                    self._scope = scope
                    await trio.lowlevel.wait_task_rescheduled(wake)
                self._scope = None
                self._ring_due()  # the entries of cancelled sleepers, due or not
        finally:
            self._scope = None
            self._running = False
            if not self._sleeping:
                heap.clear()  # only rung or cancelled entries are left


class AlarmSlot(Protocol):
    """Whoever may ring a sleeper early (e.g. a daemon's stop flag): it holds the sleeper's
    alarm while it sleeps, and a sleep is skipped if its reason to wake holds already."""

    alarm: Alarm | None

    def is_set(self) -> bool: ...
