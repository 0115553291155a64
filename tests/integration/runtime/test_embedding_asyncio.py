"""An operator awaited from asyncio programs: trio runs as a guest on the program's loop.

Each runs twice: on asyncio's own loop (trio in guest mode), and on the loop ``asyncio.run()``
makes once trio-asyncio is imported in the process (it replaces asyncio's loop policy; trio then
runs underneath already). The asyncio program runs in a worker thread, next to the test's trio
run that serves the fake API; its loop has real time, so these tests wait for real (fractions of
a second): the mock clock cannot drive another thread's loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import trio
import trioperator as kopf
from tests.integration.runtime import asyncio_operator
from tests.integration.runtime.asyncio_operator import Seen
from tests.integration.runtime.conftest import OBJ
from trioperator.testing import FakeAPI

Reason = kopf.DaemonStoppingReason


def _vault(fake_api: FakeAPI) -> kopf.Vault:
    return kopf.Vault({"fake": kopf.ConnectionInfo(server=fake_api.url, token="fake")})


@pytest.fixture(params=["asyncio", "trio-asyncio"])
def asyncio_run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, None]], None]:
    """``asyncio.run()`` with the given kind of loop."""
    if request.param == "trio-asyncio":
        import trio_asyncio  # noqa: F401 -- imported for its effect on asyncio.run()

        return asyncio.run

    def run(coro: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
            runner.run(coro)

    return run


async def _until(predicate: Callable[[], Any], limit: float = 30) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 -- waiting for another thread's event loop
            await trio.sleep(0.01)


async def test_asyncio_run_of_the_operator_in_a_thread_runs_and_stops(
    fake_api: FakeAPI, registry: kopf.OperatorRegistry, asyncio_run: Any
) -> None:
    seen: Seen = {}
    asyncio_operator.register_embedded(registry, seen)
    ready, stop = threading.Event(), threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    async def program() -> None:
        loops.append(asyncio.get_running_loop())
        await kopf.operator(
            registry=registry,
            vault=_vault(fake_api),
            ready_flag=ready,
            stop_flag=stop,
            standalone=True,
        )

    def thread() -> None:  # as Kopf's examples/12-embedded does it
        asyncio_run(program())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, thread)
        await _until(ready.is_set)
        fake_api.create_object("kopfexamples", dict(OBJ))
        await _until(lambda: "create" in seen and "daemon" in seen)
        stop.set()
    # The thread has ended: asyncio.run() returned without an error.
    [(name, library, loop)] = seen["create"]
    assert (name, library) == ("kopf-example-1", "asyncio")
    assert loop is loops[0]  # the handlers run on the program's own loop
    assert seen["daemon"] == ["asyncio"]
    assert seen["daemon-stopped"] == [Reason.OPERATOR_EXITING]
    assert seen["cleanup"] == ["asyncio"]


async def test_cancelling_the_awaiting_asyncio_task_stops_the_operator_gracefully(
    fake_api: FakeAPI, registry: kopf.OperatorRegistry, asyncio_run: Any
) -> None:
    seen: Seen = {}
    asyncio_operator.register_embedded(registry, seen)
    outcome: list[str] = []
    created = threading.Event()

    async def program() -> None:
        ready = asyncio.Event()  # asyncio flags of the program's loop work too
        task = asyncio.create_task(
            kopf.operator(
                registry=registry, vault=_vault(fake_api), ready_flag=ready, standalone=True
            )
        )
        await ready.wait()
        created.set()
        while "create" not in seen:  # noqa: ASYNC110 -- the handler runs on this loop
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            outcome.append("cancelled")
        outcome.append("program goes on")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, asyncio_run, program())
        await _until(created.is_set)
        fake_api.create_object("kopfexamples", dict(OBJ))
    assert outcome == ["cancelled", "program goes on"]
    assert seen["daemon-stopped"] == [Reason.OPERATOR_EXITING]
    assert seen["cleanup"] == ["asyncio"]  # graceful: the cleanup handlers ran


async def test_spawn_tasks_and_run_tasks_in_trio(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry
) -> None:
    handled: list[str] = []

    @kopf.on.create("kopfexamples", registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        handled.append(name)

    ready, stop = trio.Event(), threading.Event()  # trio's own and a foreign flag
    tasks = await kopf.spawn_tasks(
        registry=registry, vault=_vault(fake_api), ready_flag=ready, stop_flag=stop
    )
    assert [task.name for task in tasks] == ["operator", "stop flag"]
    assert not ready.is_set()  # nothing started yet
    async with trio.open_nursery() as nursery:
        nursery.start_soon(kopf.run_tasks, tasks)
        await ready.wait()
        fake_api.create_object("kopfexamples", dict(OBJ))
        await _until(lambda: handled)
        stop.set()
    assert handled == ["kopf-example-1"]


async def test_a_second_cancellation_cancels_the_operator_at_once(
    fake_api: FakeAPI, registry: kopf.OperatorRegistry, asyncio_run: Any
) -> None:
    seen: Seen = {}
    asyncio_operator.register_endless(registry, seen)
    outcome: list[str] = []
    ready = threading.Event()

    async def program() -> None:
        task = asyncio.create_task(
            kopf.operator(
                registry=registry, vault=_vault(fake_api), ready_flag=ready, standalone=True
            )
        )
        while "started" not in seen:  # noqa: ASYNC110 -- the handler runs on this loop
            await asyncio.sleep(0.01)
        task.cancel()  # graceful: the operator waits for the endless handler...
        await asyncio.sleep(0.3)
        outcome.append("still running" if not task.done() else "ended")
        task.cancel()  # ...until the second cancellation
        try:
            await task
        except asyncio.CancelledError:
            outcome.append("cancelled")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, asyncio_run, program())
        await _until(ready.is_set)
        fake_api.create_object("kopfexamples", dict(OBJ))
    assert outcome == ["still running", "cancelled"]
    assert seen == {"started": ["asyncio"], "cancelled": ["asyncio"]}
