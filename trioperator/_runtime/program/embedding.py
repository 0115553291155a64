"""Entry points for running an operator inside your own program, trio or asyncio.

- ``await operator(...)`` in a trio program runs in the current trio run (e.g. in a nursery of
  yours): the native way, as is ``trio.run(Operator(...).main)``.
- ``await operator(...)`` in an asyncio program (``asyncio.run(operator(...))`` in a thread, or
  awaited inside an aiohttp/FastAPI application) runs trio in *guest mode* on the running
  asyncio loop (``trio.lowlevel.start_guest_run``): one thread, both libraries. The operator's
  asyncio-flavoured handlers then run on that same loop, so they can share the program's
  asyncio objects. Cancelling the awaiting asyncio task stops the operator gracefully (a second
  cancellation cancels everything at once), then the ``asyncio.CancelledError`` goes on.
- ``run(...)`` starts a trio run of its own and blocks until the operator stops.
- ``spawn_tasks(...)`` + ``run_tasks(tasks)``: Kopf's two-step form, shaped for trio:
  ``spawn_tasks`` starts nothing, it returns the operator's root task functions (async
  callables without arguments); ``run_tasks`` runs them in a nursery until the first ends, then
  cancels the rest. They also work when awaited from asyncio (guest mode, as above), and you
  may instead start the task functions in a nursery of your own.

``ready_flag`` and ``stop_flag`` can be what Kopf accepts (``asyncio.Event``, ``asyncio.Future``,
``threading.Event``, ``concurrent.futures.Future``) or a ``trio.Event``: the operator raises
``ready_flag`` when it serves, and stops gracefully when ``stop_flag`` is raised. Flags that are
not trio's are checked every ``FLAG_POLLING`` seconds. asyncio flags must belong to the loop the
operator is awaited in.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import outcome
import trio

from trioperator._client.credentials import Vault
from trioperator._engine.flavors import FlavorSetting
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.asyncio_bridge import HostLoop, in_asyncio, use_host_loop
from trioperator._runtime.program.operator import Operator, single_error
from trioperator._runtime.program.options import OperatorOptions

if TYPE_CHECKING:
    # Not at run time: a trio program (the CLI's ``run`` included) never imports asyncio for
    # its flags; an asyncio flag can only exist where asyncio is imported already.
    import asyncio
    import concurrent.futures

__all__ = ["FLAG_POLLING", "Flag", "OperatorTask", "operator", "run", "run_tasks", "spawn_tasks"]

Flag: TypeAlias = (
    "trio.Event | asyncio.Event | asyncio.Future[Any] | threading.Event"
    " | concurrent.futures.Future[Any]"
)
"""What ``ready_flag=``/``stop_flag=`` may be (Kopf's flags, and trio's event)."""

FLAG_POLLING = 0.1
"""How often a stop flag that is not a ``trio.Event`` is checked, in seconds."""


class OperatorTask:
    """One root task function of an operator: ``await task()`` runs it (see ``spawn_tasks``)."""

    def __init__(self, name: str, fn: Callable[[], Awaitable[None]], operator: Operator) -> None:
        self.name = name
        self.operator = operator
        """The operator this task belongs to (to stop it: ``task.operator.stop()``)."""
        self._fn = fn

    def __repr__(self) -> str:
        return f"<OperatorTask {self.name!r}>"

    async def __call__(self) -> None:
        await self._fn()


async def spawn_tasks(
    *,
    registry: OperatorRegistry | None = None,
    settings: OperatorSettings | None = None,
    memo: Any = None,
    vault: Vault | None = None,
    namespaces: Collection[str] = (),
    clusterwide: bool = False,
    ready_flag: Flag | None = None,
    stop_flag: Flag | None = None,
    standalone: bool | None = None,
    priority: int | None = None,
    peering_name: str | None = None,
    identity: str | None = None,
    liveness_endpoint: str | None = None,
    metrics_endpoint: str | None = None,
    handle_signals: bool = False,
    async_flavor: FlavorSetting | None = None,
) -> list[OperatorTask]:
    """Prepare an operator and return its root task functions; nothing starts yet.

    The trio-shaped counterpart of Kopf's ``spawn_tasks``: instead of running asyncio tasks,
    it returns async callables (``OperatorTask``) for ``run_tasks(tasks)`` or for your own
    nursery (``nursery.start_soon(task)`` each; when the ``"operator"`` one returns, the
    operator is done and the others can be cancelled). The options are those of
    :func:`operator`. Awaitable from trio and from asyncio.
    """
    return _spawn(
        OperatorOptions(
            registry=registry,
            settings=settings,
            memo=memo,
            vault=vault,
            namespaces=namespaces,
            clusterwide=clusterwide,
            standalone=standalone,
            priority=priority,
            peering_name=peering_name,
            identity=identity,
            liveness_endpoint=liveness_endpoint,
            metrics_endpoint=metrics_endpoint,
            handle_signals=handle_signals,
            async_flavor=async_flavor,
        ),
        ready_flag,
        stop_flag,
    )


async def run_tasks(
    tasks: Sequence[Callable[[], Awaitable[None]]],
    *,
    ignored: Any = None,
) -> None:
    """Run root task functions in one nursery until the first ends; then cancel the rest.

    The trio-shaped counterpart of Kopf's ``run_tasks`` (``ignored`` is accepted and unused:
    nothing outside the nursery is ever waited for). An error of any task cancels the others
    and is raised. Awaited from asyncio, it runs in trio's guest mode on the running loop.
    """
    if in_asyncio():
        await _run_from_asyncio(lambda: run_tasks(tasks), tasks)
        return
    try:
        async with trio.open_nursery() as nursery:
            for task in tasks:
                nursery.start_soon(_first_to_end, task, nursery.cancel_scope, name=repr(task))
    except BaseExceptionGroup as group:
        raise single_error(group) from None


async def operator(
    *,
    registry: OperatorRegistry | None = None,
    settings: OperatorSettings | None = None,
    memo: Any = None,
    vault: Vault | None = None,
    namespaces: Collection[str] = (),
    clusterwide: bool = False,
    ready_flag: Flag | None = None,
    stop_flag: Flag | None = None,
    standalone: bool | None = None,
    priority: int | None = None,
    peering_name: str | None = None,
    identity: str | None = None,
    liveness_endpoint: str | None = None,
    metrics_endpoint: str | None = None,
    handle_signals: bool = False,
    async_flavor: FlavorSetting | None = None,
) -> None:
    """Run an operator until ``stop_flag`` is raised or it is cancelled; from trio or asyncio.

    Peering as in Kopf: ``peering_name`` makes the peering mandatory (paused until that peering
    object exists), ``standalone=True`` disables it, ``priority`` ranks this operator among its
    peers; unset, they keep what ``settings.peering`` says. ``liveness_endpoint`` serves the
    probe (``http://host:port/path``), ``metrics_endpoint`` the Prometheus metrics (e.g.
    ``http://0.0.0.0:9090/metrics``; on the probe's server if it has the same host and port).
    ``handle_signals`` makes SIGINT/SIGTERM stop it (only in the main thread, and only in a
    trio program). ``async_flavor`` (``"auto"``, ``"trio"``,
    ``"asyncio"``) sets ``settings.execution.async_flavor``, as ``--async-flavor`` does. See
    the module's docstring for asyncio programs.
    """
    tasks = _spawn(
        OperatorOptions(
            registry=registry,
            settings=settings,
            memo=memo,
            vault=vault,
            namespaces=namespaces,
            clusterwide=clusterwide,
            standalone=standalone,
            priority=priority,
            peering_name=peering_name,
            identity=identity,
            liveness_endpoint=liveness_endpoint,
            metrics_endpoint=metrics_endpoint,
            handle_signals=handle_signals,
            async_flavor=async_flavor,
        ),
        ready_flag,
        stop_flag,
    )
    await _run_spawned(tasks)


async def _run_spawned(tasks: Sequence[OperatorTask]) -> None:
    if len(tasks) == 1 and not in_asyncio():
        await tasks[0]()  # the plain case: no nursery, the operator's own errors as they are
    else:
        await run_tasks(tasks)


def run(
    *,
    registry: OperatorRegistry | None = None,
    settings: OperatorSettings | None = None,
    memo: Any = None,
    vault: Vault | None = None,
    namespaces: Collection[str] = (),
    clusterwide: bool = False,
    ready_flag: Flag | None = None,
    stop_flag: Flag | None = None,
    handle_signals: bool = True,
    standalone: bool | None = None,
    priority: int | None = None,
    peering_name: str | None = None,
    identity: str | None = None,
    liveness_endpoint: str | None = None,
    metrics_endpoint: str | None = None,
    async_flavor: FlavorSetting | None = None,
) -> None:
    """Run an operator in a trio run of its own until it stops; the options are those of
    :func:`operator`.

    SIGINT/SIGTERM stop it gracefully when it runs in the main thread (signals reach no other;
    there, as in Kopf, they are left alone, and ``stop_flag`` stops it). ``ready_flag`` and
    ``stop_flag`` are as for :func:`operator`; across threads, use a ``threading.Event`` or a
    ``concurrent.futures.Future`` (an asyncio flag is raised and checked from this thread, so
    it must not be awaited in a loop of another thread).
    """
    in_main_thread = threading.current_thread() is threading.main_thread()
    tasks = _spawn(
        OperatorOptions(
            registry=registry,
            settings=settings,
            memo=memo,
            vault=vault,
            namespaces=namespaces,
            clusterwide=clusterwide,
            standalone=standalone,
            priority=priority,
            peering_name=peering_name,
            identity=identity,
            liveness_endpoint=liveness_endpoint,
            metrics_endpoint=metrics_endpoint,
            handle_signals=handle_signals and in_main_thread,
            async_flavor=async_flavor,
        ),
        ready_flag,
        stop_flag,
    )
    trio.run(_run_spawned, tasks)


def _spawn(
    options: OperatorOptions, ready_flag: Flag | None, stop_flag: Flag | None
) -> list[OperatorTask]:
    """The root task functions of the operator of ``options`` (see :func:`spawn_tasks`)."""
    op = Operator.from_options(options)
    tasks = [OperatorTask("operator", op.main, op)]
    if isinstance(ready_flag, trio.Event):
        op.ready_flag = ready_flag
    elif ready_flag is not None:
        tasks.append(OperatorTask("ready flag", lambda: _raise_when_ready(op, ready_flag), op))
    if isinstance(stop_flag, trio.Event):
        op.stop_flag = stop_flag
    elif stop_flag is not None:
        tasks.append(OperatorTask("stop flag", lambda: _stop_when_raised(op, stop_flag), op))
    return tasks


# ------------------------------------------------------------------------------------ flags


async def _raise_when_ready(op: Operator, flag: Flag) -> None:
    await op.ready_flag.wait()
    _raise_flag(flag)
    await trio.sleep_forever()  # a root task: ending would end the operator (run_tasks)


async def _stop_when_raised(op: Operator, flag: Flag) -> None:
    while not _is_raised(flag):  # noqa: ASYNC110 -- flags of other libraries and threads
        await trio.sleep(FLAG_POLLING)
    op.stop()
    await trio.sleep_forever()


def _is_instance(flag: object, module: str, name: str) -> bool:
    """``isinstance(flag, module.name)`` without importing ``module``: no object of its classes
    can exist before it is imported."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(flag, getattr(loaded, name))


def _is_event(flag: Flag) -> bool:
    return isinstance(flag, (trio.Event, threading.Event)) or _is_instance(flag, "asyncio", "Event")


def _is_future(flag: Flag) -> bool:
    return _is_instance(flag, "asyncio", "Future") or _is_instance(
        flag, "concurrent.futures", "Future"
    )


def _raise_flag(flag: Flag) -> None:
    if _is_event(flag):
        cast("trio.Event", flag).set()
    elif _is_future(flag):
        future = cast("concurrent.futures.Future[Any]", flag)
        if not future.done():
            future.set_result(None)
    else:
        raise TypeError(f"Unsupported type of a flag: {flag!r}")


def _is_raised(flag: Flag) -> bool:
    if _is_event(flag):
        return cast("trio.Event", flag).is_set()
    if _is_future(flag):
        return cast("concurrent.futures.Future[Any]", flag).done()
    raise TypeError(f"Unsupported type of a flag: {flag!r}")


# ------------------------------------------------------------------------------- the running


async def _first_to_end(task: Callable[[], Awaitable[None]], scope: trio.CancelScope) -> None:
    try:
        await task()
    finally:
        scope.cancel()


def _trio_is_running() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


async def _run_from_asyncio(
    main: Callable[[], Awaitable[None]], tasks: Sequence[Callable[[], Awaitable[None]]]
) -> None:
    """Run trio's ``main()`` on behalf of the awaiting asyncio task, until it ends.

    On a plain asyncio loop, trio runs in guest mode on it. On trio-asyncio's loop (which
    ``asyncio.run()`` creates once trio-asyncio is imported: it replaces asyncio's loop policy),
    trio already runs underneath, so ``main()`` becomes a trio task of that run.

    Cancellation of the awaiting asyncio task: first, every operator among ``tasks`` is asked
    to stop gracefully; a second one cancels them all at once. Either way this waits for the
    trio side to end, then re-raises ``asyncio.CancelledError``.
    """
    import asyncio  # imported already: an asyncio task awaits this

    loop = asyncio.get_running_loop()
    on_trio_asyncio = _trio_is_running()
    token: list[trio.lowlevel.TrioToken] = []
    stops_requested = 0
    operators = {task.operator for task in tasks if isinstance(task, OperatorTask)}

    def stop(hard: bool) -> None:
        for op in operators:
            op.cancel_now() if hard else op.stop()

    async def trio_main() -> None:
        token.append(trio.lowlevel.current_trio_token())
        use_host_loop(HostLoop(loop=loop, token=token[0], trio_asyncio=on_trio_asyncio))
        if stops_requested:
            stop(hard=stops_requested > 1)
        await main()

    done: asyncio.Future[None]
    if on_trio_asyncio:
        done = loop.trio_as_future(trio_main)  # type: ignore[attr-defined]
    else:
        done = loop.create_future()

        def on_done(result: outcome.Outcome[None]) -> None:
            if done.done():
                return
            try:
                result.unwrap()
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

        trio.lowlevel.start_guest_run(
            trio_main,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=loop.call_soon,
            done_callback=on_done,
            host_uses_signal_set_wakeup_fd=threading.current_thread() is threading.main_thread(),
        )
    while True:
        try:
            await asyncio.shield(done)
            break
        except asyncio.CancelledError:
            if done.done():
                raise  # trio's side ended cancelled itself: nothing more to wait for
            stops_requested += 1
            if token:
                token[0].run_sync_soon(stop, stops_requested > 1)
    if stops_requested:
        raise asyncio.CancelledError()
