"""Handing free memory back to the system: glibc's malloc_trim, called every few minutes."""

from __future__ import annotations

import platform
from typing import Any

import pytest
import trio
from trioperator._runtime.support.memory_trim import libc_trimmer, trim_memory_forever


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_c_librarys_trim_is_found_and_callable_on_glibc() -> None:
    trim = libc_trimmer()
    assert trim is not None
    assert trim() in (0, 1)  # 1: memory was released; 0: there was none to release


async def test_trims_every_interval_until_cancelled(autojump_clock: Any) -> None:
    calls: list[float] = []
    with trio.move_on_after(35):
        await trim_memory_forever(10, trimmer=lambda: calls.append(trio.current_time()) or 1)
    assert calls == [10, 20, 30]


@pytest.mark.parametrize("interval", [None, 0, -1])
async def test_disabled_returns_at_once_without_trimming(
    autojump_clock: Any, interval: float | None
) -> None:
    calls: list[int] = []
    with trio.fail_after(1):
        await trim_memory_forever(interval, trimmer=lambda: calls.append(1) or 1)
    assert calls == []
