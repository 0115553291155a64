"""Where an object's time goes inside the operator under test (open-loop runs only).

Enabled by ``BENCH_TRACE=<path>`` (set by benchmarks/run.py); without it nothing is patched.
Lines of JSON arrays go to the file, with CLOCK_MONOTONIC times (``time.monotonic()`` is
system-wide, so the harness compares them with its own):

- ``["h", name, t]``: the handler starts (both frameworks);
- ``["e", name, type, resourceVersion, t]``: an event lands in the object's mailbox
  (trioperator: the router hands it to the object's worker);
- ``["p", name, subresource, t_asked, t_connection, t_answered, status]``: a PATCH: asked for,
  got a request slot (trioperator only; Kopf: ``null``), read the whole response;
- ``["stall", t, seconds, held]``: the router stops reading the stream (backpressure: too many
  events queued for the workers) for that long;
- ``["lag", t, seconds]``: the event loop's lag, sampled every 10 ms (a sleep's overshoot);
- ``["gc", generation, t, seconds]``: a garbage collection of generation 1 or 2 (and the
  totals per generation at exit, ``["gcsum", generation, count, seconds]``).

The patches are the framework's internals, wrapped from outside: the package is not touched.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import gc
import json
import os
import time
from typing import Any

PATH = os.environ.get("BENCH_TRACE")
LAG_PERIOD = 0.01

_file = open(PATH, "a", buffering=1 << 20) if PATH else None  # noqa: SIM115 -- closed at exit
_gc_totals: dict[int, list[float]] = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
_gc_started = 0.0


def record(*fields: Any) -> None:
    if _file is not None:
        _file.write(json.dumps(fields) + "\n")


def _close() -> None:
    if _gc_callback in gc.callbacks:
        gc.callbacks.remove(_gc_callback)  # a collection during the interpreter's exit
    if _file is not None:
        for generation, (count, seconds) in _gc_totals.items():
            record("gcsum", generation, count, seconds)
        _file.close()


def _gc_callback(phase: str, info: dict[str, int]) -> None:
    global _gc_started
    now = time.perf_counter()
    if phase == "start":
        _gc_started = now
        return
    generation = info["generation"]
    spent = now - _gc_started
    totals = _gc_totals[generation]
    totals[0] += 1
    totals[1] += spent
    if generation:
        record("gc", generation, time.monotonic(), spent)


def _name_of(path: str) -> tuple[str, str]:
    parts = path.split("?")[0].rstrip("/").split("/")
    return (parts[-2], parts[-1]) if parts[-1] == "status" else (parts[-1], "")


def _patch_trioperator() -> None:
    from trioperator._client import http
    from trioperator._client.transport import pool
    from trioperator._runtime.objects import mailboxes

    put = mailboxes.Mailbox.put

    @functools.wraps(put)
    def traced_put(self: Any, event: Any) -> None:
        metadata = event["object"].get("metadata") or {}
        record(
            "e",
            metadata.get("name"),
            event["type"],
            metadata.get("resourceVersion"),
            time.monotonic(),
        )
        put(self, event)

    mailboxes.Mailbox.put = traced_put  # type: ignore[method-assign]

    wait_for_room = mailboxes.Backlog.wait_for_room

    @functools.wraps(wait_for_room)
    async def traced_wait_for_room(self: Any, limit: int) -> None:
        if self.held < limit:
            return await wait_for_room(self, limit)
        began = time.monotonic()
        await wait_for_room(self, limit)
        record("stall", began, time.monotonic() - began, self.held)

    mailboxes.Backlog.wait_for_room = traced_wait_for_room  # type: ignore[method-assign]

    granted: contextvars.ContextVar[float | None] = contextvars.ContextVar("granted", default=None)
    pool_request = pool.TransportPool.request

    @functools.wraps(pool_request)
    async def traced_pool_request(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        granted.set(time.monotonic())
        return await pool_request(self, method, *args, **kwargs)

    pool.TransportPool.request = traced_pool_request  # type: ignore[method-assign]

    session_request = http.HTTPSession.request

    @functools.wraps(session_request)
    async def traced_request(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        if method != "PATCH":
            return await session_request(self, method, path, **kwargs)
        asked = time.monotonic()
        granted.set(None)
        response = await session_request(self, method, path, **kwargs)
        name, sub = _name_of(path)
        record("p", name, sub, asked, granted.get(), time.monotonic(), response.status)
        return response

    http.HTTPSession.request = traced_request  # type: ignore[method-assign]


def _patch_kopf() -> None:
    from kopf._cogs.clients import api

    patch = api.patch

    @functools.wraps(patch)
    async def traced_patch(url: str, **kwargs: Any) -> Any:
        asked = time.monotonic()
        answer = await patch(url, **kwargs)
        name, sub = _name_of(url)
        record("p", name, sub, asked, None, time.monotonic(), 200)
        return answer

    api.patch = traced_patch


async def _lag_trio() -> None:
    import trio

    while True:
        before = time.monotonic()
        await trio.sleep(LAG_PERIOD)
        record("lag", before, time.monotonic() - before - LAG_PERIOD)


async def _lag_asyncio() -> None:
    import asyncio

    while True:
        before = time.monotonic()
        await asyncio.sleep(LAG_PERIOD)
        record("lag", before, time.monotonic() - before - LAG_PERIOD)


_lag_task: Any = None  # the asyncio task, referenced so that it is not collected


def start_lag_sampler() -> None:
    """From a startup handler: sample the event loop's lag for the operator's life."""
    global _lag_task
    if _file is None:
        return
    try:
        import trio

        trio.lowlevel.current_task()
    except (ImportError, RuntimeError):
        import asyncio

        _lag_task = asyncio.get_running_loop().create_task(_lag_asyncio())
    else:
        trio.lowlevel.spawn_system_task(_lag_trio)


def install(framework: str) -> None:
    if _file is None:
        return
    atexit.register(_close)
    gc.callbacks.append(_gc_callback)
    if framework == "kopf":
        _patch_kopf()
    else:
        _patch_trioperator()
