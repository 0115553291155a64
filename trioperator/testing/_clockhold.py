"""Polling on trio's mock clock while worker threads run user code: hold the clock, a little.

The autojump clock jumps to the nearest deadline whenever every trio task waits, and a task
waiting for its worker thread counts as waiting. So while a sync handler, mapper or probe works
in a thread, a poll's ``trio.sleep`` lets the clock jump: on a busy machine, where a thread
takes milliseconds to start, it may jump through the wait's own limit, the operator's timers
or a client's timeout before the thread has done anything. A poll that stays runnable (a
checkpoint, no sleep) keeps the clock still instead: work in threads then takes next to no
mock time, as on an idle machine.

But only for a while: a thread may block on purpose (a sync daemon until it is stopped, a
handler waiting for what a timer does), and a wait for something that needs mock time to pass
would then spin for ever with the clock stopped, its own limit never reached. Each poll holds
the clock for at most :data:`THREAD_HOLD` of real time, then sleeps as usual.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

__all__ = ["THREAD_HOLD", "ClockHold", "threads_busy"]

THREAD_HOLD = 0.005
"""Real seconds one poll holds the mock clock still while a worker thread runs."""


def threads_busy(limiter: trio.CapacityLimiter | None) -> bool:
    """Whether a worker thread runs now: one of ``limiter`` (the operator's, for user code,
    ``None`` before it exists) or of trio's default limiter (``trio.to_thread`` elsewhere)."""
    if limiter is not None and limiter.borrowed_tokens:
        return True
    return bool(trio.to_thread.current_default_thread_limiter().borrowed_tokens)


class ClockHold:
    """The pause between two checks of one wait: ``await hold.pause(interval)``.

    ``busy`` says whether a worker thread runs now. While it does, a pause is a bare checkpoint
    (the clock stays still) until ``hold`` real seconds have passed since the last sleep; then,
    or when no thread runs, it sleeps ``interval`` seconds of trio time.
    """

    def __init__(self, busy: Callable[[], bool], *, hold: float = THREAD_HOLD) -> None:
        self._busy = busy
        self._hold = hold
        self._held_until = time.monotonic() + hold

    async def pause(self, interval: float) -> None:
        if self._busy() and time.monotonic() < self._held_until:
            await trio.lowlevel.checkpoint()
            return
        await trio.sleep(interval)
        self._held_until = time.monotonic() + self._hold
