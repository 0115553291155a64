"""Sync handlers run in worker threads, bounded by ``settings.execution.max_workers``."""

from __future__ import annotations

import threading
from typing import Any

import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"


async def test_sync_handlers_run_in_threads_async_ones_in_trio(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    threads: dict[str, int] = {}

    @kopf.on.create("kopfexamples", id="sync_fn", registry=registry)
    def sync_fn(**_: Any) -> None:
        threads["sync"] = threading.get_ident()

    @kopf.on.create("kopfexamples", id="async_fn", registry=registry)
    async def async_fn(**_: Any) -> None:
        threads["async"] = threading.get_ident()

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(threads) == 2)
    assert threads["async"] == threading.get_ident()
    assert threads["sync"] != threading.get_ident()


async def test_max_workers_bounds_the_threads(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.execution.max_workers = 2
    lock = threading.Lock()
    release = threading.Event()
    inside: list[str] = []
    most: list[int] = [0]
    done: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    def create_fn(name: str, **_: Any) -> None:
        with lock:
            inside.append(name)
            most[0] = max(most[0], len(inside))
        release.wait(10)
        with lock:
            inside.remove(name)
            done.append(name)

    running = await run_operator()
    names = [f"object-{i}" for i in range(4)]
    for name in names:
        running.create(name=name)
    await running.wait_for(lambda: len(inside) == 2)
    # The other two wait for a token: shown by the limiter itself, not by a sleep (the autojump
    # clock does not wait for threads, so a third one could still be starting after any sleep).
    limiter = running.operator.context.thread_limiter
    await running.wait_for(lambda: limiter.statistics().tasks_waiting == 2)
    assert limiter.statistics().borrowed_tokens == 2
    assert len(inside) == 2
    release.set()
    await running.wait_for(lambda: len(done) == 4)
    assert most[0] == 2
    for name in names:
        await running.wait_for(
            lambda name=name: DIFFBASE in running.obj(name)["metadata"].get("annotations", {})
        )
