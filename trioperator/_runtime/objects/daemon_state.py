"""What is known about the daemons and timers of each object: records only, no behaviour.

An object's ``DaemonsMemory`` lives in its ``ObjectMemory`` for as long as the object is known;
a ``Daemon`` is one running daemon or timer of it. The keeper (``daemon_keeper``) runs and stops
them; the per-object decisions are in ``daemon_spawning``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import trio

from trioperator._engine.bodies import Body
from trioperator._engine.causes import ResourceCause
from trioperator._engine.handlers import SpawningHandler
from trioperator._engine.ids import HandlerId
from trioperator._engine.stoppers import DaemonStopped
from trioperator._runtime.handling.loggers import ObjectLogger
from trioperator._runtime.objects.daemon_flags import TrioDaemonStopper

__all__ = ["Daemon", "DaemonCause", "DaemonsMemory"]


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
    """A digest of the last seen essence, to tell essential changes (see ``daemon_spawning``)."""
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
