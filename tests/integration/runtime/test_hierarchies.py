"""The hierarchies kit inside real handlers: the owner is the object being handled."""

from __future__ import annotations

from typing import Any

import trioperator as kopf


async def test_adopt_in_sync_and_async_handlers_finds_the_handled_object(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    children: dict[str, dict[str, Any]] = {}

    @kopf.on.create("kopfexamples", id="sync_fn", registry=registry)
    def sync_fn(**_: Any) -> None:  # runs in a worker thread
        child: dict[str, Any] = {"kind": "Pod"}
        kopf.adopt(child)
        children["sync"] = child

    @kopf.on.create("kopfexamples", id="async_fn", registry=registry)
    async def async_fn(**_: Any) -> None:
        child: dict[str, Any] = {"kind": "Pod"}
        kopf.adopt(child)
        children["async"] = child

    @kopf.daemon("kopfexamples", id="daemon_fn", registry=registry)
    async def daemon_fn(stopped: Any, **_: Any) -> None:
        child: dict[str, Any] = {"kind": "Pod"}
        kopf.adopt(child, strict=True)
        children["daemon"] = child
        await stopped.wait()

    @kopf.on.startup(registry=registry)
    async def startup_fn(**_: Any) -> None:
        # No object is being handled: the owner must be given.
        try:
            kopf.adopt({})
        except LookupError as exc:
            children["startup"] = {"error": str(exc)}

    running = await run_operator()
    created = running.create()
    await running.wait_for(lambda: {"sync", "async", "daemon"} <= set(children), limit=60)

    uid = running.obj()["metadata"]["uid"]
    assert uid == created["metadata"]["uid"]
    owner_ref = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "name": "kopf-example-1",
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for key in ("sync", "async"):
        assert children[key]["metadata"] == {
            "ownerReferences": [owner_ref],
            "generateName": "kopf-example-1-",
            "namespace": "default",
            "labels": {"a": "b"},
        }
    assert children["daemon"]["metadata"]["name"] == "kopf-example-1"
    assert children["daemon"]["metadata"]["ownerReferences"] == [owner_ref]
    assert "no resource handler is running" in children["startup"]["error"]
