"""The loops of daemons and timers: calling one handler's function over and over, as it asks.

A daemon's function is called, its result delivered to the status, and its ``patch`` applied;
it is called again only after a ``TemporaryError`` (or an error retried per
``errors``/``backoff``). A timer is called every ``interval`` (``sharp``: on the interval's grid),
after ``idle`` seconds without essential changes, after ``initial_delay``; errors override that
schedule (the retry delay instead of the interval); a final failure stops it for good. Neither
ever overlaps with itself. ``body``, ``spec``, ``meta``, ``status`` are live views of the newest
state of the object. Every sleep ends early when the daemon's ``stopped`` flag is raised.

The task that runs a loop, and how it is stopped, is the keeper's (``daemon_keeper``).
"""

from __future__ import annotations

import datetime
import inspect
from typing import Any

import trio

from trioperator._client.api import APIClient
from trioperator._client.resources import Resource
from trioperator._engine.handlers import DaemonHandler, TimerHandler
from trioperator._engine.patches import Patch
from trioperator._engine.progression import HandlerOutcome, HandlerState, deliver_results
from trioperator._runtime.handling.applying import apply_patch
from trioperator._runtime.handling.execution import Execution, run_handler_once
from trioperator._runtime.objects.alarms import AlarmClock
from trioperator._runtime.objects.daemon_flags import TrioDaemonStopper
from trioperator._runtime.objects.daemon_state import Daemon, DaemonCause
from trioperator._runtime.support.waiting import wait_any

__all__ = ["DaemonLoops"]


class DaemonLoops:
    """Runs the loops of one watcher's daemons and timers: the calls, the results, the patches."""

    def __init__(
        self, *, api: APIClient, resource: Resource, execution: Execution, alarms: AlarmClock
    ) -> None:
        self._api = api
        self._resource = resource
        self._execution = execution
        # One clock for the sleeps between the calls of all the watcher's daemons and timers.
        self._alarms = alarms

    async def _sleep(self, stopper: TrioDaemonStopper, seconds: float) -> None:
        """Sleep for ``seconds``, or less if the daemon is asked to stop."""
        await self._alarms.sleep(seconds, slot=stopper)

    async def run(self, daemon: Daemon, cause: DaemonCause) -> None:
        """The daemon's or timer's loop, until it ends on its own or its flag is raised."""
        handler = daemon.handler
        if isinstance(handler, DaemonHandler):
            await self._daemon(daemon, cause)
        elif isinstance(handler, TimerHandler):
            await self._timer(daemon, cause)
        else:
            raise TypeError(f"Neither a daemon nor a timer: {handler!r}")

    async def _initial_delay(self, daemon: Daemon, cause: DaemonCause) -> None:
        delay = daemon.handler.initial_delay
        if delay is None:
            return
        seconds: Any = delay
        if callable(delay):
            try:
                seconds = delay(**{"param": daemon.handler.param, **cause.kwargs})
                if inspect.isawaitable(seconds):
                    seconds = await seconds
            except Exception as exc:
                daemon.logger.exception(
                    f"The initial delay of {daemon.handler} failed; starting it now: {exc!r}"
                )
                return
        if seconds:
            await self._sleep(daemon.stopper, float(seconds))

    async def _invoke(
        self,
        daemon: Daemon,
        cause: DaemonCause,
        state: HandlerState,
        *,
        now: datetime.datetime | None = None,
    ) -> tuple[HandlerOutcome, HandlerState | None]:
        """One call; the state for the next attempt (``None`` after a final outcome: a new
        round starts from scratch, or the loop ends). ``now``: the state's start, if just made."""
        outcome = await run_handler_once(
            daemon.handler,
            cause=cause,
            handler_state=state,
            execution=self._execution,
            logger=daemon.logger,
            now=now,
        )
        # Only a retry carries the state on: after a final outcome it is never read again,
        # and a timer's every run ends so (not worth a clock reading and a new state).
        following = None
        if not outcome.final:
            following = state.with_outcome(outcome, now=self._execution.now())
        await self._apply(daemon, cause.patch, outcome)
        return outcome, following

    async def _apply(self, daemon: Daemon, patch: Patch, outcome: HandlerOutcome) -> None:
        """Deliver the result and apply the patch of one call; keep 422-rejected functions."""
        deliver_results(outcomes={daemon.handler.id: outcome}, patch=patch)
        body = daemon.memory.live_body
        if not patch or body is None:
            return
        try:
            result = await apply_patch(
                self._api,
                resource=self._resource,
                body=body.raw,
                patch=patch,
                logger=daemon.logger,
            )
        except Exception as exc:
            daemon.logger.exception(
                f"Patching failed for {daemon.handler}; the patch is kept for its next call: "
                f"{exc!r}"
            )
            return
        patch.clear()
        patch.fns[:] = result.remaining_fns

    async def _daemon(self, daemon: Daemon, cause: DaemonCause) -> None:
        handler = daemon.handler
        stopper = daemon.stopper
        await self._initial_delay(daemon, cause)
        start = self._execution.now()
        state = HandlerState.from_scratch(now=start)
        now: datetime.datetime | None = start  # for the first call only: read just now
        while not stopper.is_set():
            outcome, following = await self._invoke(daemon, cause, state, now=now)
            if following is None:  # a final outcome
                break
            state, now = following, None
            await self._sleep(stopper, outcome.delay or 0)
        if stopper.is_set():
            daemon.logger.debug(
                f"{handler} has exited on request and will not be retried or restarted."
            )
        else:
            daemon.logger.debug(
                f"{handler} has exited on its own and will not be retried or restarted."
            )

    async def _timer(self, daemon: Daemon, cause: DaemonCause) -> None:
        handler = daemon.handler
        assert isinstance(handler, TimerHandler)
        stopper = daemon.stopper
        memory = daemon.memory
        await self._initial_delay(daemon, cause)
        state: HandlerState | None = None
        while not stopper.is_set():
            now: datetime.datetime | None = None
            if state is None:  # a new round (the first, or after a final outcome)
                now = self._execution.now()
                state = HandlerState.from_scratch(now=now)

            if handler.idle is not None:
                # The idle time restarts with every essential change: sleep until it is over.
                while not stopper.is_set():
                    remaining = memory.idle_reset_time + handler.idle - trio.current_time()
                    if remaining <= 0:
                        break
                    await self._sleep(stopper, remaining)
                if stopper.is_set():
                    break
                now = None  # time has passed: the call reads the clock itself

            started = trio.current_time()
            outcome, state = await self._invoke(daemon, cause, state, now=now)
            if not outcome.final:
                # Errors override the schedule: the retry delay instead of the interval.
                await self._sleep(stopper, outcome.delay or 0)
            elif outcome.exception is not None:
                daemon.logger.debug(f"{handler} has failed permanently and stops for good.")
                return
            elif handler.interval is not None and handler.sharp:
                # On the interval's grid, however long the call took (skipping missed ticks).
                elapsed = trio.current_time() - started
                await self._sleep(stopper, handler.interval - elapsed % handler.interval)
            elif handler.interval is not None:
                await self._sleep(stopper, handler.interval)
            elif handler.idle is not None:
                # Idle-only: once per calm period; wait for the next essential change.
                while not stopper.is_set() and memory.idle_reset_time <= started:
                    await wait_any(stopper.event, memory.idle_reset)
            else:
                return  # no schedule at all: a one-shot
