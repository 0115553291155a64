"""The operator's lifecycle: startup before anything, cleanup after everything, and the stop.

The stop has two phases: a graceful one (the first SIGINT/SIGTERM, or ``stop_flag``), in which
running handlers may finish, and a forced one -- a second signal, or the ultimate exiting
timeout -- that cancels everything at once. All on trio's mock clock.

Signals are real: the operator runs with ``handle_signals=True`` and the test raises them in
its own process. Every test that does so keeps a receiver of its own for SIGINT and SIGTERM
open around the operator, so that a signal can never reach Python's default handlers (a
KeyboardInterrupt, or the end of the test process for SIGTERM) -- whatever goes wrong.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
import trioperator as kopf
from tests.integration.conftest import results
from tests.integration.runtime.conftest import Running
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._runtime.program.operator import Operator
from trioperator._runtime.support import memory_trim
from trioperator.testing import FakeAPI

ULTIMATE = "settings.process.ultimate_exiting_timeout"


class Run:
    """An operator's ``main()`` in the test's nursery: when it ended, and how."""

    def __init__(self, operator: Operator, api: FakeAPI) -> None:
        self.operator = operator
        self.api = api
        self.ended_at: float | None = None
        self.error: Exception | None = None
        self.finished = trio.Event()

    async def main(self) -> None:
        try:
            await self.operator.main()
        except Exception as exc:  # the test looks at it
            self.error = exc
        finally:
            self.ended_at = trio.current_time()
            self.finished.set()

    async def wait_for(self, predicate: Callable[[], object], limit: float = 3600) -> None:
        # Polled every 10 ms: while real I/O with the fake API is in flight, the idle mock
        # clock jumps to the next deadline; polling keeps those jumps small.
        with trio.fail_after(limit):
            while not predicate():  # noqa: ASYNC110 -- polling what the fake API holds
                await trio.sleep(0.01)

    async def wait_until_finished(self, limit: float = 3600) -> float:
        await self.wait_for(self.finished.is_set, limit)
        assert self.ended_at is not None
        return self.ended_at

    async def ready(self) -> None:
        await self.wait_for(self.operator.ready_flag.is_set)

    async def serve(self, obj: dict[str, Any], until: Callable[[], object]) -> None:
        """Once ready, create the object in the fake API and wait until it is being handled."""
        await self.ready()
        self.api.create_object("kopfexamples", obj)
        await self.wait_for(until)

    async def stop(self) -> float:
        """Request a graceful stop and wait until ``main()`` returns; when it did."""
        self.operator.stop()
        return await self.wait_until_finished()


@pytest.fixture
def start(
    nursery: trio.Nursery,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> Callable[..., Run]:
    def start(*, handle_signals: bool = False) -> Run:
        vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})
        operator = Operator(
            registry=registry, settings=settings, vault=vault, handle_signals=handle_signals
        )
        run = Run(operator, fake_api)
        nursery.start_soon(run.main)
        return run

    return start


@contextlib.asynccontextmanager
async def signals_guarded() -> AsyncIterator[None]:
    """Catch SIGINT/SIGTERM whenever the operator's own receiver is not installed.

    trio's receivers nest: the innermost one (the operator's, while it runs) gets the signal;
    outside of it, this one does, and nothing happens.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM):
        yield


def _blocking_create(
    registry: kopf.OperatorRegistry, seconds: float
) -> tuple[list[float], list[float]]:
    """A create handler sleeping for ``seconds``: when it started, and when it was cancelled."""
    started: list[float] = []
    cancelled: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        started.append(trio.current_time())
        try:
            await trio.sleep(seconds)
        finally:
            cancelled.append(trio.current_time())

    return started, cancelled


# --------------------------------------------------------------------------------- startup


async def test_startup_handlers_run_and_retry_before_any_api_call(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    start: Callable[..., Run],
) -> None:
    attempts: list[tuple[float, int]] = []

    @kopf.on.startup(id="startup_fn", registry=registry)
    async def startup_fn(retry: int, **_: Any) -> None:
        attempts.append((trio.current_time(), len(fake_api.requests)))
        if retry < 2:
            raise kopf.TemporaryError("not yet", delay=10)

    started_at = trio.current_time()
    run = start()
    await run.ready()
    # Three attempts 10 s apart, and not one request to the API before the last one ended.
    assert attempts == [(started_at, 0), (started_at + 10, 0), (started_at + 20, 0)]
    assert [r.path for r in fake_api.requests if "watch" in r.query] != []
    await run.stop()
    assert run.error is None


async def test_a_failing_startup_makes_no_api_calls_and_main_raises_the_reason(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    start: Callable[..., Run],
    logs: Any,
) -> None:
    cleaned: list[str] = []

    @kopf.on.startup(id="startup_fn", registry=registry)
    async def startup_fn(**_: Any) -> None:
        raise kopf.PermanentError("The database is unreachable.")

    @kopf.on.cleanup(registry=registry)
    async def cleanup_fn(**_: Any) -> None:
        cleaned.append("cleanup")

    run = start()
    await run.wait_until_finished()
    assert isinstance(run.error, kopf.ActivityError)  # the error itself, no ExceptionGroup
    assert "'startup_fn'" in str(run.error)
    [reason] = run.error.outcomes.values()
    assert isinstance(reason, kopf.PermanentError)
    assert str(reason) == "The database is unreachable."
    assert fake_api.requests == []
    assert not run.operator.ready_flag.is_set()
    assert cleaned == []  # nothing was started, so nothing is cleaned up
    assert logs.count("The database is unreachable.") >= 1


async def test_startup_handlers_change_the_settings_in_effect(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    start: Callable[..., Run],
) -> None:
    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.watching.server_timeout = 123
        settings.persistence.finalizer = "example.com/my-finalizer"

    @kopf.on.create("kopfexamples", registry=registry)
    async def create_fn(**_: Any) -> None:
        pass

    @kopf.on.delete("kopfexamples", registry=registry)
    async def delete_fn(**_: Any) -> None:
        pass

    run = start()
    await run.ready()
    fake_api.create_object(
        "kopfexamples",
        {"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "ex1"}},
        namespace="default",
    )

    def finalizers() -> list[str]:
        meta = fake_api.get_object("kopfexamples", "ex1", "default")["metadata"]
        return list(meta.get("finalizers", []))

    await run.wait_for(finalizers)
    assert finalizers() == ["example.com/my-finalizer"]
    watches = [r for r in fake_api.requests if r.query.get("watch") == "true"]
    assert watches
    assert {r.query.get("timeoutSeconds") for r in watches} == {"123"}
    assert settings.watching.server_timeout == 123  # the operator's own settings object
    await run.stop()


async def test_a_stop_during_the_startup_ends_the_operator_without_serving(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    start: Callable[..., Run],
    logs: Any,
) -> None:
    attempts: list[float] = []

    @kopf.on.startup(registry=registry)
    async def never_ready(**_: Any) -> None:
        attempts.append(trio.current_time())
        raise kopf.TemporaryError("not yet", delay=60)

    run = start()
    await run.wait_for(lambda: len(attempts) == 2)
    stopped_at = trio.current_time()
    ended_at = await run.stop()
    assert ended_at == pytest.approx(stopped_at, abs=0.05)
    assert run.error is None
    assert len(attempts) == 2
    assert fake_api.requests == []
    assert logs.count("Stop requested during the startup") == 1


# --------------------------------------------------------------------------------- cleanup


async def test_cleanup_runs_after_watchers_workers_and_the_last_handler_stopped(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    start: Callable[..., Run],
    obj: dict[str, Any],
) -> None:
    settings.queueing.exit_timeout = 10
    finished: list[float] = []
    seen: list[dict[str, Any]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> str:
        await trio.sleep(3)
        finished.append(trio.current_time())
        return "done"

    @kopf.on.cleanup(registry=registry)
    async def cleanup_fn(**_: Any) -> None:
        tasks = Running.tasks("")
        seen.append(
            {
                "time": trio.current_time(),
                "watchers": [n for n in tasks if n.startswith(("watcher ", "stream "))],
                "workers": [n for n in tasks if n.startswith("worker ")],
                "status": fake_api.get_object("kopfexamples", "kopf-example-1", "default").get(
                    "status", {}
                ),
            }
        )

    run = start()
    await run.serve(obj, Running.worker_tasks)
    await trio.sleep(1)
    await run.stop()

    assert len(finished) == 1
    [cleanup] = seen
    assert cleanup["time"] >= finished[0]
    assert cleanup["watchers"] == []
    assert cleanup["workers"] == []
    # The handler's outcome was patched to the object before the cleanup began.
    assert results(cleanup["status"]) == {"create_fn": "done"}


# ------------------------------------------------------------------------ signals: 2 phases


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_first_signal_stops_gracefully_and_a_running_handler_finishes(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    start: Callable[..., Run],
    obj: dict[str, Any],
    logs: Any,
    signum: signal.Signals,
) -> None:
    settings.queueing.exit_timeout = 10
    invoked: list[str] = []
    finished: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> str:
        invoked.append(name)
        await trio.sleep(3)
        finished.append(trio.current_time())
        return "done"

    async with signals_guarded():
        run = start(handle_signals=True)
        await run.serve(obj, lambda: invoked)
        signalled_at = trio.current_time()
        signal.raise_signal(signum)
        await run.wait_for(run.operator.stop_flag.is_set)
        # Watchers stop at once: an object created now is never handled.
        await trio.sleep(0.5)
        fake_api.create_object("kopfexamples", {**obj, "metadata": {"name": "late"}}, "default")
        ended_at = await run.wait_until_finished()

    assert run.error is None
    assert invoked == ["kopf-example-1"]
    assert finished == [pytest.approx(signalled_at + 3, abs=0.05)]
    assert ended_at == pytest.approx(signalled_at + 3, abs=0.05)
    status = fake_api.get_object("kopfexamples", "kopf-example-1", "default")["status"]
    assert results(status) == {"create_fn": "done"}
    assert "status" not in fake_api.get_object("kopfexamples", "late", "default")
    assert logs.count(f"Signal {signum.name} is received. Operator is stopping.") == 1
    assert logs.count("cancelling") == 0


async def test_a_running_handler_gets_only_the_exit_timeout_after_the_first_signal(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    start: Callable[..., Run],
    obj: dict[str, Any],
) -> None:
    settings.queueing.exit_timeout = 5
    started, cancelled = _blocking_create(registry, 100)

    async with signals_guarded():
        run = start(handle_signals=True)
        await run.serve(obj, lambda: started)
        signalled_at = trio.current_time()
        signal.raise_signal(signal.SIGTERM)
        ended_at = await run.wait_until_finished()

    assert cancelled == [pytest.approx(signalled_at + 5, abs=0.05)]
    assert ended_at == pytest.approx(signalled_at + 5, abs=0.05)
    assert "status" not in fake_api.get_object("kopfexamples", "kopf-example-1", "default")


async def test_second_signal_cancels_a_long_handler_now(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    start: Callable[..., Run],
    obj: dict[str, Any],
    logs: Any,
) -> None:
    settings.queueing.exit_timeout = 100
    started, cancelled = _blocking_create(registry, 1000)

    async with signals_guarded():
        run = start(handle_signals=True)
        await run.serve(obj, lambda: started)
        signal.raise_signal(signal.SIGINT)
        await run.wait_for(run.operator.stop_flag.is_set)
        await trio.sleep(2)
        assert not run.finished.is_set()  # still finishing gracefully
        second_at = trio.current_time()
        signal.raise_signal(signal.SIGINT)
        ended_at = await run.wait_until_finished()

    assert run.error is None
    assert cancelled == [pytest.approx(second_at, abs=0.05)]
    assert ended_at == pytest.approx(second_at, abs=0.05)
    logs.assert_in_order(
        "Signal SIGINT is received. Operator is stopping.", "Signal SIGINT again: cancelling now."
    )
    assert "status" not in fake_api.get_object("kopfexamples", "kopf-example-1", "default")


async def test_second_signal_cancels_the_cleanup_too(
    autojump_clock: Any,
    registry: kopf.OperatorRegistry,
    start: Callable[..., Run],
) -> None:
    cleanup: list[str] = []

    @kopf.on.cleanup(registry=registry)
    async def cleanup_fn(**_: Any) -> None:
        cleanup.append("started")
        await trio.sleep(50)  # within the cleanup's own limit (60 s)
        cleanup.append("finished")

    async with signals_guarded():
        run = start(handle_signals=True)
        await run.ready()
        signal.raise_signal(signal.SIGTERM)
        await run.wait_for(lambda: cleanup)
        await trio.sleep(1)
        second_at = trio.current_time()
        signal.raise_signal(signal.SIGTERM)
        ended_at = await run.wait_until_finished()

    assert cleanup == ["started"]
    assert ended_at == pytest.approx(second_at, abs=0.05)


# ------------------------------------------------------------------ ultimate exiting timeout


async def test_ultimate_exiting_timeout_cancels_a_slow_graceful_stop(
    autojump_clock: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    start: Callable[..., Run],
    obj: dict[str, Any],
    logs: Any,
) -> None:
    settings.queueing.exit_timeout = 100  # the graceful stop alone would take this long
    settings.process.ultimate_exiting_timeout = 30
    _, cancelled = _blocking_create(registry, 1000)

    run = start()
    await run.serve(obj, Running.worker_tasks)
    await trio.sleep(1)
    stopped_at = trio.current_time()
    ended_at = await run.stop()

    assert run.error is None
    assert logs.times(ULTIMATE) == [stopped_at + 30]
    [line] = [line for line in logs.lines if ULTIMATE in line.message]
    assert line.level == logging.ERROR
    assert line.message == (
        "The operator has not exited within 30 seconds after the stop request"
        f" ({ULTIMATE}): cancelling everything now."
    )
    assert cancelled == [stopped_at + 30]
    assert ended_at == pytest.approx(stopped_at + 30, abs=0.05)


async def test_ultimate_exiting_timeout_has_kopfs_default_of_10_minutes(
    autojump_clock: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    start: Callable[..., Run],
    obj: dict[str, Any],
    logs: Any,
) -> None:
    settings.queueing.exit_timeout = 1000

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        await trio.sleep(5000)

    run = start()
    await run.serve(obj, Running.worker_tasks)
    stopped_at = trio.current_time()
    run.operator.stop()
    await trio.sleep(590)  # one sleep, not 59,000 polls
    assert not run.finished.is_set()
    ended_at = await run.wait_until_finished()
    assert logs.times(ULTIMATE) == [stopped_at + 600]
    assert ended_at == pytest.approx(stopped_at + 600, abs=0.05)


async def test_ultimate_exiting_timeout_none_waits_for_the_graceful_stop(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    start: Callable[..., Run],
    obj: dict[str, Any],
    logs: Any,
) -> None:
    settings.queueing.exit_timeout = 2000
    settings.process.ultimate_exiting_timeout = None
    started: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> str:
        started.append(trio.current_time())
        await trio.sleep(1500)  # longer than Kopf's default ultimate timeout
        return "done"

    run = start()
    await run.serve(obj, lambda: started)
    run.operator.stop()
    await trio.sleep(started[0] + 1490 - trio.current_time())  # one sleep, not 149,000 polls
    assert not run.finished.is_set()
    ended_at = await run.wait_until_finished()
    assert ended_at == pytest.approx(started[0] + 1500, abs=0.05)
    status = fake_api.get_object("kopfexamples", "kopf-example-1", "default")["status"]
    assert results(status) == {"create_fn": "done"}
    assert logs.count(ULTIMATE) == 0


async def test_ultimate_exiting_timeout_set_by_a_startup_handler_bounds_the_cleanup(
    autojump_clock: Any,
    registry: kopf.OperatorRegistry,
    start: Callable[..., Run],
    logs: Any,
) -> None:
    cleanup: list[float] = []

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.process.ultimate_exiting_timeout = 20

    @kopf.on.cleanup(registry=registry)
    async def cleanup_fn(**_: Any) -> None:
        cleanup.append(trio.current_time())
        await trio.sleep(50)  # within the cleanup's own limit (60 s), beyond the ultimate one
        cleanup.append(trio.current_time())

    run = start()
    await run.ready()
    stopped_at = trio.current_time()
    ended_at = await run.stop()
    assert len(cleanup) == 1  # started, never finished
    assert logs.times(ULTIMATE) == [stopped_at + 20]
    assert ended_at == pytest.approx(stopped_at + 20, abs=0.05)


# ------------------------------------------------------------------ memory trimming


@pytest.mark.parametrize("interval", [60, None])
async def test_free_memory_is_handed_back_every_trim_interval_while_the_operator_runs(
    autojump_clock: Any,
    monkeypatch: pytest.MonkeyPatch,
    settings: kopf.OperatorSettings,
    start: Callable[..., Run],
    interval: float | None,
) -> None:
    trims: list[float] = []

    def trim() -> int:
        trims.append(trio.current_time())
        return 1

    monkeypatch.setattr(memory_trim, "libc_trimmer", lambda: trim)
    settings.process.memory_trim_interval = interval
    run = start()
    await run.ready()
    started = trio.current_time()
    await trio.sleep(200)
    await run.stop()
    await trio.sleep(200)  # stopped: no more trims

    assert run.error is None
    if interval is None:
        assert trims == []
    else:
        assert len(trims) == 3
        assert trims[0] <= started + 60
        assert [later - earlier for earlier, later in itertools.pairwise(trims)] == [
            pytest.approx(60, abs=0.05),
            pytest.approx(60, abs=0.05),
        ]


def test_memory_trim_interval_defaults_to_five_minutes() -> None:
    assert kopf.OperatorSettings().process.memory_trim_interval == 300
