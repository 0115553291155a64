"""Patching: handlers' merge-patches, results, and transformation functions with 422 retention."""

from __future__ import annotations

import json
from typing import Any

import trio
import trioperator as kopf
from tests.integration.conftest import results

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
DIFFBASE = "kopf.zalando.org/last-handled-configuration"
OBJ_PATH = "/apis/kopf.dev/v1/namespaces/default/kopfexamples/kopf-example-1"


def add_cleanup_finalizer(body: kopf.RawBody, /) -> None:
    finalizers = body.setdefault("metadata", {}).setdefault("finalizers", [])
    if "example.com/cleanup" not in finalizers:
        finalizers.append("example.com/cleanup")


def json_patches(running: Any) -> list[list[dict[str, Any]]]:
    return [body for _, _, body in running.writes() if isinstance(body, list)]


async def test_handler_patches_and_results_go_into_one_cycle(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(patch: kopf.Patch, **_: Any) -> dict[str, Any]:
        patch.spec["greeting"] = "hello"
        patch.metadata.labels["handled"] = "yes"
        patch.status["phase"] = "initialized"
        patch.fns.append(add_cleanup_finalizer)
        return {"answer": 42}

    running = await run_operator()
    running.create()
    await running.wait_for(
        lambda: "example.com/cleanup" in running.obj()["metadata"].get("finalizers", [])
    )
    obj = running.obj()
    assert obj["spec"]["greeting"] == "hello"
    assert obj["metadata"]["labels"] == {"a": "b", "handled": "yes"}
    assert results(obj["status"]) == {"phase": "initialized", "create_fn": {"answer": 42}}
    # As in Kopf, the handled state is the one the handler saw: its own spec/label changes
    # come back as an essential change (an update, here without handlers: just stored).
    methods = [(method, sub, type(body).__name__) for method, sub, body in running.writes()]
    assert methods == [
        ("PATCH", "/status", "dict"),
        ("PATCH", "", "dict"),
        ("PATCH", "", "list"),
        ("PATCH", "", "dict"),
    ]
    essence = json.loads(running.obj()["metadata"]["annotations"][DIFFBASE])
    assert essence["spec"]["greeting"] == "hello"


async def test_rejected_json_patch_keeps_its_functions_for_the_next_cycle(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    fake_api: Any,
    logs: Any,
) -> None:
    calls: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(patch: kopf.Patch, **_: Any) -> None:
        calls.append(trio.current_time())
        patch.fns.append(add_cleanup_finalizer)
        # The body merge-patch and the JSON-patch after it are slow: someone changes the
        # object in between, so the JSON-patch's test of the resourceVersion fails (422).
        fake_api.inject("PATCH", OBJ_PATH, delay=1, times=2)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(calls) == 1)
    await trio.sleep(1.5)
    running.patch({"metadata": {"labels": {"someone": "else"}}})
    await running.wait_for(
        lambda: "example.com/cleanup" in running.obj()["metadata"].get("finalizers", [])
    )
    patches = json_patches(running)
    assert len(patches) == 2
    assert (
        patches[0][1:]
        == patches[1][1:]
        == [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/cleanup"]}]
    )
    assert int(patches[1][0]["value"]) > int(patches[0][0]["value"])  # against the newer state
    assert calls == [calls[0]]  # the handler is not repeated for that
    assert logs.count("JSON-patch was rejected") == 1
    assert running.obj()["metadata"]["labels"] == {"a": "b", "someone": "else"}


async def test_rejected_finalizer_is_added_in_the_next_cycle_before_any_handler(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    calls: list[list[str]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(meta: Any, **_: Any) -> None:
        calls.append(list(meta.get("finalizers", [])))

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(**_: Any) -> None:
        pass

    fake_api.inject("PATCH", OBJ_PATH, delay=1, times=1)
    running = await run_operator()
    running.create()
    await trio.sleep(0.5)
    running.patch({"metadata": {"labels": {"someone": "else"}}})
    await running.wait_for(lambda: bool(calls))
    assert calls == [[FINALIZER]]
    patches = json_patches(running)
    assert len(patches) == 2
    assert patches[0][1:] == patches[1][1:]
    assert int(patches[1][0]["value"]) > int(patches[0][0]["value"])


async def test_event_handlers_can_patch_too(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    @kopf.on.event("kopfexamples", id="event_fn", registry=registry)
    async def event_fn(patch: kopf.Patch, labels: Any, **_: Any) -> None:
        if "seen" not in labels:
            patch.metadata.labels["seen"] = "yes"

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: running.obj()["metadata"]["labels"].get("seen") == "yes")
    await trio.sleep(10)
    assert running.writes() == [("PATCH", "", {"metadata": {"labels": {"seen": "yes"}}})]
