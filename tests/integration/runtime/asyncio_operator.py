"""Handlers written for asyncio, as a Kopf user writes them: this module imports no trio.

The tests register them into their own registry with ``register(registry, seen)``; what the
handlers observe is recorded into ``seen`` (a dict of lists) for the tests to assert on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import sniffio
import trioperator as kopf

LOCK = asyncio.Lock()  # made at import time, before any loop exists, as Kopf users do
EVENT = asyncio.Event()


def register(registry: kopf.OperatorRegistry, seen: dict[str, list[Any]]) -> None:
    def record(key: str, value: Any = None) -> None:
        seen.setdefault(key, []).append(value)

    @kopf.on.startup(registry=registry)
    async def startup_fn(**_: Any) -> None:
        await asyncio.sleep(1)
        record("startup", sniffio.current_async_library())

    @kopf.on.cleanup(registry=registry)
    async def cleanup_fn(**_: Any) -> None:
        await asyncio.sleep(1)
        record("cleanup", sniffio.current_async_library())

    @kopf.on.create("kopfexamples", registry=registry)
    async def create_fn(**_: Any) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        async with LOCK:
            await asyncio.sleep(5)
        await anyio.sleep(1)
        record("create", asyncio.get_running_loop() is loop)
        return {"library": sniffio.current_async_library()}

    @kopf.on.update("kopfexamples", registry=registry)
    async def update_fn(**_: Any) -> None:
        async with LOCK:
            await asyncio.sleep(1)
        record("update", sniffio.current_async_library())

    @kopf.on.delete("kopfexamples", registry=registry)
    async def delete_fn(**_: Any) -> None:
        await asyncio.sleep(1)
        record("delete", sniffio.current_async_library())

    @kopf.on.event("kopfexamples", registry=registry)
    async def event_fn(type: str | None, **_: Any) -> None:
        await asyncio.sleep(0)
        record("event", type)

    @kopf.index("kopfexamples", registry=registry)
    async def by_name(name: str, **_: Any) -> str:
        await asyncio.sleep(0)
        return sniffio.current_async_library()

    @kopf.daemon("kopfexamples", registry=registry)
    async def daemon_fn(stopped: kopf.DaemonStopped, **_: Any) -> None:
        record("daemon-started", sniffio.current_async_library())
        while not stopped:
            await stopped.wait(10)
            record("daemon-woke", bool(stopped))
        record("daemon-stopped", stopped.reason)

    @kopf.timer("kopfexamples", interval=100, registry=registry)
    async def timer_fn(**_: Any) -> None:
        await asyncio.sleep(1)
        record("timer", sniffio.current_async_library())
