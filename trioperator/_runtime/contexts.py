"""What the tasks serving one resource share: the API, handlers, settings and memories."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import trio

from trioperator._client.api import APIClient
from trioperator._client.resources import Resource
from trioperator._client.watching import WatchHealth
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.memories import Memories


@dataclasses.dataclass
class OperatorContext:
    """Shared by every task of one running operator."""

    api: APIClient
    registry: OperatorRegistry
    settings: OperatorSettings
    memo: Any
    thread_limiter: trio.CapacityLimiter
    stopping: trio.Event = dataclasses.field(default_factory=trio.Event)
    """Set when a graceful stop begins: stop taking new work, finish what is running."""

    basetime: datetime.datetime = dataclasses.field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC)
    )
    """The wall-clock time at trio time zero (set when the operator starts)."""

    def now(self) -> datetime.datetime:
        """Wall-clock "now" derived from trio's clock, so a mock clock governs it in tests."""
        return self.basetime + datetime.timedelta(seconds=trio.current_time())

    def reset_basetime(self) -> None:
        self.basetime = run_basetime()


_basetime: trio.lowlevel.RunVar[datetime.datetime] = trio.lowlevel.RunVar("trioperator.basetime")


def run_basetime() -> datetime.datetime:
    """The wall-clock time at trio time zero, fixed once per ``trio.run``.

    Every operator of one run shares it, so that their timestamps agree with each other (e.g.
    an operator restarted in the same process reads the delays its predecessor stored), also
    under a ``MockClock``, where the real wall clock does not move with trio's clock.
    """
    try:
        return _basetime.get()
    except LookupError:
        now = datetime.datetime.now(datetime.UTC)
        basetime = now - datetime.timedelta(seconds=trio.current_time())
        _basetime.set(basetime)
        return basetime


@dataclasses.dataclass
class ResourceContext:
    """Shared by the watcher of one (resource, namespace) and its workers."""

    operator: OperatorContext
    resource: Resource
    namespace: str | None
    memories: Memories
    worker_slots: trio.Semaphore | None = None
    health: WatchHealth = dataclasses.field(default_factory=WatchHealth)
    """The watcher's signs of life, for the liveness probe."""

    @property
    def api(self) -> APIClient:
        return self.operator.api

    @property
    def registry(self) -> OperatorRegistry:
        return self.operator.registry

    @property
    def settings(self) -> OperatorSettings:
        return self.operator.settings
