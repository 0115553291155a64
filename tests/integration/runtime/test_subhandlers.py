"""Sub-handlers: @subhandler, register() and execute(), with their own progress records."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trioperator as kopf
from tests.integration.conftest import results
from trioperator._engine.lifecycles import all_at_once
from trioperator._runtime.handling.execution import execute

DIFFBASE = "kopf.zalando.org/last-handled-configuration"


def handled(running: Any) -> bool:
    return DIFFBASE in running.obj()["metadata"].get("annotations", {})


def records(body: Any) -> dict[str, dict[str, Any]]:
    """The progress records in a merge-patch or an object, by annotation name (no timestamps)."""
    result: dict[str, dict[str, Any]] = {}
    for name, value in (body.get("metadata", {}).get("annotations") or {}).items():
        if name.startswith("kopf.zalando.org/") and name != DIFFBASE and value is not None:
            record = json.loads(value)
            for key in ("started", "stopped", "delayed"):
                record.pop(key, None)
            result[name] = record
    return result


async def test_subhandlers_run_one_per_cycle_with_the_parent_retried_until_done(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    def create_fn(spec: Any, **_: Any) -> None:
        calls.append("create_fn")
        for item in spec["items"]:

            @kopf.subhandler(id=item)
            def create_item_fn(item: str = item, **_: Any) -> dict[str, str]:
                calls.append(f"create_fn/{item}")
                return {"item": item}

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    await trio.sleep(10)

    assert calls == ["create_fn", "create_fn/item1", "create_fn", "create_fn/item2"]
    writes = [body for _, sub, body in running.writes() if sub == ""]
    assert records(writes[0]) == {
        "kopf.zalando.org/create_fn": {
            "purpose": "create",
            "retries": 1,
            "success": False,
            "failure": False,
            "subrefs": ["create_fn/item1", "create_fn/item2"],
        },
        "kopf.zalando.org/create_fn.item1": {
            "purpose": "create",
            "retries": 1,
            "success": True,
            "failure": False,
        },
        "kopf.zalando.org/create_fn.item2": {
            "purpose": "create",
            "retries": 0,
            "success": False,
            "failure": False,
        },
    }
    # All records are purged at the end, the sub-handlers' too.
    assert writes[-1]["metadata"]["annotations"] == {
        "kopf.zalando.org/create_fn": None,
        "kopf.zalando.org/create_fn.item1": None,
        "kopf.zalando.org/create_fn.item2": None,
        DIFFBASE: json.dumps(
            {
                "spec": {"field": "value", "items": ["item1", "item2"]},
                "metadata": {"labels": {"a": "b"}},
            },
            separators=(",", ":"),
        )
        + "\n",
    }
    # The sub-handlers' results are delivered like any handler's.
    assert results(running.obj()["status"]) == {
        "create_fn/item1": {"item": "item1"},
        "create_fn/item2": {"item": "item2"},
    }


async def test_register_and_delayed_subhandlers(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[str, float]] = []

    async def child(retry: int, **_: Any) -> None:
        calls.append(("child", trio.current_time()))
        if retry == 0:
            raise kopf.TemporaryError("not yet", delay=5)

    @kopf.on.create("kopfexamples", id="parent", registry=registry)
    async def parent(**_: Any) -> None:
        calls.append(("parent", trio.current_time()))
        kopf.register(child, id="child")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    t0 = calls[0][1]
    assert [(name, time - t0) for name, time in calls] == [
        ("parent", 0),
        ("child", 0),
        ("parent", pytest.approx(5, abs=1e-5)),
        ("child", pytest.approx(5, abs=1e-5)),
    ]


async def test_execute_runs_functions_as_subhandlers_in_place(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    calls: list[str] = []

    async def first(**_: Any) -> None:
        calls.append("first")

    async def second(**_: Any) -> None:
        calls.append("second")

    @kopf.on.create("kopfexamples", id="parent", registry=registry)
    async def parent(**_: Any) -> None:
        calls.append("parent:before")
        await execute(fns={"one": first, "two": second})
        calls.append("parent:after")  # only once everything is done

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    assert calls == [
        "parent:before",
        "first",
        "parent:before",
        "second",
        "parent:after",
    ]
    logs.assert_in_order(
        "Handler 'parent/one' succeeded.",
        "Handler 'parent/two' succeeded.",
        "Handler 'parent' succeeded.",
        "Creation is processed: 1 succeeded; 0 failed.",
    )


async def test_execute_outside_of_handlers_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="only inside a resource-changing handler"):
        await execute(fns=[lambda **_: None])


async def test_a_failed_subhandler_does_not_fail_the_parent(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    # As in Kopf: the parent waits until its sub-handlers are finished, however they finished.
    @kopf.on.create("kopfexamples", id="parent", registry=registry)
    async def parent(**_: Any) -> None:
        @kopf.subhandler(id="bad")
        async def bad(**_: Any) -> None:
            raise kopf.PermanentError("no way")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    logs.assert_in_order(
        "Handler 'parent/bad' failed permanently: no way",
        "Handler 'parent' succeeded.",
        "Creation is processed: 1 succeeded; 0 failed.",
    )


async def test_nested_subhandlers_finished_at_once_leave_no_records(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[str] = []

    async def grandchild(**_: Any) -> None:
        calls.append("grandchild")

    async def child(**_: Any) -> None:
        calls.append("child")
        await execute(fns={"g1": grandchild, "g2": grandchild}, lifecycle=all_at_once)

    @kopf.on.create("kopfexamples", id="parent", registry=registry)
    async def parent(**_: Any) -> None:
        calls.append("parent")
        await execute(fns={"c": child}, lifecycle=all_at_once)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    await trio.sleep(10)
    assert calls == ["parent", "child", "grandchild", "grandchild"]
    assert set(running.obj()["metadata"]["annotations"]) == {DIFFBASE}
