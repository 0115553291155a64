"""Handing free memory back to the system: glibc's malloc_trim, called every few minutes."""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from trioperator._runtime.support import memory_trim
from trioperator._runtime.support.memory_trim import libc_trimmer, trim_memory_forever


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_c_librarys_trim_is_found_and_callable_on_glibc() -> None:
    trim = libc_trimmer()
    assert trim is not None
    assert trim() in (0, 1)  # 1: memory was released; 0: there was none to release


async def test_trims_every_interval_until_cancelled(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def in_place(fn: Callable[[], int]) -> int:
        return fn()

    monkeypatch.setattr(memory_trim, "in_worker_thread", in_place)
    calls: list[float] = []
    with trio.move_on_after(35):
        await trim_memory_forever(10, trimmer=lambda: calls.append(trio.current_time()) or 1)
    assert calls == [10, 20, 30]


async def test_the_trim_runs_in_a_worker_thread(mock_clock: Any) -> None:
    token = trio.lowlevel.current_trio_token()
    called = trio.Event()
    on_main_thread: list[bool] = []

    def trim() -> int:
        on_main_thread.append(threading.current_thread() is threading.main_thread())
        token.run_sync_soon(called.set)
        return 0

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trim_memory_forever, 10, trimmer=trim))
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(10)
        await called.wait()
        nursery.cancel_scope.cancel()
    assert on_main_thread == [False]


@pytest.mark.parametrize("interval", [None, 0, -1])
async def test_disabled_returns_at_once_without_trimming(
    autojump_clock: Any, interval: float | None
) -> None:
    calls: list[int] = []
    with trio.fail_after(1):
        await trim_memory_forever(interval, trimmer=lambda: calls.append(1) or 1)
    assert calls == []
