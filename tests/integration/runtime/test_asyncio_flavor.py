"""Async handlers written for asyncio run on the operator's asyncio loop (trio-asyncio)."""

from __future__ import annotations

from typing import Any

import trioperator as kopf

from tests.integration.runtime import asyncio_operator


async def test_asyncio_handlers_of_every_kind_run_on_the_asyncio_loop(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: dict[str, list[Any]] = {}
    asyncio_operator.register(registry, seen)
    running = await run_operator()
    assert seen["startup"] == ["asyncio"]
    running.create()
    await running.wait_for(lambda: "create" in seen and "timer" in seen and "daemon-woke" in seen)
    print(seen)
    await running.stop()
    print(seen)
