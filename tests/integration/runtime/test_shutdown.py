"""Graceful stop: running handlers finish (within the exit timeout), then everything ends."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"


async def test_stop_lets_a_running_handler_finish_and_store_its_outcome(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    finished: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> str:
        await trio.sleep(1.5)
        finished.append(trio.current_time())
        return "done"

    running = await run_operator()
    running.create()
    await trio.sleep(0.5)
    stopped_at = trio.current_time()
    await running.stop()

    assert len(finished) == 1
    assert trio.current_time() - stopped_at == pytest.approx(1, abs=0.05)
    obj = running.obj()
    assert DIFFBASE in obj["metadata"]["annotations"]
    assert obj["status"]["create_fn"] == "done"
    assert running.workers() == []


async def test_a_handler_slower_than_the_exit_timeout_is_cancelled(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    logs: Any,
) -> None:
    settings.queueing.exit_timeout = 2
    started: list[float] = []
    finished: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        started.append(trio.current_time())
        await trio.sleep(100)
        finished.append(trio.current_time())

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: bool(started))
    stopped_at = trio.current_time()
    await running.stop()
    assert trio.current_time() - stopped_at == pytest.approx(2, abs=0.05)
    assert finished == []
    assert logs.count("Unprocessed streams left") == 1
    assert running.workers() == []
    # Nothing is recorded: the next run of the operator does the creation anew.
    assert DIFFBASE not in running.obj()["metadata"].get("annotations", {})


async def test_stop_does_not_wait_for_delayed_handlers_or_idle_workers(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        raise kopf.TemporaryError("much later", delay=500)

    @kopf.on.create("kopfexamples", id="other_fn", registry=registry)
    async def other_fn(**_: Any) -> None:
        pass

    running = await run_operator()
    running.create()
    running.create(name="other")
    await running.wait_for(
        lambda: "kopf.zalando.org/create_fn" in running.obj()["metadata"].get("annotations", {})
    )
    await trio.sleep(1)
    stopped_at = trio.current_time()
    await running.stop()
    assert trio.current_time() - stopped_at < 0.1
    assert running.workers() == []


async def test_sync_handler_in_a_thread_finishes_before_the_stop_completes(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    # The mock clock moves while a thread works in real time: a long exit timeout keeps
    # this independent of how fast the thread is.
    settings.queueing.exit_timeout = 600
    proceed = threading.Event()
    entered = threading.Event()

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    def create_fn(**_: Any) -> str:
        entered.set()
        proceed.wait(10)
        return "done"

    running = await run_operator()
    running.create()
    await running.wait_for(entered.is_set)
    running.operator.stop()
    await trio.sleep(0.5)
    assert not running.finished.is_set()  # the thread is still running
    proceed.set()
    await running.wait_for(running.finished.is_set)
    assert running.obj()["status"]["create_fn"] == "done"


async def test_a_stop_right_as_a_sync_handler_returns_keeps_its_outcome(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    # The stop comes from the handler's own thread just before it returns (default settings):
    # its result and its progress must still reach the object before the operator exits, or
    # the next start runs the handler again.
    running: Any = None

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    def create_fn(**_: Any) -> str:
        trio.from_thread.run_sync(running.operator.stop, trio_token=token)
        return "done"

    token = trio.lowlevel.current_trio_token()
    running = await run_operator()
    running.create()
    await running.wait_for(running.finished.is_set)

    obj = running.obj()
    assert obj["status"]["create_fn"] == "done"
    assert DIFFBASE in obj["metadata"]["annotations"]


@pytest.mark.parametrize("patch_delay", [0.0, 0.5, 0.9])
async def test_a_stop_while_a_handlers_outcome_is_being_written_keeps_it(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, patch_delay: float
) -> None:
    # The outcome is two writes (the status, then the body with the diff-base), each slowed
    # down here; together they stay within the exit timeout (2 s), so both must land.
    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    def create_fn(**_: Any) -> str:
        return "done"

    running = await run_operator()
    if patch_delay:
        running.api.inject("PATCH", "*/kopfexamples/*", delay=patch_delay, times=None)
    requests_before = len(running.api.requests)
    running.create()
    # The stop comes as soon as the outcome's first write has been sent.
    await running.wait_for(
        lambda: any(r.method == "PATCH" for r in running.api.requests[requests_before:]), limit=60
    )
    running.operator.stop()
    await running.wait_for(running.finished.is_set)

    obj = running.obj()
    assert obj["status"]["create_fn"] == "done"
    assert DIFFBASE in obj["metadata"]["annotations"]
