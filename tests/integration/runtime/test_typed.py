"""Typed handlers against the fake API: decoded specs, encoded statuses, invalid objects."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import msgspec
import trio
import trioperator as kopf
from trioperator import typed

DIFFBASE = "kopf.zalando.org/last-handled-configuration"


class ExampleSpec(msgspec.Struct, kw_only=True):
    field: str
    items: list[str] = []
    replicas: Annotated[int, msgspec.Meta(ge=0)] = 1


class ExampleStatus(msgspec.Struct, kw_only=True):
    seen: str = ""
    count: int = 0


@typed.resource("kopf.dev", "v1", kind="KopfExample", plural="kopfexamples")
class KopfExample(msgspec.Struct, kw_only=True):
    spec: ExampleSpec
    status: ExampleStatus | None = None


async def test_typed_handlers_get_structs_and_return_structs(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: list[Any] = []

    @kopf.on.create(KopfExample, id="create_fn", registry=registry)
    async def create_fn(spec: ExampleSpec, status: ExampleStatus, **_: Any) -> ExampleStatus:
        seen.append(("create", spec, status))
        return ExampleStatus(seen=spec.field, count=len(spec.items))

    @kopf.on.update(KopfExample, id="update_fn", registry=registry)
    def update_fn(old: ExampleSpec, new: ExampleSpec, patch: kopf.Patch, **_: Any) -> None:
        seen.append(("update", old, new))
        patch["status"] = {"direct": ExampleStatus(seen=new.field)}

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: "create_fn" in running.obj().get("status", {}))
    assert running.obj()["status"]["create_fn"] == {"seen": "value", "count": 2}
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"].get("annotations", {}))
    running.patch({"spec": {"field": "changed"}})
    await running.wait_for(lambda: "direct" in running.obj().get("status", {}))

    assert seen[0] == (
        "create",
        ExampleSpec(field="value", items=["item1", "item2"]),
        ExampleStatus(),
    )
    assert seen[1][0] == "update"
    assert seen[1][1].field == "value"
    assert seen[1][2].field == "changed"
    assert running.obj()["status"]["direct"] == {"seen": "changed", "count": 0}


async def test_invalid_spec_is_logged_and_posted_once_and_not_retried(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    fake_api: Any,
    logs: Any,
) -> None:
    calls: list[Any] = []

    @kopf.on.create(KopfExample, id="create_fn", registry=registry)
    async def create_fn(spec: ExampleSpec, **_: Any) -> None:
        calls.append(("create", spec))

    @kopf.on.update(KopfExample, id="update_fn", registry=registry)
    async def update_fn(new: ExampleSpec, **_: Any) -> None:
        calls.append(("update", new))

    @kopf.on.create("kopfexamples", id="dict_fn", registry=registry)
    async def dict_fn(spec: Any, **_: Any) -> None:
        calls.append(("dict", dict(spec)))

    running = await run_operator()
    body = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": "kopf-example-1", "namespace": "default"},
        "spec": {"field": "value", "replicas": "three"},
    }
    running.create(body)
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"].get("annotations", {}))
    await trio.sleep(600)  # ten minutes: no retries in between

    assert calls == [("dict", {"field": "value", "replicas": "three"})]
    failures = [m for m in logs.messages(logging.ERROR) if "create_fn" in m]
    assert len(failures) == 1
    assert "spec does not match ExampleSpec" in failures[0]
    assert "Expected `int`, got `str` (at spec.replicas)" in failures[0]
    events = [e for e in fake_api.objects("events", "default") if e["reason"] == "InvalidSpec"]
    assert len(events) == 1
    assert events[0]["type"] == "Warning"
    assert "(at spec.replicas)" in events[0]["message"]
    assert events[0]["involvedObject"]["name"] == "kopf-example-1"

    # Fixed: the update handler gets the new, valid spec.
    running.patch({"spec": {"replicas": 3}})
    await running.wait_for(lambda: any(call[0] == "update" for call in calls))
    assert calls[-1] == ("update", ExampleSpec(field="value", replicas=3))
