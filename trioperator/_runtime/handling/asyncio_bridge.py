"""The asyncio loop that asyncio-flavoured user code runs on, inside the operator's tree.

Handlers written for asyncio (see ``_engine/flavors.py`` for how they are told apart) run as
asyncio tasks on one asyncio loop per operator, and are awaited from the operator's trio tasks:

- normally the loop is trio-asyncio's (an asyncio loop implemented on top of trio), opened by
  ``Operator.main`` when the registry holds asyncio-flavoured code, around everything else: it
  starts first and closes last, after the cleanup handlers;
- when the operator itself is awaited from an asyncio program (``await operator()``, which
  runs trio in guest mode on that program's loop, see ``embedding.py``), the handlers run on
  the program's own loop instead: objects made by the program (queues, sessions, locks) can be
  shared with the handlers, as under Kopf.

Either way the bridge does both directions: trio awaits an asyncio coroutine (cancelling the
trio side cancels the asyncio task, which sees ``asyncio.CancelledError``), and asyncio code
awaits trio code (``await stopped.wait()``, ``await trioperator.execute()``), run as a trio
task of the bridge's own nursery in the caller's context variables.

One loop is reused for every call; a call costs one asyncio task (see
``benchmarks/bench_flavors.py``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import outcome
import sniffio
import trio

from trioperator._engine.flavors import Flavor, choose_flavor, needs_asyncio
from trioperator._engine.handlers import BaseHandler
from trioperator._engine.settings import ExecutionSettings

if TYPE_CHECKING:
    # Not imported at run time until asyncio is in use: an operator of trio handlers never
    # imports asyncio (~30 modules, ~1.5 MiB). Where an asyncio loop exists, it is imported.
    import asyncio

__all__ = [
    "AsyncioBridge",
    "HostLoop",
    "choose_handler_flavor",
    "in_asyncio",
    "run_asyncio",
    "run_trio_from_asyncio",
    "run_with_asyncio",
    "use_host_loop",
]


@dataclasses.dataclass(frozen=True)
class HostLoop:
    """The loop of an asyncio program that awaits the operator: its handlers run there too."""

    loop: asyncio.AbstractEventLoop
    token: trio.lowlevel.TrioToken
    trio_asyncio: bool = False
    """True: trio-asyncio's loop, on the operator's trio run; False: trio is a guest there."""


class AsyncioBridge:
    """One operator's asyncio loop, and the trio nursery for asyncio code's calls into trio."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        token: trio.lowlevel.TrioToken,
        nursery: trio.Nursery,
        hosted: bool,
    ) -> None:
        self.loop = loop
        self.hosted = hosted
        """True: the loop of the program hosting trio as a guest; False: trio-asyncio's loop."""
        self._token = token
        self._nursery = nursery

    async def run_asyncio(self, fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
        """From trio: call ``fn(**kwargs)`` in an asyncio task on the loop; await its result."""
        coro = _call(fn, kwargs)
        if not self.hosted:
            # trio-asyncio wakes us up directly, with no extra hop through the trio token.
            return await self.loop.run_aio_coroutine(coro)  # type: ignore[attr-defined]
        return await _await_hosted_task(self.loop.create_task(coro), self._token)

    async def run_trio(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """From asyncio code on the loop: run ``fn()`` as a trio task; await its result.

        The trio task sees the caller's context variables (e.g. the running handler's, which
        ``trioperator.execute()`` needs). Cancelling the awaiting asyncio task cancels it, and
        waits until it has ended.
        """
        import asyncio  # imported already: there is a loop

        loop = self.loop
        future: asyncio.Future[Any] = loop.create_future()
        finished: asyncio.Future[None] = loop.create_future()
        scope = trio.CancelScope()
        context = contextvars.copy_context()

        async def call_in_trio() -> None:
            for var, value in context.items():
                var.set(value)
            result: outcome.Outcome[Any] | None = None
            try:
                with scope:
                    try:
                        result = outcome.Value(await fn())
                    except trio.Cancelled:
                        raise
                    except BaseException as exc:  # it goes to the asyncio side
                        result = outcome.Error(exc)
            finally:
                # Delivered unless the asyncio side has given up (it cancelled, so the result
                # has nobody to go to) or the loop is gone. No result: this was cancelled.
                if not loop.is_closed():
                    finished.set_result(None)
                if not future.done() and not loop.is_closed():
                    if result is None:
                        future.cancel()
                    elif isinstance(result, outcome.Error):
                        future.set_exception(result.error)
                    elif isinstance(result, outcome.Value):
                        future.set_result(result.value)

        def start() -> None:
            try:
                self._nursery.start_soon(call_in_trio)
            except RuntimeError:  # the nursery is closed: the operator has ended
                if not loop.is_closed():
                    finished.set_result(None)
                    future.set_exception(RuntimeError("The operator has stopped: no more calls."))

        self._token.run_sync_soon(start)
        try:
            return await future
        except asyncio.CancelledError:
            self._token.run_sync_soon(scope.cancel)
            await asyncio.shield(finished)  # as trio does: the cancelled call ends first
            raise


async def _call(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    # Called inside the asyncio task, so that even creating the coroutine (a callable object's
    # __call__, a decorator's wrapper) happens with the asyncio loop running.
    return await fn(**kwargs)


async def _await_hosted_task(task: asyncio.Task[Any], token: trio.lowlevel.TrioToken) -> Any:
    """Wait in trio for a task of the host's loop, which runs outside trio's context.

    Like trio-asyncio's own waiting, but woken through the trio token: the task's completion
    callback runs in the host loop, where trio's scheduler cannot be touched directly.
    """
    import asyncio  # imported already: there is a loop

    trio_task = trio.lowlevel.current_task()
    raise_cancel: Callable[[], Any] | None = None

    def on_done(_: object) -> None:
        token.run_sync_soon(trio.lowlevel.reschedule, trio_task, outcome.capture(task.result))

    def abort(raise_cancel_fn: Callable[[], Any]) -> trio.lowlevel.Abort:
        nonlocal raise_cancel
        raise_cancel = raise_cancel_fn
        task.cancel()
        return trio.lowlevel.Abort.FAILED  # the task's end reschedules us, cancelled or not

    task.add_done_callback(on_done)
    try:
        return await trio.lowlevel.wait_task_rescheduled(abort)
    except asyncio.CancelledError:
        if raise_cancel is not None:
            raise_cancel()  # our own cancellation reached it: trio's Cancelled goes on up
        raise


# ------------------------------------------------------------------------------- the context


@dataclasses.dataclass(frozen=True)
class _Flavoring:
    settings: ExecutionSettings | None
    bridge: AsyncioBridge | None


_flavoring: contextvars.ContextVar[_Flavoring | None] = contextvars.ContextVar(
    "trioperator.flavoring", default=None
)
_host: contextvars.ContextVar[HostLoop | None] = contextvars.ContextVar(
    "trioperator.host_loop", default=None
)


def use_host_loop(host: HostLoop) -> contextvars.Token[HostLoop | None]:
    """Run the asyncio handlers of operators started from here on ``host``'s loop."""
    return _host.set(host)


async def run_with_asyncio(
    body: Callable[[], Awaitable[None]],
    *,
    settings: ExecutionSettings,
    handlers: Callable[[], Iterable[BaseHandler]],
) -> None:
    """Run ``body()`` with the asyncio loop its asyncio-flavoured code needs, if any.

    ``handlers()`` gives every registered handler: the loop is opened only if one of them is
    asyncio-flavoured (or the settings force asyncio), or if a host loop is there anyway.
    """
    host = _host.get()
    if host is None and not needs_asyncio(handlers(), setting=settings.async_flavor):
        token = _flavoring.set(_Flavoring(settings=settings, bridge=None))
        try:
            await body()
        finally:
            _flavoring.reset(token)
        return
    if host is not None:
        await _run_bridged(body, settings=settings, loop=host.loop, hosted=not host.trio_asyncio)
        return
    import trio_asyncio  # only now: importing it changes asyncio's loop policy process-wide

    async with trio_asyncio.open_loop() as loop:
        await _run_bridged(body, settings=settings, loop=loop, hosted=False)


async def _run_bridged(
    body: Callable[[], Awaitable[None]],
    *,
    settings: ExecutionSettings,
    loop: asyncio.AbstractEventLoop,
    hosted: bool,
) -> None:
    async with trio.open_nursery() as calls_into_trio:
        bridge = AsyncioBridge(
            loop,
            token=trio.lowlevel.current_trio_token(),
            nursery=calls_into_trio,
            hosted=hosted,
        )
        token = _flavoring.set(_Flavoring(settings=settings, bridge=bridge))
        try:
            await body()
        finally:
            _flavoring.reset(token)
            calls_into_trio.cancel_scope.cancel()


# ---------------------------------------------------------------------------------- the calls


def choose_handler_flavor(fn: Callable[..., Any], override: Flavor | None = None) -> Flavor:
    """The flavor ``fn`` runs under in the current operator (``auto`` outside of any)."""
    flavoring = _flavoring.get()
    settings = flavoring.settings if flavoring is not None else None
    return choose_flavor(
        fn, override=override, setting=settings.async_flavor if settings is not None else "auto"
    )


def _current_bridge() -> AsyncioBridge:
    flavoring = _flavoring.get()
    if flavoring is not None and flavoring.bridge is not None:
        return flavoring.bridge
    raise RuntimeError(
        "Asyncio-flavoured code needs the operator's asyncio loop, and there is none: the "
        "operator opens it at start only if a registered handler is asyncio-flavoured or "
        "settings.execution.async_flavor is 'asyncio' (set it before the operator starts, "
        "or pass --async-flavor=asyncio)."
    )


async def run_asyncio(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    """From trio: run the asyncio-flavoured ``fn(**kwargs)`` on the operator's loop."""
    return await _current_bridge().run_asyncio(fn, kwargs)


def in_asyncio() -> bool:
    """Whether the calling code runs in an asyncio task (not in trio)."""
    try:
        return sniffio.current_async_library() == "asyncio"
    except sniffio.AsyncLibraryNotFoundError:
        return False


async def run_trio_from_asyncio(
    fn: Callable[..., Awaitable[Any]], /, *args: Any, **kwargs: Any
) -> Any:
    """From asyncio code on the operator's loop: run the trio function ``fn`` and await it."""
    return await _current_bridge().run_trio(functools.partial(fn, *args, **kwargs))
