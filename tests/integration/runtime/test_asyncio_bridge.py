"""The asyncio bridge both ways: results, errors and cancellation cross it in either direction."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from trioperator._engine.handlers import ActivityHandler
from trioperator._engine.ids import HandlerId
from trioperator._engine.settings import ExecutionSettings
from trioperator._runtime.handling.asyncio_bridge import (
    run_asyncio,
    run_trio_from_asyncio,
    run_with_asyncio,
)


async def _with_loop(body: Callable[[], Awaitable[None]]) -> None:
    """Run ``body`` as the operator would, with the asyncio loop open (the setting forces it)."""
    settings = ExecutionSettings(async_flavor="asyncio")
    handler = ActivityHandler(fn=_noop, id=HandlerId("noop"), activity="startup")  # type: ignore[arg-type]
    await run_with_asyncio(body, settings=settings, handlers=lambda: [handler])


async def _noop(**_: Any) -> None:
    pass


async def test_results_and_errors_cross_both_ways(autojump_clock: Any) -> None:
    seen: list[Any] = []

    async def in_trio(value: str) -> str:
        await trio.sleep(1)
        if value == "fail":
            raise LookupError("from trio")
        return f"trio got {value}"

    async def in_asyncio(value: str) -> str:
        await asyncio.sleep(1)
        seen.append(await run_trio_from_asyncio(in_trio, "ok"))
        try:
            await run_trio_from_asyncio(in_trio, "fail")
        except LookupError as exc:
            seen.append(str(exc))
        if value == "fail":
            raise KeyError("from asyncio")
        return f"asyncio got {value}"

    async def body() -> None:
        seen.append(await run_asyncio(in_asyncio, {"value": "x"}))
        with pytest.raises(KeyError, match="from asyncio"):
            await run_asyncio(in_asyncio, {"value": "fail"})

    await _with_loop(body)
    assert seen == ["trio got ok", "from trio", "asyncio got x", "trio got ok", "from trio"]
    assert trio.current_time() == 6


async def test_cancellation_crosses_both_ways(autojump_clock: Any) -> None:
    seen: list[str] = []

    async def in_trio() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            seen.append("trio task cancelled")
            raise

    async def in_asyncio() -> None:
        try:
            await asyncio.wait_for(run_trio_from_asyncio(in_trio), timeout=5)
        except TimeoutError:
            seen.append("asyncio timed out")
        try:
            await asyncio.sleep(1000)
        except asyncio.CancelledError:
            seen.append("asyncio task cancelled")
            raise

    async def body() -> None:
        with trio.move_on_after(10) as scope:
            await run_asyncio(in_asyncio, {})
        assert scope.cancelled_caught

    await _with_loop(body)
    assert seen == ["trio task cancelled", "asyncio timed out", "asyncio task cancelled"]
    assert trio.current_time() == 10


async def test_without_the_loop_asyncio_code_gets_a_clear_error() -> None:
    async def body() -> None:
        with pytest.raises(RuntimeError, match="needs the operator's asyncio loop"):
            await run_asyncio(_noop, {})

    await run_with_asyncio(body, settings=ExecutionSettings(), handlers=list)
