"""Calling user functions: async ones in the operator's trio run, sync ones in worker threads.

Sync functions run through ``trio.to_thread.run_sync`` under one ``CapacityLimiter`` per
operator (``settings.execution.max_workers``). trio copies the context variables into the
thread, so sub-handler registration and event posting work from sync handlers as well.
A thread cannot be cancelled: cancellation waits until it returns, so no thread is orphaned.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import trio

DEFAULT_THREAD_LIMIT = 40
"""trio's own default for threads; used when ``settings.execution.max_workers`` is None."""


def is_async_fn(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives an awaitable (partials and wrappers are looked through)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 -- callable objects with an async __call__
    )


async def invoke(
    fn: Callable[..., Any],
    *,
    kwargs: Mapping[str, Any],
    limiter: trio.CapacityLimiter | None = None,
    abandon_on_cancel: bool = False,
) -> Any:
    """Call ``fn(**kwargs)`` the way it wants to be called and return its result.

    A sync ``fn`` runs in a worker thread. Cancellation waits for the thread to return, unless
    ``abandon_on_cancel``: then the caller is cancelled at once and the thread runs on alone.
    """
    if is_async_fn(fn):
        return await fn(**kwargs)
    result = await trio.to_thread.run_sync(
        functools.partial(fn, **kwargs),
        limiter=limiter,
        abandon_on_cancel=abandon_on_cancel,
    )
    # A sync function may still return an awaitable (e.g. a lambda around a coroutine fn).
    if inspect.isawaitable(result):
        return await result
    return result


def make_limiter(max_workers: int | None) -> trio.CapacityLimiter:
    return trio.CapacityLimiter(max_workers or DEFAULT_THREAD_LIMIT)
