"""The operator-wide gates that tasks wait at: the pause (peering) and the indices' readiness.

They are state, shared through the ``OperatorContext``: peering turns the pause on and off
(``trioperator._runtime.coordination.peering``), the watchers hold the readiness gate while they
index (``trioperator._runtime.pipeline.indexing``); watchers and workers only wait for them to open.
"""

from __future__ import annotations

from collections.abc import Hashable

import trio

__all__ = ["IndexingReadiness", "OperatorPause"]


class OperatorPause:
    """Why the operator is paused now: named blockers; paused while any of them is on."""

    def __init__(self) -> None:
        self._blockers: dict[Hashable, str] = {}
        self._changed = trio.Event()

    def is_paused(self) -> bool:
        # A method, not a property: a type checker narrows properties across awaits.
        return bool(self._blockers)

    @property
    def reasons(self) -> list[str]:
        return sorted(self._blockers.values())

    def turn(self, key: Hashable, name: str, on: bool) -> None:
        if on == (key in self._blockers):
            return
        was_paused = self.is_paused()
        if on:
            self._blockers[key] = name
        else:
            del self._blockers[key]
        if was_paused != self.is_paused():
            self._changed.set()
            self._changed = trio.Event()

    def is_on(self, key: Hashable) -> bool:
        return key in self._blockers

    async def wait_for(self, paused: bool) -> None:
        """Return when the operator is (or already was) paused or not, as asked."""
        while self.is_paused() != paused:
            await self._changed.wait()


class IndexingReadiness:
    """A gate that is open while nobody holds it: resource handlers wait for it to open.

    Holders are arbitrary tokens (one per indexing watcher, one for the operator's startup).
    """

    def __init__(self) -> None:
        self._holders: set[object] = set()
        self._opened = trio.Event()
        self._opened.set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} ready={self.ready} holders={len(self._holders)}>"

    @property
    def ready(self) -> bool:
        return not self._holders

    def hold(self, holder: object | None = None) -> object:
        """Close the gate until ``release(holder)``; returns the holder (a new token if None)."""
        token = holder if holder is not None else object()
        if not self._holders:
            self._opened = trio.Event()
        self._holders.add(token)
        return token

    def release(self, holder: object | None) -> None:
        """Let go of the gate (idempotent; ``None`` is no holder); it opens when nobody holds it."""
        if holder is not None:
            self._holders.discard(holder)
        if not self._holders:
            self._opened.set()

    async def wait(self) -> None:
        """Return once the gate is open (it may close again later)."""
        while self._holders:
            await self._opened.wait()
