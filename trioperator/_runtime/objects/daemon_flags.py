"""The ``stopped`` flags of daemons and timers, with trio's side to them.

The flags themselves (what a daemon can read and wait for) are the engine's
(``trioperator._engine.stoppers``); here they get a ``trio.Event``, so that async daemons and
the framework can await them, also from an asyncio-flavoured daemon.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import trio

from trioperator._engine.stoppers import DaemonStopped, DaemonStopper, DaemonStoppingReason
from trioperator._runtime.handling.asyncio_bridge import in_asyncio, run_trio_from_asyncio
from trioperator._runtime.objects.alarms import Alarm, AlarmClock

__all__ = ["AsyncDaemonStopped", "AsyncDaemonStopperChecker", "TrioDaemonStopper"]


class TrioDaemonStopper(DaemonStopper):
    """The stop flag with trio's side: async daemons and the framework await it."""

    def __init__(self, *, alarms: AlarmClock | None = None) -> None:
        super().__init__()
        self.event = trio.Event()
        self.alarms = alarms
        """The clock that timed waits on the flag sleep on (``None``: a cancel scope each)."""
        self.alarm: Alarm | None = None
        """The wake-up of the sleep on ``alarms`` that waits for the flag now, if any: the
        framework's between the calls, or the daemon's own ``stopped.wait(seconds)``."""

    def set(self, reason: DaemonStoppingReason, *, now: float | None = None) -> None:
        super().set(reason, now=trio.current_time() if now is None else now)
        self.event.set()
        if self.alarm is not None:
            self.alarm.ring()


class AsyncDaemonStopped(DaemonStopped):
    """The flag as async daemons get it: ``await stopped.wait(seconds)``."""

    __slots__ = ()

    def wait(self, timeout: float | None = None) -> DaemonStopped:
        return _TimedWaiting(self, timeout)


AsyncDaemonStopperChecker = AsyncDaemonStopped
"""Kopf's older (deprecated) name of the async flag type, for annotations in existing code."""


class _TimedWaiting(DaemonStopped):
    """What ``AsyncDaemonStopped.wait()`` returns: awaiting it waits; it is truthy if stopped."""

    __slots__ = ("_origin", "_timeout")

    def __init__(self, origin: AsyncDaemonStopped, timeout: float | None) -> None:
        super().__init__(origin._stopper)
        self._origin = origin
        self._timeout = timeout

    def wait(self, timeout: float | None = None) -> DaemonStopped:
        return self._origin.wait(timeout)

    def __await__(self) -> Generator[Any, None, DaemonStopped]:
        if in_asyncio():
            # An asyncio-flavoured daemon awaits it on the operator's asyncio loop.
            return run_trio_from_asyncio(self._wait).__await__()
        return self._wait().__await__()

    async def _wait(self) -> DaemonStopped:
        stopper = self._stopper
        assert isinstance(stopper, TrioDaemonStopper)
        timeout = self._timeout
        alarms = stopper.alarms
        free = alarms is not None and stopper.alarm is None
        if free and alarms is not None and timeout is not None and timeout < math.inf:
            # A daemon that wakes up now and then (e.g. ``while not stopped: await
            # stopped.wait(60)``): on the daemons' alarm clock, which wakes it without a cancel
            # scope and exception of its own, and together with others due then. The flag
            # rings the alarm when raised. (Only one wait at a time uses the flag's slot; a
            # concurrent one waits the usual way below.)
            await alarms.sleep(max(timeout, 0), slot=stopper)
            return self._origin
        with trio.move_on_after(math.inf if timeout is None else max(timeout, 0)):
            await stopper.event.wait()
        return self._origin
