"""Objects are isolated from each other; unexpected errors throttle only the object concerned."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
PATH_A = "/apis/kopf.dev/v1/namespaces/default/kopfexamples/object-a"


def handled(running: Any, name: str) -> bool:
    return DIFFBASE in running.obj(name)["metadata"].get("annotations", {})


async def test_a_failing_handler_of_one_object_does_not_affect_another(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[str, float]] = []

    @kopf.on.create("kopfexamples", id="create_fn", backoff=10, registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        calls.append((name, trio.current_time()))
        if name == "object-a":
            await trio.sleep(3)
            raise ValueError("A is broken")

    running = await run_operator()
    running.create(name="object-a")
    running.create(name="object-b")
    await running.wait_for(lambda: handled(running, "object-b"))
    t_b = trio.current_time()
    assert [name for name, _ in calls] == ["object-a", "object-b"]
    assert calls[1][1] - calls[0][1] < 0.1  # B did not wait for A's slow handler
    await trio.sleep(30)
    assert not handled(running, "object-a")
    assert [name for name, _ in calls].count("object-a") == 3  # at 0, 13, 26
    assert t_b < 1


@pytest.mark.parametrize("status", [500, 403])
async def test_api_errors_throttle_the_object_at_the_configured_delays(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    fake_api: Any,
    logs: Any,
    status: int,
) -> None:
    settings.networking.error_backoffs = []  # no retries in the client: escalate at once
    settings.queueing.error_delays = (1, 2, 5)
    calls: list[tuple[str, float]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        calls.append((name, trio.current_time()))

    injection = fake_api.inject("PATCH", PATH_A, status=status, times=None)
    running = await run_operator()
    running.create(name="object-a")
    await running.wait_for(lambda: len(logs.times("Throttling for")) == 4)
    t0 = calls[0][1]

    # Other objects are served meanwhile.
    running.create(name="object-b")
    await running.wait_for(lambda: handled(running, "object-b"))
    assert trio.current_time() - t0 < 10

    fake_api.remove_injection(injection)
    await running.wait_for(lambda: handled(running, "object-a"))

    throttles = [
        (line.time, line.message) for line in logs.lines if "Throttling for" in line.message
    ]
    assert [time - t0 for time, _ in throttles] == pytest.approx([0, 1, 3, 8], abs=1e-5)
    assert [message.split(" due to")[0] for _, message in throttles] == [
        "[default/object-a] Throttling for 1 seconds",
        "[default/object-a] Throttling for 2 seconds",
        "[default/object-a] Throttling for 5 seconds",
        "[default/object-a] Throttling for 5 seconds",
    ]
    assert all("due to an unexpected error" in message for _, message in throttles)
    # Each retry processes the object anew (nothing was stored), up to the success at 13 s.
    times_a = [time - t0 for name, time in calls if name == "object-a"]
    assert times_a == pytest.approx([0, 1, 3, 8, 13], abs=1e-5)
    assert (
        logs.count("[default/object-a] Throttling is over. Switching back to normal operations.")
        == 1
    )
    assert [name for name, _ in calls].count("object-b") == 1


async def test_a_failed_touch_is_throttled_and_the_delayed_handler_still_runs(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    fake_api: Any,
    logs: Any,
) -> None:
    settings.networking.error_backoffs = []
    settings.queueing.error_delays = (2,)
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        attempts.append(trio.current_time())
        if retry == 0:
            raise kopf.TemporaryError("later", delay=5)

    running = await run_operator()
    running.create(name="object-a")
    await running.wait_for(
        lambda: (
            "kopf.zalando.org/create_fn"
            in running.obj("object-a")["metadata"].get("annotations", {})
        )
    )
    fake_api.inject("PATCH", PATH_A, status=500, times=1)  # the touch-dummy after the sleep
    await running.wait_for(lambda: handled(running, "object-a"))
    assert [t - attempts[0] for t in attempts] == pytest.approx([0, 7], abs=1e-5)
    assert logs.times("Throttling for 2 seconds") == [pytest.approx(attempts[0] + 5, abs=1e-5)]
