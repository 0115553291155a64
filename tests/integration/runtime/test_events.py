"""Low-level event handlers: every event, once, in order, with errors ignored."""

from __future__ import annotations

from typing import Any

import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"


async def test_event_handlers_get_every_event_once_in_order(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    events: list[tuple[Any, str, Any]] = []

    @kopf.on.event("kopfexamples", id="event_fn", registry=registry)
    async def event_fn(type: Any, body: Any, name: str, **_: Any) -> None:
        events.append((type, name, body["spec"].get("field")))

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(**_: Any) -> None:
        pass

    fake_api.create_object(
        "kopfexamples",
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "metadata": {"name": "listed", "namespace": "default"},
            "spec": {"field": "old"},
        },
    )
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"].get("annotations", {}))
    for value in ["v1", "v2", "v3"]:
        running.patch({"spec": {"field": value}})
    await trio.sleep(10)
    running.delete()
    await running.wait_for(lambda: events[-1][0] == "DELETED")
    await trio.sleep(10)

    assert events[0] == (None, "listed", "old")  # from the initial listing
    ours = [(type_, field) for type_, name, field in events if name == "kopf-example-1"]
    assert ours[0] == ("ADDED", "value")
    assert ours[-1] == ("DELETED", "v3")
    # Every change is seen, in order, including those of our own patches (the diff-base).
    fields = [field for type_, field in ours if type_ == "MODIFIED"]
    assert fields[: fields.index("v1")] == ["value"] * fields.index("v1")
    assert [f for f in fields if f != "value"][:3] == ["v1", "v2", "v3"]


async def test_event_handlers_see_each_version_once_despite_consistency_waits(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    versions: list[str] = []

    @kopf.on.event("kopfexamples", id="event_fn", registry=registry)
    async def event_fn(meta: Any, **_: Any) -> None:
        versions.append(meta["resourceVersion"])

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        if retry < 2:
            raise kopf.TemporaryError("again", delay=1)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"].get("annotations", {}))
    await trio.sleep(10)
    assert len(versions) == len(set(versions))
    assert versions == sorted(versions, key=int)
    assert running.obj()["metadata"]["resourceVersion"] == versions[-1]


async def test_event_handler_errors_are_ignored(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    calls: list[str] = []

    @kopf.on.event("kopfexamples", id="broken", registry=registry)
    async def broken(**_: Any) -> None:
        calls.append("broken")
        raise ValueError("boom")

    @kopf.on.event("kopfexamples", id="fine", registry=registry)
    async def fine(**_: Any) -> None:
        calls.append("fine")

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        calls.append("create")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"].get("annotations", {}))
    await trio.sleep(10)
    assert calls[:3] == ["broken", "fine", "create"]
    assert logs.count("Handler 'broken' failed with an exception and will ignore it: boom") >= 1
    assert logs.count("Throttling") == 0
    # No retries for event handlers: each call is for a new event.
    assert calls.count("broken") == calls.count("fine")
