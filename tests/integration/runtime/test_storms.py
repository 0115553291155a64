"""Event storms: what is queued for the workers stays bounded, and nothing a handler needs is lost.

The counters asserted here are the operator's own (``OperatorContext.queueing``): the event
bodies queued in the per-object mailboxes, now and at the peak.
"""

from __future__ import annotations

import json
from typing import Any

import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"


def make(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"n": 0},
    }


def handled_n(running: Any, name: str) -> Any:
    """The ``spec.n`` of the last state the change handlers finished (from the diff-base)."""
    annotations = running.obj(name)["metadata"].get("annotations", {})
    if DIFFBASE not in annotations:
        return None
    return json.loads(annotations[DIFFBASE])["spec"].get("n")


async def test_ten_thousand_updates_of_one_object_are_coalesced(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
) -> None:
    seen: list[Any] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def change_fn(new: Any, **_: Any) -> None:
        seen.append(new["spec"]["n"])
        await trio.sleep(1)  # slow: the storm goes on while it runs

    running = await run_operator()
    name = "stormy"
    running.create(make(name))
    last = 10_000
    for n in range(1, last + 1):
        running.patch({"spec": {"n": n}}, name=name)
        if n % 100 == 0:
            await trio.sleep(0.1)
    await running.wait_for(lambda: handled_n(running, name) == last)
    await trio.sleep(10)

    stats = running.operator.context.queueing
    assert seen[-1] == last  # the final state is handled
    assert seen == sorted(set(seen))  # each state at most once, in order
    assert len(seen) < 1000  # the storm is coalesced, not replayed one event at a time
    assert stats.peak == 1  # never more than the newest body of the one object
    assert stats.coalesced > 9000
    assert stats.held == 0


async def test_a_hundred_objects_with_a_hundred_updates_each_and_one_worker(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.queueing.worker_limit = 1
    settings.queueing.idle_timeout = 0.5
    settings.queueing.max_pending = 20
    events: dict[str, list[Any]] = {}
    changes: dict[str, list[Any]] = {}

    @kopf.on.event("kopfexamples", id="event_fn", registry=registry)
    async def event_fn(name: str, body: Any, **_: Any) -> None:
        events.setdefault(name, []).append(body["spec"]["n"])

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def change_fn(name: str, new: Any, **_: Any) -> None:
        changes.setdefault(name, []).append(new["spec"]["n"])

    running = await run_operator()
    names = [f"object-{i}" for i in range(100)]
    for name in names:
        running.create(make(name))
    rounds = 100
    for n in range(1, rounds + 1):
        for name in names:
            running.patch({"spec": {"n": n}}, name=name)
        await trio.sleep(0.01)

    stats = running.operator.context.queueing

    def all_handled() -> bool:
        return stats.held == 0 and all(changes.get(name, [0])[-1] == rounds for name in names)

    with trio.fail_after(100_000):
        while not all_handled():  # noqa: ASYNC110 -- rarely: each poll costs a scheduler pass
            await trio.sleep(1)
    await trio.sleep(10)

    for name in names:
        assert handled_n(running, name) == rounds
        # The change handlers see the final state, each state at most once, in order.
        assert changes[name][-1] == rounds
        assert changes[name] == sorted(set(changes[name]))
        # on.event handlers see every event (our own patches' events repeat a state).
        distinct = [n for i, n in enumerate(events[name]) if i == 0 or events[name][i - 1] != n]
        assert distinct == list(range(rounds + 1)), name
    assert stats.peak <= settings.queueing.max_pending
    assert stats.stalls > 0  # the stream was held back: the bound was reached, not avoided
    assert stats.held == 0
