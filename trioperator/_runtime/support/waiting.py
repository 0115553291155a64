"""Waiting for the first of several things to happen, and no longer for the others."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import trio

__all__ = ["First", "first_of", "wait_any"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class First(Generic[T]):
    """Which of the waits returned first (its position among the arguments), and its value."""

    index: int
    value: T


async def first_of(*waits: Callable[[], Awaitable[T]]) -> First[T]:
    """Run the waits side by side; once one of them returns, cancel the others.

    The result names the first one to return; others that return in the same instant, before
    their cancellation reaches them, are ignored. An exception of any wait cancels the others
    and propagates (in an ExceptionGroup, as from any nursery). A cancellation of the caller
    cancels all of them.
    """
    if not waits:
        raise ValueError("Nothing to wait for.")
    first: First[T] | None = None

    async def run(index: int, wait: Callable[[], Awaitable[T]], scope: trio.CancelScope) -> None:
        nonlocal first
        value = await wait()
        if first is None:
            first = First(index, value)
            scope.cancel()

    async with trio.open_nursery() as nursery:
        for index, wait in enumerate(waits):
            nursery.start_soon(run, index, wait, nursery.cancel_scope)
    assert first is not None  # the nursery ends early only by an exception, which propagates
    return first


async def wait_any(*events: trio.Event) -> int:
    """Return once any of the events is set: the position of the first one seen set."""
    return (await first_of(*(event.wait for event in events))).index
