"""Deletion: finalizers, delete handlers, and the object finally disappearing."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trioperator as kopf

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
DIFFBASE = "kopf.zalando.org/last-handled-configuration"


def is_handled(running: Any) -> bool:
    return DIFFBASE in running.obj()["metadata"].get("annotations", {})


async def test_finalizer_first_then_create_then_delete_then_released(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    events: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(meta: Any, **_: Any) -> None:
        events.append(f"create with finalizers={list(meta.get('finalizers', []))}")

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(meta: Any, **_: Any) -> None:
        events.append(f"delete at {meta.get('deletionTimestamp') is not None}")

    running = await run_operator()
    created = running.create()
    await running.wait_for(lambda: is_handled(running))

    # The very first write is the finalizer alone, as a JSON-patch guarded by the version.
    # The create handler runs only in the next cycle, with the finalizer already in place.
    writes = running.writes()
    assert writes[0] == (
        "PATCH",
        "",
        [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": created["metadata"]["resourceVersion"],
            },
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ],
    )
    assert events == [f"create with finalizers={[FINALIZER]}"]
    logs.assert_in_order(
        "Adding the finalizer, thus preventing the actual deletion.",
        "Creation is in progress:",
    )

    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert events[1:] == ["delete at True"]
    # The last write removes the finalizer (JSON-patch, guarded by the version).
    method, sub, ops = running.writes()[-1]
    assert (method, sub) == ("PATCH", "")
    assert ops[0]["op"] == "test"
    assert ops[0]["path"] == "/metadata/resourceVersion"
    assert ops[1:] == [{"op": "remove", "path": "/metadata/finalizers"}]
    logs.assert_in_order(
        "Deletion is in progress:",
        "Handler 'delete_fn' is invoked.",
        "Handler 'delete_fn' succeeded.",
        "Deletion is processed: 1 succeeded; 0 failed.",
        "Removing the finalizer, thus allowing the actual deletion.",
    )
    # No consistency waiting for a deleted object: it is forgotten at once.
    await running.wait_for(lambda: logs.count("Deleted, really deleted, and we are notified."), 1)


async def test_only_optional_delete_handlers_need_no_finalizer(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        pass

    @kopf.on.delete("kopfexamples", id="delete_fn", optional=True, registry=registry)
    async def delete_fn(**_: Any) -> None:
        pass

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: is_handled(running))
    assert "finalizers" not in running.obj()["metadata"]
    assert all(not isinstance(body, list) for _, _, body in running.writes())  # no JSON-patches

    running.delete()
    await trio.sleep(1)
    assert not running.exists()


async def test_stale_finalizer_is_removed_when_no_handler_requires_it(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    calls: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        calls.append("create")

    running = await run_operator()
    running.create(finalizers=[FINALIZER, "example.com/other"])
    await running.wait_for(lambda: is_handled(running))
    assert running.obj()["metadata"]["finalizers"] == ["example.com/other"]
    assert calls == ["create"]
    ops = running.writes()[0][2]
    assert ops[1:] == [{"op": "remove", "path": "/metadata/finalizers/0"}]
    logs.assert_in_order(
        "Removing the finalizer, as there are no handlers requiring it.",
        "Creation is in progress:",
    )


async def test_failing_delete_handler_keeps_the_object_until_it_succeeds(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    attempts: list[float] = []

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(**_: Any) -> None:
        attempts.append(trio.current_time())
        if len(attempts) < 3:
            raise kopf.TemporaryError("not yet", delay=10)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: FINALIZER in running.obj()["metadata"].get("finalizers", []))
    running.delete()
    await running.wait_for(lambda: len(attempts) == 2)
    assert running.exists()
    assert running.obj()["metadata"]["finalizers"] == [FINALIZER]
    await running.wait_for(lambda: not running.exists())
    # Timestamps are stored with microseconds: the times are exact to that precision.
    assert [t - attempts[0] for t in attempts] == pytest.approx([0, 10, 20], abs=1e-5)


async def test_deletion_supersedes_an_unfinished_creation(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        raise kopf.TemporaryError("never ready", delay=100)

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(**_: Any) -> None:
        pass

    running = await run_operator()
    running.create()
    await running.wait_for(
        lambda: "kopf.zalando.org/create_fn" in running.obj()["metadata"].get("annotations", {})
    )
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert (
        logs.count(
            "Creation is superseded by deletion: 0 succeeded; 0 failed; 1 left to the moment."
        )
        == 1
    )


async def test_delete_handler_does_not_run_again_for_the_states_around_the_release(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, watch_gate: Any
) -> None:
    # The last cycle purges the progress (a merge-patch: a MODIFIED event still showing our
    # finalizer), then removes the finalizer (the object vanishes; the PATCH response has the
    # same resourceVersion as that MODIFIED event). A lagging stream delivers them apart.
    calls: list[float] = []

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(retry: int, **_: Any) -> None:
        calls.append(trio.current_time())
        if retry == 0:
            raise kopf.TemporaryError("once more", delay=1)
        watch_gate.hold()

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: FINALIZER in running.obj()["metadata"].get("finalizers", []))
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert len(watch_gate.held) == 2  # MODIFIED (the purge), DELETED
    watch_gate.release(1)
    await trio.sleep(10)
    watch_gate.release(stop_holding=True)
    await trio.sleep(10)
    assert len(calls) == 2
