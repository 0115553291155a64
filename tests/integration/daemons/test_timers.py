"""Timers: intervals, sharpness, idling, initial delays, errors, results and patches.

Times are asserted relative to the first call where the first call's moment depends on the
fake API's loopback I/O; between calls, only the mock clock moves, so the gaps are exact.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._engine.stoppers import DaemonStoppingReason

from .conftest import OBJ

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


def approx(value: float) -> Any:
    return pytest.approx(value, abs=0.05)


def gaps(times: list[float]) -> list[float]:
    return [round(later - earlier, 6) for earlier, later in itertools.pairwise(times)]


@pytest.mark.parametrize(
    ("sharp", "expected"),
    [
        pytest.param(False, [0.0, 1.3, 2.6, 3.9], id="regular"),
        pytest.param(True, [0.0, 1.0, 2.0, 3.0], id="sharp"),
    ],
)
async def test_interval_with_a_slow_handler(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    sharp: bool,
    expected: list[float],
) -> None:
    times: list[float] = []

    @kopf.timer("kopfexamples", id="tick", interval=1, sharp=sharp, registry=registry)
    async def tick(**_: Any) -> None:
        times.append(trio.current_time())
        await trio.sleep(0.3)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(times) >= 4)
    start = times[0]
    assert [round(t - start, 6) for t in times[:4]] == expected


async def test_sharp_timer_skips_the_ticks_it_missed_and_never_overlaps(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[str, float]] = []

    @kopf.timer("kopfexamples", id="tick", interval=1, sharp=True, registry=registry)
    async def tick(**_: Any) -> None:
        calls.append(("enter", trio.current_time()))
        await trio.sleep(2.5)
        calls.append(("exit", trio.current_time()))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(calls) >= 6)
    start = calls[0][1]
    assert [(kind, round(t - start, 6)) for kind, t in calls[:6]] == [
        ("enter", 0.0),
        ("exit", 2.5),
        ("enter", 3.0),
        ("exit", 5.5),
        ("enter", 6.0),
        ("exit", 8.5),
    ]


async def test_idle_time_is_reset_by_spec_changes_but_not_by_status_patches(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    times: list[float] = []

    @kopf.timer("kopfexamples", id="calm", idle=10, interval=3, registry=registry)
    async def calm(**_: Any) -> None:
        times.append(trio.current_time())

    running = await run_operator()
    running.create()
    await trio.sleep(4)
    running.patch({"status": {"something": "else"}})  # not essential: no reset
    running.patch({"metadata": {"annotations": {"kopf.zalando.org/touch-dummy": "x"}}})
    await running.wait_for(lambda: len(times) == 3)
    # Creation counts as a change: idle since the creation; then every interval while calm.
    assert times == [approx(10), approx(13), approx(16)]

    await trio.sleep(1.5)  # t=17.5
    running.patch({"spec": {"field": "changed"}})  # essential: calm again only at 27.5
    await running.wait_for(lambda: len(times) == 5)
    assert times[3:] == [approx(27.5), approx(30.5)]

    await trio.sleep(1)  # t=31.5
    running.patch({"metadata": {"labels": {"a": "c"}}})  # labels are essential too
    await running.wait_for(lambda: len(times) == 6)
    assert times[5] == approx(41.5)


async def test_idle_only_timer_runs_once_per_calm_period(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    times: list[float] = []

    @kopf.timer("kopfexamples", id="calm", idle=5, registry=registry)
    async def calm(**_: Any) -> None:
        times.append(trio.current_time())

    running = await run_operator()
    running.create()
    await trio.sleep(50)
    assert times == [approx(5)]
    running.patch({"spec": {"field": "changed"}})
    await trio.sleep(50)
    assert times == [approx(5), approx(55)]


@pytest.mark.parametrize(
    ("initial_delay", "expected"),
    [
        pytest.param(5, 5.0, id="number"),
        pytest.param(lambda spec, **_: spec["delay"], 7.5, id="callable"),
    ],
)
async def test_initial_delay_then_interval(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    initial_delay: Any,
    expected: float,
) -> None:
    times: list[float] = []

    @kopf.timer(
        "kopfexamples", id="tick", interval=2, initial_delay=initial_delay, registry=registry
    )
    async def tick(**_: Any) -> None:
        times.append(trio.current_time())

    running = await run_operator()
    body = copy.deepcopy(OBJ)
    body["spec"]["delay"] = 7.5
    running.create(body)
    await running.wait_for(lambda: len(times) >= 3)
    assert times[0] == approx(expected)
    assert gaps(times[:3]) == [2.0, 2.0]


async def test_initial_delay_combined_with_idle_and_interval(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    times: list[float] = []

    @kopf.timer(
        "kopfexamples", id="tick", initial_delay=20, idle=30, interval=10, registry=registry
    )
    async def tick(**_: Any) -> None:
        times.append(trio.current_time())

    running = await run_operator()
    running.create()
    await trio.sleep(15)
    running.patch({"spec": {"field": "changed"}})  # during the initial delay
    await running.wait_for(lambda: len(times) >= 2)
    # The initial delay is over at 20, but the object was changed at 15: idle until 45.
    assert times[0] == approx(45)
    assert gaps(times[:2]) == [10.0]


async def test_errors_override_the_schedule(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[float, int]] = []

    @kopf.timer(
        "kopfexamples",
        id="tick",
        errors=kopf.ErrorsMode.TEMPORARY,
        interval=10,
        backoff=5,
        registry=registry,
    )
    async def tick(retry: int, **_: Any) -> None:
        calls.append((trio.current_time(), retry))
        if retry < 3:
            raise ValueError("not yet")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(calls) >= 6)
    start = calls[0][0]
    # 3 failures 5 s apart, a success, the interval, and a new round from retry 0.
    assert [(round(t - start, 6), retry) for t, retry in calls[:6]] == [
        (0.0, 0),
        (5.0, 1),
        (10.0, 2),
        (15.0, 3),
        (25.0, 0),
        (30.0, 1),
    ]


async def test_temporary_error_delay_and_permanent_error(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    calls: list[float] = []

    @kopf.timer("kopfexamples", id="tick", interval=100, registry=registry)
    async def tick(retry: int, **_: Any) -> None:
        calls.append(trio.current_time())
        if retry == 0:
            raise kopf.TemporaryError("soon", delay=3)
        raise kopf.PermanentError("never again")

    running = await run_operator()
    running.create()
    await trio.sleep(1000)
    assert gaps(calls) == [3.0]  # then stopped for good, not called every 100 s
    assert logs.count("'tick' has failed permanently and stops for good.") == 1
    assert running.daemons() == []


async def test_results_and_patches_are_applied_per_iteration(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    counter = iter(range(100))

    @kopf.timer("kopfexamples", id="tick", interval=10, registry=registry)
    async def tick(patch: kopf.Patch, **_: Any) -> dict[str, int]:
        value = next(counter)
        patch.status["last"] = value
        patch.fns.append(lambda body: body["status"].setdefault("all", []).append(value))
        return {"value": value}

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: running.obj().get("status", {}).get("last") == 0)
    status = running.obj()["status"]
    assert status["tick"] == {"value": 0}
    assert status["all"] == [0]
    await running.wait_for(lambda: running.obj().get("status", {}).get("last") == 2)
    status = running.obj()["status"]
    assert status["tick"] == {"value": 2}
    assert status["all"] == [0, 1, 2]


async def test_rejected_transformations_are_carried_to_the_next_iteration(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    pending: list[bool] = []

    @kopf.timer("kopfexamples", id="tick", interval=10, initial_delay=5, registry=registry)
    async def tick(patch: kopf.Patch, retry: int, **_: Any) -> None:
        pending.append(bool(patch))
        if len(pending) == 1:
            patch.fns.append(lambda body: body.setdefault("status", {}).update(done=True))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: FINALIZER in running.obj()["metadata"].get("finalizers", []))
    fake_api.inject("PATCH", "/apis/kopf.dev/v1/namespaces/*/kopfexamples/*", status=422, times=1)
    await running.wait_for(lambda: len(pending) >= 2)
    await running.wait_for(lambda: running.obj().get("status", {}).get("done"))
    # The second call sees the function that was rejected after the first one.
    assert pending[:2] == [False, True]


async def test_one_shot_timer_without_interval_or_idle(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    times: list[float] = []

    @kopf.timer("kopfexamples", id="once", registry=registry)
    async def once(**_: Any) -> None:
        times.append(trio.current_time())

    running = await run_operator()
    running.create()
    await trio.sleep(100)
    running.patch({"spec": {"field": "changed"}})
    await trio.sleep(100)
    assert len(times) == 1


async def test_sync_timer_and_its_stop_on_deletion(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    reasons: list[Any] = []

    @kopf.timer("kopfexamples", id="tick", interval=1, registry=registry)
    def tick(stopped: Any, **_: Any) -> str:
        reasons.append(stopped.reason)
        return "ticked"

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: running.obj().get("status", {}).get("tick") == "ticked")
    running.delete()
    await running.wait_for(lambda: not running.exists())
    await running.wait_for(lambda: not running.daemons())
    assert set(reasons) == {None}
    count = len(reasons)
    await trio.sleep(10)
    assert len(reasons) == count


async def test_timer_stops_at_once_on_deletion_even_mid_interval(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    times: list[float] = []

    @kopf.timer("kopfexamples", id="tick", interval=60, registry=registry)
    async def tick(**_: Any) -> None:
        times.append(trio.current_time())

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: times and FINALIZER in running.obj()["metadata"]["finalizers"])
    await trio.sleep(10)
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert trio.current_time() == approx(10)
    assert len(times) == 1


async def test_timer_flag_reason_on_operator_exit(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: list[Any] = []

    @kopf.timer("kopfexamples", id="tick", interval=5, registry=registry)
    async def tick(stopped: Any, **_: Any) -> None:
        await stopped.wait(100)
        seen.append((trio.current_time(), stopped.reason))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: running.daemons())
    await trio.sleep(7)
    await running.stop()
    assert seen == [(approx(7), DaemonStoppingReason.OPERATOR_EXITING)]
