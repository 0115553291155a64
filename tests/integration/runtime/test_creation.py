"""Creation handling end to end against the fake API."""

from __future__ import annotations

import datetime
import json
from typing import Any

import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
ESSENCE = '{"spec":{"field":"value","items":["item1","item2"]},"metadata":{"labels":{"a":"b"}}}\n'


async def test_create_handler_runs_once_and_records_state(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[dict[str, Any]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    def create_fn(spec: Any, name: str, **_: Any) -> dict[str, str]:
        calls.append({"spec": dict(spec), "name": name})
        return {"message": "hello"}

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: "create_fn" in (running.obj().get("status") or {}))

    obj = running.obj()
    assert calls == [
        {"spec": {"field": "value", "items": ["item1", "item2"]}, "name": "kopf-example-1"}
    ]
    assert obj["status"]["create_fn"] == {"message": "hello"}
    annotations = obj["metadata"]["annotations"]
    essence = json.loads(annotations[DIFFBASE])
    assert essence == {
        "spec": {"field": "value", "items": ["item1", "item2"]},
        "metadata": {"labels": {"a": "b"}},
    }
    # The progress record is purged once everything is done; no finalizer without delete handlers.
    assert "kopf.zalando.org/create_fn" not in annotations
    assert "finalizers" not in obj["metadata"]


async def test_create_flow_makes_exactly_the_api_calls_of_kopf(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, str]:
        return {"message": "hello"}

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: "create_fn" in (running.obj().get("status") or {}))
    await trio.sleep(30)  # anything that would come later, e.g. a reaction to our own patch

    # Kopf's two writes: a merge-patch of the status subresource (the result) and one of the
    # body (the diff-base). Unlike Kopf, the result goes first, with the journal of the body
    # write: a crash between the two neither loses the result nor repeats the handler.
    body_write = {"metadata": {"annotations": {DIFFBASE: ESSENCE}}}
    writes = running.writes()
    assert writes == [
        (
            "PATCH",
            "/status",
            {
                "status": {
                    "create_fn": {"message": "hello"},
                    "kopf": {
                        "journal": {
                            "base": writes[0][2]["status"]["kopf"]["journal"]["base"],
                            "patch": json.dumps(body_write, separators=(",", ":")),
                        }
                    },
                }
            },
        ),
        ("PATCH", "", body_write),
    ]
    logs.assert_in_order(
        "[default/kopf-example-1] Creation is in progress:",
        "[default/kopf-example-1] Handler 'create_fn' is invoked.",
        "[default/kopf-example-1] Handler 'create_fn' succeeded.",
        "[default/kopf-example-1] Creation is processed: 1 succeeded; 0 failed.",
    )
    assert logs.count("is invoked") == 1
    # Our own patches come back as events with the same essence: nothing runs for them.
    assert logs.count("Something has changed, but we are not interested") >= 1


async def test_several_create_handlers_run_one_per_cycle_with_progress_in_between(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[str, float]] = []

    @kopf.on.create("kopfexamples", id="fn1", registry=registry)
    async def fn1(**_: Any) -> None:
        calls.append(("fn1", trio.current_time()))

    @kopf.on.create("kopfexamples", id="fn2", registry=registry)
    async def fn2(**_: Any) -> None:
        calls.append(("fn2", trio.current_time()))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"].get("annotations", {}))
    await trio.sleep(30)

    assert [name for name, _ in calls] == ["fn1", "fn2"]
    writes = running.writes()
    assert len(writes) == 2
    first = writes[0][2]["metadata"]["annotations"]
    assert set(first) == {"kopf.zalando.org/fn1", "kopf.zalando.org/fn2"}
    record1 = json.loads(first["kopf.zalando.org/fn1"])
    record2 = json.loads(first["kopf.zalando.org/fn2"])
    started = record1.pop("started")
    assert record1.pop("stopped") == started  # both at the same (mock) moment
    assert record1 == {"purpose": "create", "retries": 1, "success": True, "failure": False}
    assert record2 == {
        "started": started,
        "purpose": "create",
        "retries": 0,
        "success": False,
        "failure": False,
    }
    # Kopf's format: microseconds and an explicit UTC offset.
    assert datetime.datetime.fromisoformat(started).utcoffset() == datetime.timedelta(0)
    assert started.endswith("+00:00")
    assert len(started.split(".")[1]) == len("123456+00:00")
    # The second cycle purges both records and stores the diff-base, in one patch.
    assert writes[1] == (
        "PATCH",
        "",
        {
            "metadata": {
                "annotations": {
                    "kopf.zalando.org/fn1": None,
                    "kopf.zalando.org/fn2": None,
                    DIFFBASE: ESSENCE,
                }
            }
        },
    )
    obj = running.obj()
    assert set(obj["metadata"]["annotations"]) == {DIFFBASE}


async def test_create_handlers_get_the_kwargs_of_the_object(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: dict[str, Any] = {}

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**kwargs: Any) -> None:
        seen.update(kwargs)

    running = await run_operator()
    created = running.create()
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"].get("annotations", {}))

    assert seen["name"] == "kopf-example-1"
    assert seen["namespace"] == "default"
    assert seen["uid"] == created["metadata"]["uid"]
    assert dict(seen["labels"]) == {"a": "b"}
    assert dict(seen["spec"]) == {"field": "value", "items": ["item1", "item2"]}
    assert seen["reason"] == kopf.Reason.CREATE
    assert seen["old"] is None
    assert seen["new"] == {
        "spec": {"field": "value", "items": ["item1", "item2"]},
        "metadata": {"labels": {"a": "b"}},
    }
    assert list(seen["diff"]) == [
        ("add", (), None, seen["new"]),
    ]
    assert seen["retry"] == 0
    assert seen["resource"].plural == "kopfexamples"
    assert isinstance(seen["patch"], kopf.Patch)
