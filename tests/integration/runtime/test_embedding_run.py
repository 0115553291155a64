"""``kopf.run(ready_flag=..., stop_flag=...)`` in a thread of its own, as Kopf's ``run()``."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

import trio
import trioperator as kopf
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator.testing import FakeAPI

LIMIT = 30  # seconds of real time: the operator runs in another thread, on the real clock


async def _run_in_thread(
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    ready_flag: Any,
    stop_flag: Any,
    finished: trio.Event,
) -> None:
    vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})

    def target() -> None:
        # In a thread: the default handle_signals=True is left aside there (no signals).
        kopf.run(
            registry=registry,
            vault=vault,
            clusterwide=True,
            standalone=True,
            ready_flag=ready_flag,
            stop_flag=stop_flag,
        )

    await trio.to_thread.run_sync(target)
    finished.set()


async def test_run_raises_the_ready_flag_and_stops_on_the_stop_flag(
    fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: dict[str, Any]
) -> None:
    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    def create_fn(**_: Any) -> str:
        return "done"

    def handled() -> bool:
        found = fake_api.get_object("kopfexamples", "kopf-example-1", "default")
        return "create_fn" in (found.get("status") or {})

    fake_api.create_object("kopfexamples", obj)
    ready: concurrent.futures.Future[Any] = concurrent.futures.Future()
    stop = threading.Event()
    finished = trio.Event()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_run_in_thread, fake_api, registry, ready, stop, finished)
            try:
                await trio.to_thread.run_sync(ready.result, LIMIT)
                while not handled():  # noqa: ASYNC110 -- what another thread's operator wrote
                    await trio.sleep(0.01)
                assert not finished.is_set()
            finally:
                stop.set()  # also when the test fails: the thread must end
            await finished.wait()
    result = fake_api.get_object("kopfexamples", "kopf-example-1", "default")
    assert result["status"]["create_fn"] == "done"


async def test_run_stops_on_a_future_as_the_stop_flag(
    fake_api: FakeAPI, registry: kopf.OperatorRegistry
) -> None:
    @kopf.on.create("kopfexamples", registry=registry)
    def create_fn(**_: Any) -> None:
        pass

    ready = threading.Event()
    stop: concurrent.futures.Future[Any] = concurrent.futures.Future()
    finished = trio.Event()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_run_in_thread, fake_api, registry, ready, stop, finished)
            try:
                assert await trio.to_thread.run_sync(ready.wait, LIMIT)
            finally:
                stop.set_result(None)  # also when the test fails: the thread must end
            await finished.wait()
