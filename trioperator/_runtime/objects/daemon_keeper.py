"""The keeper of one watcher's daemons and timers: their tasks, and how they are stopped.

Task tree (inside ``run_watcher``)::

    run_watcher
    └── background nursery (one per watcher; it outlives the watcher's workers)
        ├── exit relay            the operator's stop -> every daemon is stopped (OPERATOR_EXITING)
        ├── daemon/timer task     one per (object, handler); its loop runs in its own cancel scope
        └── terminator            one per daemon being stopped: the staged termination below

What runs in a daemon/timer task is ``daemon_loops``; when to spawn and stop them, object by
object, is ``daemon_spawning``.

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
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import trio

from trioperator._client.api import APIClient
from trioperator._client.resources import Resource
from trioperator._engine.handlers import DaemonHandler, SpawningHandler
from trioperator._engine.indexing import Index
from trioperator._engine.patches import Patch
from trioperator._engine.settings import BackgroundSettings, OperatorSettings
from trioperator._engine.stoppers import DaemonStoppingReason, SyncDaemonStopped
from trioperator._runtime.handling.execution import Execution
from trioperator._runtime.handling.loggers import ObjectLogger
from trioperator._runtime.objects.alarms import AlarmClock
from trioperator._runtime.objects.daemon_flags import AsyncDaemonStopped, TrioDaemonStopper
from trioperator._runtime.objects.daemon_loops import DaemonLoops
from trioperator._runtime.objects.daemon_state import Daemon, DaemonCause
from trioperator._runtime.objects.memories import ObjectMemory
from trioperator._runtime.support.waiting import wait_any
from trioperator._util.ordering import current_ticket

__all__ = ["EXITING_GRACE", "DaemonsKeeper", "termination_limits"]

logger = logging.getLogger(__name__)


EXITING_GRACE = 5.0
"""When the operator exits, how long a daemon without ``cancellation_timeout`` may take after
its flag is raised, before it is cancelled (async) or abandoned (sync). Kopf's equivalent is
its 5-second grace for "hung" tasks on exit."""


def termination_limits(
    handler: SpawningHandler, settings: BackgroundSettings
) -> tuple[float | None, float | None, float]:
    """The handler's termination stages: backoff, timeout, polling interval."""
    if isinstance(handler, DaemonHandler):
        polling = handler.cancellation_polling or settings.cancellation_polling
        return handler.cancellation_backoff, handler.cancellation_timeout, polling
    return None, None, settings.cancellation_polling


class DaemonsKeeper:
    """The daemons and timers of one watcher's objects, in the watcher's background nursery."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        api: APIClient,
        resource: Resource,
        settings: OperatorSettings,
        indices: Mapping[str, Index[Any, Any]],
        execution: Execution,
    ) -> None:
        self._nursery = nursery
        self._resource = resource
        self._settings = settings
        self._indices = indices
        self._daemons: set[Daemon] = set()
        self._exiting = trio.Event()
        self.exiting_since: float | None = None
        self.paused = False
        """While paused (peering), daemons are stopped and nothing is spawned."""
        self._execution = execution
        # One clock for the sleeps of all the watcher's daemons and timers: the framework's
        # between the calls, and the daemons' own ``await stopped.wait(seconds)``.
        self._alarms = AlarmClock(nursery)
        self._loops = DaemonLoops(
            api=api, resource=resource, execution=execution, alarms=self._alarms
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
        is_async = handler.is_async
        stopper = TrioDaemonStopper(alarms=self._alarms)
        stopped = AsyncDaemonStopped(stopper) if is_async else SyncDaemonStopped(stopper)
        cause = DaemonCause(
            logger=objlogger,
            memo=memory.memo,
            indices=self._indices,
            resource=self._resource,
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
        # Started from a worker, the task has the ticket of the worker's work: its own requests
        # are not that work, and queue as they come (see _util/ordering.py).
        current_ticket.set(None)
        handler = daemon.handler
        memory = daemon.memory
        try:
            with daemon.scope:
                await self._loops.run(daemon, cause)
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
        settings = self._settings.background
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
                await wait_any(daemon.finished, self._exiting)
            else:
                await daemon.finished.wait()
        return daemon.finished.is_set()

    async def _terminate(self, daemon: Daemon) -> None:
        handler = daemon.handler
        objlogger = daemon.logger
        backoff, timeout, polling = termination_limits(handler, self._settings.background)
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
