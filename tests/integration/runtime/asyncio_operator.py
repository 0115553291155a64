"""Handlers written for asyncio, as a Kopf user writes them: this module imports no trio.

So the ``auto`` flavor gives them asyncio. The tests register them into their own registry with
one of the ``register_*`` functions; what the handlers observe is recorded into ``seen`` (a dict
of lists, by key) for the tests to assert on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import sniffio
import trioperator as kopf

LOCK = asyncio.Lock()  # made at import time, before any loop exists, as Kopf users do
EVENT = asyncio.Event()

Seen = dict[str, list[Any]]


def _recorder(seen: Seen) -> Any:
    def record(key: str, value: Any = None) -> None:
        seen.setdefault(key, []).append(value)

    return record


def library() -> str:
    return sniffio.current_async_library()


def register_every_kind(registry: kopf.OperatorRegistry, seen: Seen) -> None:
    """One asyncio handler of every kind that can be async."""
    record = _recorder(seen)

    @kopf.on.startup(id="startup_fn", registry=registry)
    async def startup_fn(**_: Any) -> None:
        await asyncio.sleep(1)
        record("startup", library())

    @kopf.on.cleanup(id="cleanup_fn", registry=registry)
    async def cleanup_fn(**_: Any) -> None:
        await asyncio.sleep(1)
        record("cleanup", library())

    @kopf.on.probe(id="probe_fn", registry=registry)
    async def probe_fn(**_: Any) -> str:
        await asyncio.sleep(0)
        return library()

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        async with LOCK:
            await asyncio.sleep(5)
        await anyio.sleep(1)  # anyio code runs under asyncio here
        record("create", (library(), asyncio.get_running_loop() is loop, id(loop)))
        EVENT.set()
        return {"library": library()}

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(**_: Any) -> None:
        async with LOCK:
            await asyncio.sleep(1)
        record("update", (library(), id(asyncio.get_running_loop())))

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(**_: Any) -> None:
        await asyncio.sleep(1)
        record("delete", library())

    @kopf.on.event("kopfexamples", id="event_fn", registry=registry)
    async def event_fn(**_: Any) -> None:
        await asyncio.sleep(0)
        record("event", library())

    @kopf.index("kopfexamples", id="by_name", registry=registry)
    async def by_name(name: str, **_: Any) -> dict[str, str]:
        await asyncio.sleep(0)
        return {name: library()}

    @kopf.daemon("kopfexamples", id="daemon_fn", registry=registry)
    async def daemon_fn(stopped: kopf.DaemonStopped, **_: Any) -> None:
        await EVENT.wait()  # an asyncio.Event made at import, set by create_fn
        record("daemon", library())
        while not stopped:
            await stopped.wait(1000)
        record("daemon-stopped", stopped.reason)

    @kopf.timer("kopfexamples", interval=100, id="timer_fn", registry=registry)
    async def timer_fn(by_name: kopf.Index[str, str], **_: Any) -> None:
        await asyncio.sleep(1)
        record("timer", (library(), dict(by_name)))


def register_cancellable(registry: kopf.OperatorRegistry, seen: Seen) -> None:
    """Handlers that never end on their own: only a cancellation stops them."""
    record = _recorder(seen)

    @kopf.on.create("kopfexamples", timeout=10, id="slow_fn", registry=registry)
    async def slow_fn(**_: Any) -> None:
        try:
            await asyncio.sleep(1000)
        except asyncio.CancelledError:
            record("slow_fn", library())
            raise

    @kopf.daemon("kopfexamples", id="stubborn_daemon", registry=registry)
    async def stubborn_daemon(**_: Any) -> None:
        try:
            await asyncio.sleep(100000)  # ignores its stop flag
        except asyncio.CancelledError:
            record("stubborn_daemon", library())
            raise


def register_subhandlers(registry: kopf.OperatorRegistry, seen: Seen) -> None:
    record = _recorder(seen)

    async def sub_a(**_: Any) -> None:
        await asyncio.sleep(1)
        record("sub_a", library())

    def sub_b(**_: Any) -> None:
        record("sub_b", "thread")

    @kopf.on.create("kopfexamples", id="parent_fn", registry=registry)
    async def parent_fn(**_: Any) -> None:
        await kopf.execute(fns={"a": sub_a, "b": sub_b})
        record("parent_fn", library())


def register_overridden(registry: kopf.OperatorRegistry, seen: Seen) -> None:
    """In this asyncio module, but told to run under trio: anyio code works either way."""
    record = _recorder(seen)

    @kopf.on.create("kopfexamples", flavor="trio", id="trio_fn", registry=registry)
    async def trio_fn(**_: Any) -> None:
        await anyio.sleep(1)
        record("trio_fn", library())


def register_embedded(registry: kopf.OperatorRegistry, seen: Seen) -> None:
    """For an operator awaited from an asyncio program: which loop do the handlers run on?"""
    record = _recorder(seen)

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        await asyncio.sleep(0.01)
        record("create", (name, library(), asyncio.get_running_loop()))

    @kopf.daemon("kopfexamples", id="daemon_fn", registry=registry)
    async def daemon_fn(stopped: kopf.DaemonStopped, **_: Any) -> None:
        record("daemon", library())
        while not stopped:
            await stopped.wait(0.05)
        record("daemon-stopped", stopped.reason)

    @kopf.on.cleanup(id="cleanup_fn", registry=registry)
    async def cleanup_fn(**_: Any) -> None:
        await asyncio.sleep(0)
        record("cleanup", library())


def register_asyncio_idioms(registry: kopf.OperatorRegistry, seen: Seen) -> None:
    """What Kopf operators commonly do in asyncio handlers besides sleeping."""
    record = _recorder(seen)

    def blocking(value: str) -> str:
        return value

    async def child(value: str) -> str:
        await asyncio.sleep(1)
        return value

    @kopf.on.create("kopfexamples", id="idioms_fn", registry=registry)
    async def idioms_fn(**_: Any) -> None:
        loop = asyncio.get_event_loop()  # the older spelling, still common
        record("executor", await loop.run_in_executor(None, blocking, "executor"))
        record("to_thread", await asyncio.to_thread(blocking, "to_thread"))
        record("gather", await asyncio.gather(child("a"), child("b")))
        record("wait_for", await asyncio.wait_for(child("c"), timeout=5))
        try:
            async with asyncio.timeout(0.5):
                await child("never")
        except TimeoutError:
            record("timeout", "expired")
        task = asyncio.create_task(child("task"))
        record("task", await task)

    @kopf.on.create("kopfexamples", id="parent_fn", registry=registry)
    async def parent_fn(**_: Any) -> None:
        @kopf.subhandler(id="sub")
        async def sub(**_: Any) -> None:
            await asyncio.sleep(1)
            record("sub", library())

        record("parent", library())

    async def made_by_a_lambda(**_: Any) -> None:
        await asyncio.sleep(1)
        record("lambda", library())

    # A sync callable that returns a coroutine: awaited under its module's flavor.
    kopf.on.create("kopfexamples", id="lambda_fn", registry=registry)(
        lambda **kwargs: made_by_a_lambda(**kwargs)
    )


def register_failing_startup(registry: kopf.OperatorRegistry, seen: Seen) -> None:
    record = _recorder(seen)

    @kopf.on.startup(id="startup_fn", registry=registry)
    async def startup_fn(**_: Any) -> None:
        await asyncio.sleep(1)
        record("startup", library())
        raise kopf.PermanentError("Not today.")


def register_login(registry: kopf.OperatorRegistry, seen: Seen, server: str) -> None:
    record = _recorder(seen)

    @kopf.on.login(id="login_fn", registry=registry)
    async def login_fn(**_: Any) -> kopf.ConnectionInfo:
        await asyncio.sleep(1)
        record("login", library())
        return kopf.ConnectionInfo(server=server, token="fake")

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        record("create", library())


def register_endless(registry: kopf.OperatorRegistry, seen: Seen) -> None:
    record = _recorder(seen)

    @kopf.on.create("kopfexamples", id="endless_fn", registry=registry)
    async def endless_fn(**_: Any) -> None:
        record("started", library())
        try:
            await asyncio.sleep(100000)
        except asyncio.CancelledError:
            record("cancelled", library())
            raise
