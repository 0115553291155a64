"""Objects that none of the filtered change handlers takes in are left alone (Kopf's "stealth
mode"), so that when they start to match, that is their creation."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


async def test_unmatched_object_is_untouched_then_created_when_it_matches(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    ran: list[str] = []
    events: list[str] = []

    # The handlers are async: a sync one runs in a worker thread, which the autojump clock does
    # not wait for, so the sleeps below would not show that no handler runs (one could still be
    # in its thread when they end).
    # An unfiltered on.event handler: the operator sees every object (no label selector on
    # the watch), so the change handlers' filters decide client-side.
    @kopf.on.event("kopfexamples", registry=registry)
    async def spied(type: str, **_: Any) -> None:
        events.append(type)

    @kopf.on.create("kopfexamples", labels={"app": "x"}, registry=registry)
    async def created(**_: Any) -> None:
        ran.append("create")

    @kopf.on.update("kopfexamples", labels={"app": "x"}, registry=registry)
    async def updated(**_: Any) -> None:
        ran.append("update")

    @kopf.on.delete("kopfexamples", labels={"app": "x"}, registry=registry)
    async def deleted(**_: Any) -> None:
        ran.append("delete")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: events != [])  # seen, and then nothing else
    await trio.sleep(30)
    metadata = running.obj()["metadata"]
    assert ran == []
    assert running.writes() == []
    assert DIFFBASE not in (metadata.get("annotations") or {})
    assert "finalizers" not in metadata

    running.patch({"metadata": {"labels": {"app": "x"}}})
    await running.wait_for(lambda: ran != [])
    await running.wait_for(lambda: DIFFBASE in (running.obj()["metadata"].get("annotations") or {}))
    await trio.sleep(30)
    assert ran == ["create"]
    assert running.obj()["metadata"]["finalizers"] == [FINALIZER]


async def test_object_that_stops_matching_keeps_no_finalizer_and_is_not_handled(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    ran: list[str] = []

    # Async, so that a run started wrongly is over when the object is gone (the autojump clock
    # does not wait for a sync handler's worker thread).
    @kopf.on.update("kopfexamples", labels={"app": "x"}, registry=registry)
    async def updated(**_: Any) -> None:
        ran.append("update")

    @kopf.on.delete("kopfexamples", labels={"app": "x"}, registry=registry)
    async def deleted(**_: Any) -> None:
        ran.append("delete")

    running = await run_operator()
    running.create(labels={"app": "x"})
    await running.wait_for(lambda: running.obj()["metadata"].get("finalizers") == [FINALIZER])
    await running.wait_for(lambda: DIFFBASE in (running.obj()["metadata"].get("annotations") or {}))

    running.patch({"metadata": {"labels": {"app": None}}, "spec": {"field": "changed"}})
    await running.wait_for(lambda: not running.obj()["metadata"].get("finalizers"))
    await trio.sleep(30)
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert ran == []


async def test_when_filter_sees_the_cause_kwargs(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: list[tuple[str, bool]] = []

    def interesting(reason: str, spec: Any, **_: Any) -> bool:
        seen.append((reason, spec.get("field") == "wanted"))
        return bool(spec.get("field") == "wanted")

    ran: list[str] = []

    # Async, for the sleep to show that it does not run (a sync handler's worker thread is not
    # waited for by the autojump clock).
    @kopf.on.create("kopfexamples", when=interesting, registry=registry)
    async def created(**_: Any) -> None:
        ran.append("create")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: ("create", False) in seen)  # the creation was filtered out
    await trio.sleep(30)
    assert ran == []
    assert running.writes() == []

    running.patch({"spec": {"field": "wanted"}})
    await running.wait_for(lambda: ran != [])
    assert ran == ["create"]


async def test_deletion_of_an_unmatched_object_is_not_logged(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="trioperator")
    seen: list[str] = []

    @kopf.on.event("kopfexamples", registry=registry)
    def spied(name: str, type: str, **_: Any) -> None:
        seen.append(f"{type} {name}")

    @kopf.on.update("kopfexamples", labels={"app": "x"}, registry=registry)
    def updated(**_: Any) -> None:
        pass

    running = await run_operator()
    running.create(name="kopf-unmatched")
    running.create(name="kopf-matched", labels={"app": "x"})
    await running.wait_for(lambda: {"ADDED kopf-unmatched", "ADDED kopf-matched"} <= set(seen))
    await trio.sleep(30)
    running.delete("kopf-unmatched")
    running.delete("kopf-matched")
    await running.wait_for(
        lambda: "DELETED kopf-unmatched" in seen and "DELETED kopf-matched" in seen
    )
    await trio.sleep(30)

    seen_off = [
        record.k8s_ref["name"]  # type: ignore[attr-defined]
        for record in caplog.records
        if record.getMessage() == "Deleted, really deleted, and we are notified."
    ]
    # Only the object that a change handler takes in is seen off, as in Kopf.
    assert seen_off == ["kopf-matched"]
