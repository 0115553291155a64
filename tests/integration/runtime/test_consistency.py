"""Consistency: change handlers never act on a state older than the framework's own last patch."""

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


def lag_during_v2(running: Any, watch_gate: Any, new: Any) -> None:
    """While the handler runs for v2, someone sets v3, and the stream starts lagging."""
    if new["spec"]["field"] == "v2":
        watch_gate.hold()
        running.patch({"spec": {"field": "v3"}})


async def _lagging_stream_scenario(
    running: Any, watch_gate: Any, *, release_ours_after: float | None
) -> float:
    """v1 -> v2 (seen) -> v3 (held back), our patch for v2 (held back); then release them apart.

    Returns the time when the stale state (v3 without our patch) was released.
    """
    running.create()
    await running.wait_for(lambda: handled_spec(running) is not None)
    running.patch({"spec": {"field": "v2"}})
    await running.wait_for(lambda: (handled_spec(running) or {}).get("field") == "v2")
    assert len(watch_gate.held) == 2  # v3 by someone else, then our diff-base patch for v2
    watch_gate.release(1)  # v3 as it was before our patch: our diff-base for v2 is not there
    released = trio.current_time()
    if release_ours_after is not None:
        await trio.sleep(release_ours_after)
        watch_gate.release(stop_holding=True)
    else:
        watch_gate.drop()
        watch_gate.holding = False
    return released


async def test_stale_states_are_not_handled_until_our_patch_arrives(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, watch_gate: Any
) -> None:
    calls: list[tuple[Any, Any, float]] = []

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(old: Any, new: Any, **_: Any) -> None:
        calls.append((old["spec"]["field"], new["spec"]["field"], trio.current_time()))
        lag_during_v2(running, watch_gate, new)

    running = await run_operator()
    released = await _lagging_stream_scenario(running, watch_gate, release_ours_after=3)
    await running.wait_for(lambda: (handled_spec(running) or {}).get("field") == "v3")
    await trio.sleep(10)
    # Without the waiting, v3 would be handled as a change from v1 (v2 handled twice).
    assert [(old, new) for old, new, _ in calls] == [("value", "v2"), ("v2", "v3")]
    assert calls[1][2] == pytest.approx(released + 3)


async def test_consistency_is_assumed_after_the_timeout(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    watch_gate: Any,
    logs: Any,
) -> None:
    settings.persistence.consistency_timeout = 7
    calls: list[tuple[Any, Any, float]] = []
    patched: list[float] = []

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(old: Any, new: Any, **_: Any) -> None:
        calls.append((old["spec"]["field"], new["spec"]["field"], trio.current_time()))
        lag_during_v2(running, watch_gate, new)
        patched.append(trio.current_time())  # the patch is applied right after, at this time

    running = await run_operator()
    await _lagging_stream_scenario(running, watch_gate, release_ours_after=None)
    await running.wait_for(lambda: len(calls) == 2)
    # Our version never arrives: the stale state is handled when the timeout has passed
    # (with what it holds: this is why the timeout must be long enough).
    assert calls[1][:2] == ("value", "v3")
    assert calls[1][2] == pytest.approx(patched[0] + 7)
    assert logs.count("Consistency is assumed") == 1


async def test_zero_consistency_timeout_disables_the_waiting(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    watch_gate: Any,
) -> None:
    settings.persistence.consistency_timeout = 0
    calls: list[tuple[Any, Any, float]] = []

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(old: Any, new: Any, **_: Any) -> None:
        calls.append((old["spec"]["field"], new["spec"]["field"], trio.current_time()))
        lag_during_v2(running, watch_gate, new)

    running = await run_operator()
    released = await _lagging_stream_scenario(running, watch_gate, release_ours_after=3)
    await running.wait_for(lambda: len(calls) >= 2)
    assert calls[1][:2] == ("value", "v3")  # the stale state is handled at once
    assert calls[1][2] == pytest.approx(released, abs=0.05)


async def test_low_level_handlers_do_not_wait_for_consistency(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, watch_gate: Any
) -> None:
    calls: list[tuple[Any, Any, float]] = []
    events: list[tuple[Any, float]] = []

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(old: Any, new: Any, **_: Any) -> None:
        calls.append((old["spec"]["field"], new["spec"]["field"], trio.current_time()))
        lag_during_v2(running, watch_gate, new)

    @kopf.on.event("kopfexamples", id="event_fn", registry=registry)
    async def event_fn(body: Any, meta: Any, **_: Any) -> None:
        events.append((body["spec"].get("field"), trio.current_time()))
        versions.append(meta["resourceVersion"])

    versions: list[str] = []
    running = await run_operator()
    released = await _lagging_stream_scenario(running, watch_gate, release_ours_after=3)
    await running.wait_for(lambda: len(calls) == 2)
    assert next(time for field, time in events if field == "v3") == pytest.approx(
        released, abs=0.05
    )
    # Each event once, also when a consistency wait was interrupted by a new event.
    assert len(versions) == len(set(versions))


async def test_writes_that_change_nothing_are_not_awaited(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[float] = []

    @kopf.on.event("kopfexamples", id="event_fn", registry=registry)
    async def event_fn(patch: kopf.Patch, **_: Any) -> None:
        patch.status["seen"] = "yes"  # the same on every event: a no-op after the 1st

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(**_: Any) -> None:
        calls.append(trio.current_time())

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled_spec(running) is not None)
    await trio.sleep(1)  # less than the consistency timeout
    changed_at = trio.current_time()
    running.patch({"spec": {"field": "changed"}})
    await running.wait_for(lambda: bool(calls))
    # Handled at once: not after a consistency timeout for a version that never comes.
    assert len(calls) == 1
    assert calls[0] - changed_at < 0.1


async def test_our_own_status_write_is_never_taken_for_the_consistent_state(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    watch_gate: Any,
    logs: Any,
) -> None:
    # A creation's result goes to the status first, then the marks to the body. If the stream
    # lags past the consistency timeout with only the status write delivered, that state has
    # the result but not the marks: it must not be handled as a new creation (which would run
    # the handler and write both again), however long the body's version takes.
    settings.persistence.consistency_timeout = 5
    calls: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, str]:
        calls.append(trio.current_time())
        watch_gate.hold()  # our two writes are held back from here on
        return {"done": "yes"}

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(watch_gate.held) == 2)
    watch_gate.release(1)  # the status write only
    await trio.sleep(30)  # six consistency timeouts, and the idle timeout of the worker
    watch_gate.release(stop_holding=True)  # the body write, at last
    await running.wait_for(lambda: logs.count("Something has changed") >= 1)
    await trio.sleep(10)
    assert len(calls) == 1
    assert [(method, sub) for method, sub, _ in running.writes()] == [
        ("PATCH", "/status"),
        ("PATCH", ""),
    ]
    assert running.obj()["status"]["create_fn"] == {"done": "yes"}
    assert handled_spec(running) is not None
    assert logs.count("Consistency is assumed") == 0
