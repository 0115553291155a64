"""Calling user functions: async ones in the operator's trio run or on its asyncio loop, sync
ones in worker threads.

Every kind of user callable that may be async goes through ``invoke``: handlers of changes and
events, daemons, timers, indexers, activities, sub-handlers, webhook handlers. An async one runs
under its flavor (``_engine/flavors.py``): natively in trio, or as an asyncio task on the
operator's asyncio loop (``asyncio_bridge.py``). Callers pass the handler's ``flavor=`` option.

Sync functions run in trio's worker threads (``threads.run_in_thread``, a leaner
``trio.to_thread.run_sync``) under one ``CapacityLimiter`` per operator
(``settings.execution.max_workers``); a function whose last call was quick is waited for in
place, for at most half a millisecond. The context variables are copied into the thread, so
sub-handler registration and event posting work from sync handlers as well. A thread cannot
be cancelled: cancellation waits until it returns, so no thread is orphaned.

Within a running operator every call gets the ``api`` kwarg (trioperator's own, see
``apiclients.py``): the API client for the function's flavor, made on first use.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from trioperator._engine.flavors import Flavor, is_async_callable
from trioperator._runtime.handling.apiclients import API_KWARG, current_apis, with_api_kwarg
from trioperator._runtime.handling.asyncio_bridge import choose_handler_flavor, run_asyncio
from trioperator._runtime.handling.threads import run_in_thread

DEFAULT_THREAD_LIMIT = 40
"""trio's own default for threads; used when ``settings.execution.max_workers`` is None."""


is_async_fn = is_async_callable


async def invoke(
    fn: Callable[..., Any],
    *,
    kwargs: Mapping[str, Any],
    limiter: trio.CapacityLimiter | None = None,
    abandon_on_cancel: bool = False,
    flavor: Flavor | None = None,
    is_async: bool | None = None,
) -> Any:
    """Call ``fn(**kwargs)`` the way it wants to be called and return its result.

    An async ``fn`` runs under ``flavor`` (the handler's option) or else the operator's setting
    (``auto``: detected once per function). Under asyncio, a cancellation (a timeout, the
    operator's exit) cancels its asyncio task. A sync ``fn`` runs in a worker thread.
    Cancellation waits for the thread to return, unless ``abandon_on_cancel``: then the
    caller is cancelled at once and the thread runs on alone. ``is_async``: whether ``fn`` is
    async, if the caller knows it already (``None``: look).
    """
    if is_async if is_async is not None else is_async_fn(fn):
        if choose_handler_flavor(fn, flavor) == "asyncio":
            return await run_asyncio(fn, with_api_kwarg(kwargs, "asyncio"))
        # Given as a keyword of its own: the call makes the handler's dict of kwargs anyway,
        # so the kwarg adds no copy to the hot path.
        apis = current_apis()
        if apis is None or API_KWARG in kwargs:
            return await fn(**kwargs)
        return await fn(**kwargs, api=apis.trio)
    result = await run_in_thread(
        functools.partial(_call_sync, fn, with_api_kwarg(kwargs, None)),
        limiter=limiter if limiter is not None else trio.to_thread.current_default_thread_limiter(),
        abandon_on_cancel=abandon_on_cancel,
        known_as=fn,
    )
    # A sync function may still return an awaitable (e.g. a lambda around a coroutine fn):
    # it is awaited under the flavor of the function that made it.
    if isinstance(result, _Returned):
        if choose_handler_flavor(fn, flavor) == "asyncio":
            return await run_asyncio(_await, {"awaitable": result.awaitable})
        return await result.awaitable
    return result


class _Returned:
    """An awaitable returned by a sync function, carried out of its thread as it is (trio
    refuses a thread's result that looks asynchronous)."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable


def _call_sync(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    result = fn(**kwargs)
    return _Returned(result) if inspect.isawaitable(result) else result


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def make_limiter(max_workers: int | None) -> trio.CapacityLimiter:
    return trio.CapacityLimiter(max_workers or DEFAULT_THREAD_LIMIT)
