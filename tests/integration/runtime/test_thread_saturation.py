"""A warning when sync functions wait for a free thread (``settings.execution.max_workers``).

Once per episode of waiting, and at most once a minute; an info line when the episode ends.
What a user observes: the log lines, and (through an operator) which setting to raise.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import trio
import trio.testing
import trioperator as kopf
from trio.testing import MockClock
from trioperator._runtime.handling.threads import SATURATION_WARNING_INTERVAL, run_in_thread

LOGGER = "trioperator.threads"
WAITING = "Sync handlers wait for a free thread"
FREED = "Sync handlers no longer wait for threads"


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


class Blocked:
    """Calls that block their threads until released."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.entered += 1
        if not self.gate.wait(30):
            raise RuntimeError("never released")


async def _saturate(limiter: trio.CapacityLimiter, calls: int) -> None:
    """Run ``calls`` blocked calls at once, release them when all are started or waiting."""
    blocked = Blocked()
    async with trio.open_nursery() as nursery:
        for _ in range(calls):
            nursery.start_soon(lambda: run_in_thread(blocked, limiter=limiter))
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.borrowed_tokens == min(calls, limiter.total_tokens)
        blocked.gate.set()


async def test_one_warning_per_episode_naming_the_setting(
    mock_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    limiter = trio.CapacityLimiter(2)
    await _saturate(limiter, 2)  # all tokens taken, none waits: no episode
    assert lines(caplog, WAITING) == []

    await _saturate(limiter, 5)  # three wait
    [warning] = lines(caplog, WAITING)
    assert "all 2 are busy" in warning
    assert "Raise settings.execution.max_workers" in warning
    [freed] = lines(caplog, FREED)
    assert "3 call(s) waited for one of the 2" in freed
    assert [r.levelno for r in caplog.records if WAITING in r.getMessage()] == [logging.WARNING]


async def test_episodes_close_together_warn_once_a_minute(
    mock_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    limiter = trio.CapacityLimiter(1)
    await _saturate(limiter, 3)
    mock_clock.jump(SATURATION_WARNING_INTERVAL - 1)
    await _saturate(limiter, 3)  # a new episode, within the minute: quiet
    assert len(lines(caplog, WAITING)) == len(lines(caplog, FREED)) == 1
    mock_clock.jump(1)
    await _saturate(limiter, 3)
    assert len(lines(caplog, WAITING)) == len(lines(caplog, FREED)) == 2


async def test_a_cancelled_waiter_ends_its_episode(
    mock_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    limiter = trio.CapacityLimiter(1)
    blocked = Blocked()
    waiting = trio.CancelScope()

    async def waiter() -> None:
        with waiting:
            await run_in_thread(blocked, limiter=limiter)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_in_thread(blocked, limiter=limiter))
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert len(lines(caplog, WAITING)) == 1
        waiting.cancel()
        await trio.testing.wait_all_tasks_blocked()
        # Nobody waits any more, although the first call still holds the only thread.
        assert len(lines(caplog, FREED)) == 1
        assert limiter.borrowed_tokens == 1
        blocked.gate.set()
    assert limiter.borrowed_tokens == 0
    assert blocked.entered == 1


async def test_an_operator_with_busy_sync_handlers_warns(
    autojump_clock: MockClock,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    settings.execution.max_workers = 1
    release = threading.Event()
    done: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    def create_fn(name: str, **_: Any) -> None:
        release.wait(10)
        done.append(name)

    running = await run_operator()
    for index in range(3):
        running.create(name=f"object-{index}")
    await running.wait_for(lambda: bool(lines(caplog, WAITING)))
    release.set()
    await running.wait_for(lambda: len(done) == 3)
    [warning] = lines(caplog, WAITING)
    assert "all 1 are busy. Raise settings.execution.max_workers" in warning
