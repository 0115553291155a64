"""The ``stopped`` flag of daemons and timers, and why it was raised.

A daemon runs until it is told to stop. The framework raises one flag per daemon (a
``DaemonStopper``, internal) and hands the daemon a read-only view of it (``DaemonStopped``, the
``stopped`` kwarg). The view answers three questions: is it set (``bool(stopped)``,
``stopped.is_set()``), why (``stopped.reason``, a combination of ``DaemonStoppingReason``
flags), and "sleep, but wake me up when it is set" (``stopped.wait(seconds)``).

Sync daemons run in worker threads: their ``wait()`` blocks the thread on a ``threading.Event``.
Async daemons await their ``wait()`` (``await stopped.wait(seconds)``), from trio or, for
asyncio-flavoured daemons, from the operator's asyncio loop; that variant is built by the
runtime, which owns trio's side of the flag. Both are ``DaemonStopped``, so one type
annotation fits sync and async daemons, and both ``stopped.wait(1)`` and
``await stopped.wait(1)`` type-check against it.

Nothing here does I/O. The flag is raised only from the operator's trio thread; threads only
read it.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Generator
from typing import Any

__all__ = [
    "DaemonStopped",
    "DaemonStopper",
    "DaemonStoppingReason",
    "SyncDaemonStopped",
    "SyncDaemonStopperChecker",
]


class DaemonStoppingReason(enum.Flag):
    """Why a daemon or timer is asked to stop; several reasons may combine.

    ``DONE`` is added when the daemon's task has ended, whatever the reason. The three
    ``DAEMON_*`` flags tell how far the termination has escalated: signalled (the graceful
    backoff began), cancelled (forced), abandoned (given up on; it may still run).
    """

    DONE = enum.auto()
    FILTERS_MISMATCH = enum.auto()
    RESOURCE_DELETED = enum.auto()
    OPERATOR_PAUSING = enum.auto()
    OPERATOR_EXITING = enum.auto()
    DAEMON_SIGNALLED = enum.auto()
    DAEMON_CANCELLED = enum.auto()
    DAEMON_ABANDONED = enum.auto()


class DaemonStopper:
    """The framework's side of the flag: raised with reasons, read by the daemon's view.

    Reasons accumulate: each ``set()`` adds its reason to those given before. ``when`` is the
    operator's clock time of the first ``set()`` (the start of the termination), given by the
    caller since this module knows no clock.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: DaemonStoppingReason | None = None
        self.when: float | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.is_set()}, reason={self.reason}>"

    def is_set(self, reason: DaemonStoppingReason | None = None) -> bool:
        """Whether the flag is raised: at all, or (with ``reason``) for that reason too."""
        if not self._event.is_set():
            return False
        return reason is None or (self.reason is not None and reason in self.reason)

    def set(self, reason: DaemonStoppingReason, *, now: float | None = None) -> None:
        self.reason = reason if self.reason is None else self.reason | reason
        if self.when is None:
            self.when = now
        self._event.set()

    def wait_in_thread(self, timeout: float | None = None) -> bool:
        """Block the calling (worker) thread until the flag is raised or ``timeout`` passes."""
        return self._event.wait(timeout)


class DaemonStopped:
    """The ``stopped`` kwarg of daemons and timers: a read-only view of their stop flag.

    ``while not stopped: ...`` loops until the daemon is asked to stop; ``stopped.reason`` tells
    why. ``stopped.wait(seconds)`` sleeps until the flag is raised or the time is over and
    returns this view (truthy if stopped): blocking in sync daemons, ``await``-ed in async ones.
    """

    __slots__ = ("_stopper",)

    def __init__(self, stopper: DaemonStopper) -> None:
        self._stopper = stopper

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.is_set()}, reason={self.reason}>"

    def __bool__(self) -> bool:
        return self._stopper.is_set()

    def is_set(self) -> bool:
        return self._stopper.is_set()

    @property
    def reason(self) -> DaemonStoppingReason | None:
        return self._stopper.reason

    def wait(self, timeout: float | None = None) -> DaemonStopped:
        """Wait until stopped or ``timeout`` seconds pass (forever if ``None``)."""
        raise NotImplementedError("Only the sync and async variants of the flag can wait.")

    def __await__(self) -> Generator[Any, None, DaemonStopped]:
        # Declared here so that ``await stopped.wait(n)`` type-checks against this base type;
        # only what an async flag's ``wait()`` returns can really be awaited.
        raise TypeError(
            "The stop flag cannot be awaited itself: use `await stopped.wait()` in async "
            "daemons and `stopped.wait()` in sync ones."
        )


class SyncDaemonStopped(DaemonStopped):
    """The flag as sync daemons (in worker threads) get it: ``wait()`` blocks the thread."""

    __slots__ = ()

    def wait(self, timeout: float | None = None) -> SyncDaemonStopped:
        self._stopper.wait_in_thread(timeout)
        return self


SyncDaemonStopperChecker = SyncDaemonStopped
"""Kopf's older (deprecated) name of the sync flag type, for annotations in existing code."""
