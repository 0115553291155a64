"""The newest state wins: new events interrupt sleeps; bursts of changes are handled as one."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"


def handled_spec(running: Any) -> Any:
    annotations = running.obj()["metadata"].get("annotations", {})
    return json.loads(annotations[DIFFBASE])["spec"] if DIFFBASE in annotations else None


async def test_new_events_interrupt_the_sleep_but_not_the_schedule(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    attempts: list[tuple[float, Any]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(retry: int, labels: Any, **_: Any) -> None:
        attempts.append((trio.current_time(), dict(labels)))
        if retry == 0:
            raise kopf.TemporaryError("later", delay=20)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(attempts) == 1)
    t0 = attempts[0][0]
    await trio.sleep(10)
    t1 = trio.current_time()
    running.patch({"metadata": {"labels": {"a": "changed"}}})
    await running.wait_for(lambda: handled_spec(running) is not None)

    # Woken up at 10 s, it slept again for the rest; the retry sees the newest state.
    assert [t - t0 for t, _ in attempts] == pytest.approx([0, 20], abs=1e-5)
    assert attempts[1][1] == {"a": "changed"}
    left = t0 + 20 - t1
    assert logs.times("Sleeping was interrupted by new changes") == [pytest.approx(t1)]
    assert logs.count(f"Sleeping was interrupted by new changes, {left:g} seconds left.") == 1
    assert logs.times(f"Sleeping for {left}") == [pytest.approx(t1)]


async def test_a_burst_of_changes_is_handled_as_the_newest_state(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[Any, Any]] = []

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(old: Any, new: Any, **_: Any) -> None:
        calls.append((old["spec"]["field"], new["spec"]["field"]))
        await trio.sleep(1)  # slow: the burst arrives while it runs

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled_spec(running) is not None)

    running.patch({"spec": {"field": "v1"}})
    await running.wait_for(lambda: len(calls) == 1)
    for value in ["v2", "v3", "v4", "v5"]:
        running.patch({"spec": {"field": value}})
        await trio.sleep(0.1)
    await running.wait_for(lambda: (handled_spec(running) or {}).get("field") == "v5")
    await trio.sleep(10)

    # Level-triggered: one call for the first change, one for the newest state after it.
    assert calls == [("value", "v1"), ("v1", "v5")]


async def test_a_burst_of_quick_changes_is_never_handled_twice_or_out_of_order(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[Any, Any]] = []

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(old: Any, new: Any, **_: Any) -> None:
        calls.append((old["spec"]["field"], new["spec"]["field"]))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled_spec(running) is not None)
    values = [f"v{i}" for i in range(1, 11)]
    for value in values:
        running.patch({"spec": {"field": value}})
    await running.wait_for(lambda: (handled_spec(running) or {}).get("field") == "v10")
    await trio.sleep(10)

    # However the events are batched, each call continues where the previous one ended,
    # in the order of the changes, and the last one sees the newest state.
    assert calls[-1][1] == "v10"
    assert [old for old, _ in calls] == ["value"] + [new for _, new in calls[:-1]]
    assert [new for _, new in calls] == sorted({new for _, new in calls}, key=values.index)
