"""Daemons and timers: long-lived activities of individual objects, and how they are stopped.

Task tree (inside ``run_watcher``)::

    run_watcher
    └── background nursery (one per watcher; it outlives the watcher's workers)
        ├── exit relay            the operator's stop -> every daemon is stopped (OPERATOR_EXITING)
        ├── daemon/timer task     one per (object, handler); its loop runs in its own cancel scope
        └── terminator            one per daemon being stopped: the staged termination below

A daemon is spawned when its object is first seen with matching filters (at creation or when the
operator starts); it is never spawned while the object is being deleted or the operator stops.
Every event re-checks the filters: a daemon that no longer matches is stopped
(``FILTERS_MISMATCH``) and spawned again by a later event that matches. A daemon that ends on its
own (returned, failed permanently) is not spawned again in this process.

Staged termination (the daemon's ``cancellation_*`` options; timers have none of them):

1. The ``stopped`` flag is raised at once; with ``cancellation_backoff``, the daemon is given that
   long to exit on its own (``DAEMON_SIGNALLED``).
2. With ``cancellation_timeout``: an async daemon is cancelled (``DAEMON_CANCELLED``) and given
   that long to finish; a sync one cannot be cancelled and is just waited for.
3. Still running after that: it is abandoned with a warning and a ``ResourceWarning``
   (``DAEMON_ABANDONED``). A sync daemon's thread is let go (it runs on until it returns; its
   flag stays raised); an async daemon that ignores cancellation cannot be let go of by trio, so
   it is only no longer waited for by its object's deletion.
   Without ``cancellation_timeout`` the daemon is waited for indefinitely, with a log line every
   ``cancellation_polling`` (or ``settings.background.cancellation_polling``) seconds, except when
   the operator exits: then it gets ``EXITING_GRACE`` seconds before it is cancelled or abandoned.

On deletion, the object's finalizer stays until all its daemons have ended or been abandoned:
the deletion cycle gives them a chance to exit instantly (``settings.background.instant_exit_*``)
so that the finalizer goes in the same patch, and otherwise the worker sleeps until a daemon ends
(``DaemonsMemory.changed`` wakes it up), with the polling interval as a fallback.

The loops: a daemon's function is called, its result delivered to the status, and its ``patch``
applied; it is called again only after a ``TemporaryError`` (or an error retried per
``errors``/``backoff``). A timer is called every ``interval`` (``sharp``: on the interval's grid),
after ``idle`` seconds without essential changes, after ``initial_delay``; errors override that
schedule (the retry delay instead of the interval); a final failure stops it for good. Neither
ever overlaps with itself. ``body``, ``spec``, ``meta``, ``status`` are live views of the newest
state of the object.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import logging
import math
import warnings
from collections.abc import Collection, Generator, Iterable
from typing import TYPE_CHECKING, Any

import trio

from trioperator._engine.bodies import Body, RawEvent
from trioperator._engine.causes import ResourceCause, SpawningCause, is_deletion_ongoing
from trioperator._engine.finalizers import is_deletion_blocked
from trioperator._engine.handlers import DaemonHandler, SpawningHandler, TimerHandler
from trioperator._engine.ids import HandlerId
from trioperator._engine.patches import Patch
from trioperator._engine.progression import HandlerOutcome, HandlerState, deliver_results
from trioperator._engine.settings import BackgroundSettings
from trioperator._engine.stoppers import (
    DaemonStopped,
    DaemonStopper,
    DaemonStoppingReason,
    SyncDaemonStopped,
)
from trioperator._runtime.alarms import Alarm, AlarmClock
from trioperator._runtime.applying import apply_patch
from trioperator._runtime.asyncio_bridge import in_asyncio, run_trio_from_asyncio
from trioperator._runtime.execution import Execution, run_handler_once
from trioperator._runtime.invocation import is_async_fn
from trioperator._runtime.loggers import ObjectLogger

if TYPE_CHECKING:
    from trioperator._runtime.contexts import ResourceContext
    from trioperator._runtime.memories import ObjectMemory

__all__ = [
    "EXITING_GRACE",
    "AsyncDaemonStopped",
    "AsyncDaemonStopperChecker",
    "Daemon",
    "DaemonCause",
    "DaemonsKeeper",
    "DaemonsMemory",
    "process_spawning",
    "settle_daemons",
]

logger = logging.getLogger(__name__)


EXITING_GRACE = 5.0
"""When the operator exits, how long a daemon without ``cancellation_timeout`` may take after
its flag is raised, before it is cancelled (async) or abandoned (sync). Kopf's equivalent is
its 5-second grace for "hung" tasks on exit."""


# ------------------------------------------------------------------------------ the flags


class TrioDaemonStopper(DaemonStopper):
    """The stop flag with trio's side: async daemons and the framework await it."""

    def __init__(self) -> None:
        super().__init__()
        self.event = trio.Event()
        self.alarm: Alarm | None = None
        """The wake-up of the framework's sleep between the calls (see ``AlarmClock``)."""

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
        with trio.move_on_after(math.inf if self._timeout is None else max(self._timeout, 0)):
            await stopper.event.wait()
        return self._origin


# ------------------------------------------------------------------------------ the records


@dataclasses.dataclass(frozen=True)
class DaemonCause(ResourceCause):
    """What daemons and timers get: the object's live body, their own patch, and ``stopped``."""

    stopped: DaemonStopped

    def _own_kwargs(self) -> dict[str, Any]:
        return {**super()._own_kwargs(), "stopped": self.stopped}

    @functools.cached_property
    def kwargs(self) -> dict[str, Any]:
        """Made once per daemon, not per call: the body, spec, meta... are live views, the
        rest is fixed for the daemon's life (uid, name, namespace do not change). Callers copy
        it before adding anything."""
        return super().kwargs


@dataclasses.dataclass(eq=False)
class Daemon:
    """One running daemon or timer of one object."""

    handler: SpawningHandler
    memory: DaemonsMemory
    stopper: TrioDaemonStopper
    logger: ObjectLogger
    is_async: bool
    scope: trio.CancelScope = dataclasses.field(default_factory=trio.CancelScope)
    finished: trio.Event = dataclasses.field(default_factory=trio.Event)
    """Its task has ended (set last, after it is removed from ``memory.running``)."""
    abandoned: bool = False
    terminating: bool = False
    """A terminator is already running for it."""

    @property
    def done(self) -> bool:
        """It no longer holds its object: it has ended, or it was given up on."""
        return self.finished.is_set() or self.abandoned


@dataclasses.dataclass(eq=False, slots=True)
class DaemonsMemory:
    """What an object's daemons and timers share, for as long as the object is known.

    Every known object has one, daemons or not, so it is slotted and its events are made only
    when something waits on them or sets them: with many objects, two idle ``trio.Event``s
    each were a large share of what the operator keeps per object.
    """

    live_body: Body | None = None
    """The newest state of the object; every daemon's ``body`` kwarg views it (never stale)."""
    essence: bytes | None = None
    """A digest of the last seen essence, to tell essential changes (see ``_essence_digest``)."""
    idle_reset_time: float = 0.0
    """trio time of the last essential change (first sight counts): idle timers count from it."""
    forever_stopped: set[HandlerId] = dataclasses.field(default_factory=set)
    """Daemons that ended on their own: not spawned again in this process."""
    running: dict[HandlerId, Daemon] = dataclasses.field(default_factory=dict)
    """Daemons with a task, including those being stopped (they are not respawned meanwhile)."""
    _idle_reset: trio.Event | None = None
    _changed: trio.Event | None = None

    @property
    def idle_reset(self) -> trio.Event:
        """Set (and replaced) on every essential change: wakes up idle-only timers."""
        if self._idle_reset is None:
            self._idle_reset = trio.Event()
        return self._idle_reset

    @property
    def changed(self) -> trio.Event:
        """Set when a daemon ends or is abandoned: wakes up the worker waiting to release the
        object. The worker replaces it (``rearm``) before it looks at the daemons."""
        if self._changed is None:
            self._changed = trio.Event()
        return self._changed

    def rearm(self) -> trio.Event:
        self._changed = trio.Event()
        return self._changed

    def reset_idle(self, now: float) -> None:
        self.idle_reset_time = now
        if self._idle_reset is not None:
            # Only those who took the event wait on it; the next one is made when needed.
            self._idle_reset.set()
            self._idle_reset = None

    @property
    def stopping(self) -> list[Daemon]:
        """The daemons asked to stop that still hold the object."""
        return [d for d in self.running.values() if d.stopper.is_set() and not d.done]


# ------------------------------------------------------------------------------ the keeper


def _limits(
    handler: SpawningHandler, settings: BackgroundSettings
) -> tuple[float | None, float | None, float]:
    """The handler's termination stages: backoff, timeout, polling interval."""
    if isinstance(handler, DaemonHandler):
        polling = handler.cancellation_polling or settings.cancellation_polling
        return handler.cancellation_backoff, handler.cancellation_timeout, polling
    return None, None, settings.cancellation_polling


async def _wait_any(*events: trio.Event) -> None:
    """Return as soon as any of the events is set."""

    async def waiter(event: trio.Event, scope: trio.CancelScope) -> None:
        await event.wait()
        scope.cancel()

    async with trio.open_nursery() as nursery:
        for event in events:
            nursery.start_soon(waiter, event, nursery.cancel_scope)


class DaemonsKeeper:
    """The daemons and timers of one watcher's objects, in the watcher's background nursery."""

    def __init__(self, ctx: ResourceContext, nursery: trio.Nursery) -> None:
        self._ctx = ctx
        self._nursery = nursery
        self._daemons: set[Daemon] = set()
        # One clock for the sleeps between the calls of all the watcher's daemons and timers.
        self._alarms = AlarmClock(nursery)
        self._exiting = trio.Event()
        self.exiting_since: float | None = None
        self.paused = False
        """While paused (peering), daemons are stopped and nothing is spawned."""
        settings = ctx.settings
        self._execution = Execution(
            now=ctx.operator.now,
            default_backoff=settings.execution.default_backoff,
            limiter=ctx.operator.thread_limiter,
            abandon_threads=True,  # so that a stuck sync daemon can be let go of (stage 3)
            metrics=ctx.operator.metrics,
        )

    @property
    def closed(self) -> bool:
        """No more spawning: the watcher (or the whole operator) is stopping."""
        return self._exiting.is_set()

    def __len__(self) -> int:
        return len(self._daemons)

    def running(self) -> Collection[Daemon]:
        """The daemons and timers whose tasks run now (being stopped included)."""
        return self._daemons

    # -------------------------------------------------------------------------- spawning

    def spawn(
        self, handler: SpawningHandler, memory: ObjectMemory, objlogger: ObjectLogger
    ) -> Daemon:
        daemons = memory.daemons
        assert daemons.live_body is not None
        is_async = is_async_fn(handler.fn)
        stopper = TrioDaemonStopper()
        stopped = AsyncDaemonStopped(stopper) if is_async else SyncDaemonStopped(stopper)
        cause = DaemonCause(
            logger=objlogger,
            memo=memory.memo,
            indices=self._ctx.operator.indices,
            resource=self._ctx.resource,
            patch=Patch(),  # its own, applied after every call; not the cycle's patch
            body=daemons.live_body,
            stopped=stopped,
        )
        daemon = Daemon(
            handler=handler,
            memory=daemons,
            stopper=stopper,
            logger=objlogger,
            is_async=is_async,
        )
        daemons.running[handler.id] = daemon
        self._daemons.add(daemon)
        limiter = self._execution.limiter
        if not is_async and isinstance(handler, DaemonHandler) and limiter.available_tokens < 1:
            objlogger.warning(
                f"{handler} is a sync daemon and waits for a free thread: all "
                f"{limiter.total_tokens} are busy. Raise settings.execution.max_workers "
                "or make the daemons async."
            )
        kind = "daemon" if isinstance(handler, DaemonHandler) else "timer"
        self._nursery.start_soon(
            self._run, daemon, cause, name=f"{kind} {handler.id} {objlogger.prefix}"
        )
        return daemon

    async def _run(self, daemon: Daemon, cause: DaemonCause) -> None:
        handler = daemon.handler
        memory = daemon.memory
        try:
            with daemon.scope:
                if isinstance(handler, DaemonHandler):
                    await self._daemon(daemon, cause)
                elif isinstance(handler, TimerHandler):
                    await self._timer(daemon, cause)
                else:
                    raise TypeError(f"Neither a daemon nor a timer: {handler!r}")
        except Exception as exc:
            # Handlers' own errors are handled per their options; this is the framework's
            # (e.g. a bug): not silent, and not fatal to the other objects of the watcher.
            daemon.logger.exception(f"{handler} has stopped unexpectedly: {exc!r}")
        finally:
            if daemon.stopper.reason is None:
                memory.forever_stopped.add(handler.id)
            daemon.stopper.set(DaemonStoppingReason.DONE)
            if memory.running.get(handler.id) is daemon:
                del memory.running[handler.id]
            self._daemons.discard(daemon)
            daemon.finished.set()
            memory.changed.set()

    async def _sleep(self, stopper: TrioDaemonStopper, seconds: float) -> None:
        """Sleep for ``seconds``, or less if the daemon is asked to stop."""
        await self._alarms.sleep(seconds, slot=stopper)

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
        self, daemon: Daemon, cause: DaemonCause, state: HandlerState
    ) -> tuple[HandlerOutcome, HandlerState]:
        outcome = await run_handler_once(
            daemon.handler,
            cause=cause,
            handler_state=state,
            execution=self._execution,
            logger=daemon.logger,
        )
        state = state.with_outcome(outcome, now=self._execution.now())
        await self._apply(daemon, cause.patch, outcome)
        return outcome, state

    async def _apply(self, daemon: Daemon, patch: Patch, outcome: HandlerOutcome) -> None:
        """Deliver the result and apply the patch of one call; keep 422-rejected functions."""
        deliver_results(outcomes={daemon.handler.id: outcome}, patch=patch)
        body = daemon.memory.live_body
        if not patch or body is None:
            return
        try:
            result = await apply_patch(
                self._ctx.api,
                resource=self._ctx.resource,
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
        state = HandlerState.from_scratch(now=self._execution.now())
        while not stopper.is_set():
            outcome, state = await self._invoke(daemon, cause, state)
            if outcome.final:
                break
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
            if state is None or state.finished:
                state = HandlerState.from_scratch(now=self._execution.now())  # a new round

            if handler.idle is not None:
                # The idle time restarts with every essential change: sleep until it is over.
                while not stopper.is_set():
                    remaining = memory.idle_reset_time + handler.idle - trio.current_time()
                    if remaining <= 0:
                        break
                    await self._sleep(stopper, remaining)
                if stopper.is_set():
                    break

            started = trio.current_time()
            outcome, state = await self._invoke(daemon, cause, state)
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
                    await _wait_any(stopper.event, memory.idle_reset)
            else:
                return  # no schedule at all: a one-shot

    # -------------------------------------------------------------------------- stopping

    def stop(self, daemon: Daemon, reason: DaemonStoppingReason) -> None:
        """Raise the daemon's flag and run its staged termination (once) in the background."""
        daemon.stopper.set(reason)
        if daemon.done or daemon.terminating:
            return
        daemon.terminating = True
        name = f"terminator of {daemon.handler.id} {daemon.logger.prefix}"
        self._nursery.start_soon(self._terminate, daemon, name=name)

    def stop_all(self, daemons: Iterable[Daemon], reason: DaemonStoppingReason) -> None:
        for daemon in list(daemons):
            self.stop(daemon, reason)

    def close(self, reason: DaemonStoppingReason = DaemonStoppingReason.OPERATOR_EXITING) -> None:
        """Stop every daemon of the watcher, and spawn no more (the watcher or operator stops)."""
        if self._exiting.is_set():
            return
        self.exiting_since = trio.current_time()
        self._exiting.set()
        self.stop_all(self._daemons, reason)

    def pause(self) -> None:
        """The operator pauses (e.g. a peer with a higher priority): stop all, spawn nothing.

        The daemons stopped so are not "exited on their own": the first events after
        ``resume()`` spawn them again (each only once its predecessor has fully ended).
        """
        self.paused = True
        self.stop_all(self._daemons, DaemonStoppingReason.OPERATOR_PAUSING)

    def resume(self) -> None:
        self.paused = False

    async def wait_instant_exit(self, daemons: Collection[Daemon]) -> None:
        """Give daemons that were just asked to stop a chance to be done at once.

        Well-behaved daemons return as soon as they see the flag: then the object can be
        released in the same cycle, with no extra patch or sleep.
        """
        pending = [daemon for daemon in daemons if not daemon.done]
        if not pending:
            return
        settings = self._ctx.settings.background
        if settings.instant_exit_timeout is not None:
            with trio.move_on_after(settings.instant_exit_timeout):
                for daemon in pending:
                    await daemon.finished.wait()
            return
        for _ in range(settings.instant_exit_zero_time_cycles or 0):
            await trio.lowlevel.checkpoint()
            if all(daemon.done for daemon in pending):
                return

    async def _wait_finished(
        self, daemon: Daemon, deadline: float, *, or_exiting: bool = False
    ) -> bool:
        with trio.move_on_at(deadline):
            if or_exiting:
                await _wait_any(daemon.finished, self._exiting)
            else:
                await daemon.finished.wait()
        return daemon.finished.is_set()

    async def _terminate(self, daemon: Daemon) -> None:
        handler = daemon.handler
        objlogger = daemon.logger
        backoff, timeout, polling = _limits(handler, self._ctx.settings.background)
        start = daemon.stopper.when if daemon.stopper.when is not None else trio.current_time()

        if backoff is not None:
            daemon.stopper.set(DaemonStoppingReason.DAEMON_SIGNALLED)
            objlogger.debug(f"{handler} is signalled to exit gracefully.")
            if await self._wait_finished(daemon, start + backoff):
                return

        if timeout is not None:
            daemon.stopper.set(DaemonStoppingReason.DAEMON_CANCELLED)
            objlogger.debug(f"{handler} is signalled to exit by force.")
            if daemon.is_async:
                daemon.scope.cancel()
            if await self._wait_finished(daemon, start + (backoff or 0) + timeout):
                return
            self._abandon(daemon)
            return

        # No timeout: wait as long as it takes, unless the operator exits meanwhile.
        while True:
            now = trio.current_time()
            deadline = now + polling
            if self.exiting_since is not None:
                deadline = min(deadline, self.exiting_since + EXITING_GRACE)
            exiting = self.exiting_since is not None
            if await self._wait_finished(daemon, deadline, or_exiting=not exiting):
                return
            if self.exiting_since is None:
                objlogger.debug(f"{handler} is still exiting. The next check is in {polling} s.")
            elif trio.current_time() >= self.exiting_since + EXITING_GRACE:
                daemon.stopper.set(DaemonStoppingReason.DAEMON_CANCELLED)
                objlogger.debug(f"{handler} is cancelled: the operator is exiting.")
                if daemon.is_async:
                    daemon.scope.cancel()
                    await self.wait_instant_exit([daemon])
                    if daemon.done:
                        return
                self._abandon(daemon)
                return

    def _abandon(self, daemon: Daemon) -> None:
        handler = daemon.handler
        daemon.stopper.set(DaemonStoppingReason.DAEMON_ABANDONED)
        daemon.abandoned = True
        daemon.logger.warning(f"{handler} did not exit in time. Leaving it orphaned.")
        try:
            warnings.warn(f"{handler} did not exit in time.", ResourceWarning, stacklevel=1)
        except Warning:
            pass  # turned into an error by a warnings filter: the log line above says it all
        if not daemon.is_async:
            # trio lets go of the thread: it runs on, with its flag raised, until it returns.
            daemon.scope.cancel()
        daemon.memory.changed.set()


# ------------------------------------------------------------------------------ per object


def _essence_digest(ctx: ResourceContext, body: Body) -> bytes:
    """What counts as a change for idle timers: the same essence as the diff-base's (so not
    the status, nor our own annotations), as a digest to keep no copy per object."""
    persistence = ctx.settings.persistence
    essence = persistence.diffbase_storage.build(
        body=body, extra_fields=[".".join(f) for f in ctx.registry.get_extra_fields(ctx.resource)]
    )
    essence = persistence.progress_storage.clear(essence=essence)
    encoded = json.dumps(essence, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.blake2b(encoded.encode(), digest_size=16).digest()


async def process_spawning(
    ctx: ResourceContext, event: RawEvent, memory: ObjectMemory, objlogger: ObjectLogger
) -> None:
    """Keep the object's daemons in line with its newest state (on every batch of events).

    Refreshes the live body, restarts the idle time on essential changes, stops the daemons
    of objects being deleted (``RESOURCE_DELETED``) or not matching any more
    (``FILTERS_MISMATCH``), and spawns the missing ones.
    """
    registry = ctx.registry
    resource = ctx.resource
    if not registry.has_spawning_handlers(resource):
        return
    keeper = ctx.daemons
    daemons = memory.daemons
    raw = event["object"]
    if event["type"] == "DELETED":
        if keeper is not None:
            keeper.stop_all(daemons.running.values(), DaemonStoppingReason.RESOURCE_DELETED)
        return

    if daemons.live_body is None:
        daemons.live_body = Body(raw)
    else:
        daemons.live_body.replace(raw)
    digest = _essence_digest(ctx, daemons.live_body)
    changed = digest != daemons.essence
    if changed:
        daemons.essence = digest
        daemons.reset_idle(trio.current_time())

    if keeper is None:
        return
    if is_deletion_ongoing(raw):
        keeper.stop_all(daemons.running.values(), DaemonStoppingReason.RESOURCE_DELETED)
        return
    if keeper.closed or keeper.paused or ctx.is_stopping:
        return  # nothing new while stopping: it would only be stopped again

    cause = SpawningCause(
        logger=objlogger,
        memo=memory.memo,
        indices=ctx.operator.indices,
        resource=resource,
        patch=Patch(),
        body=daemons.live_body,
        reset=changed,
    )
    handlers = registry.iter_spawning_handlers(
        resource=resource,
        body=raw,
        kwargs=lambda: cause.kwargs,
        excluded=daemons.forever_stopped,
    )
    matching = {handler.id for handler in handlers}
    for daemon in list(daemons.running.values()):
        if daemon.handler.id not in matching and not daemon.stopper.is_set():
            objlogger.debug(f"{daemon.handler} does not match the filters any more; stopping it.")
            keeper.stop(daemon, DaemonStoppingReason.FILTERS_MISMATCH)
    missing = [handler for handler in handlers if handler.id not in daemons.running]
    finalizer = ctx.settings.persistence.finalizer
    if any(h.requires_finalizer for h in missing) and not is_deletion_blocked(raw, finalizer):
        # As in Kopf: new daemons start only once our finalizer is on the object, so that its
        # deletion always waits for them. The patch adding it is on its way (the same cycle
        # has just sent it); its echo on the stream brings this function back here.
        return
    for handler in missing:
        keeper.spawn(handler, memory, objlogger)


async def settle_daemons(
    ctx: ResourceContext,
    memory: ObjectMemory,
    objlogger: logging.Logger | logging.LoggerAdapter[Any],
) -> float | None:
    """For an object being deleted: stop its daemons; ``None`` once none holds the object.

    Otherwise, the seconds after which to look again at the latest (a fallback: the worker is
    woken up by ``memory.daemons.changed`` as soon as one ends or is abandoned).
    """
    daemons = memory.daemons
    daemons.rearm()  # before looking: whatever ends after this moment wakes the worker up
    keeper = ctx.daemons
    holding = [daemon for daemon in daemons.running.values() if not daemon.done]
    if not holding or keeper is None:
        return None
    keeper.stop_all(holding, DaemonStoppingReason.RESOURCE_DELETED)
    await keeper.wait_instant_exit(holding)
    holding = [daemon for daemon in holding if not daemon.done]
    if not holding:
        return None
    settings = ctx.settings.background
    names = ", ".join(repr(str(daemon.handler.id)) for daemon in holding)
    objlogger.debug(f"Waiting for the daemons to exit before releasing the object: {names}.")
    return min(_limits(daemon.handler, settings)[2] for daemon in holding)
