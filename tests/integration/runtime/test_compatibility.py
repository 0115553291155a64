"""State written by Kopf 1.45 is understood: moving an operator over runs nothing twice."""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._util.clock import run_basetime

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
# Exactly what Kopf 1.45 writes for OBJ: compact JSON and a newline.
KOPF_ESSENCE = (
    '{"spec":{"field":"value","items":["item1","item2"]},"metadata":{"labels":{"a":"b"}}}\n'
)


def kopf_object(obj: dict[str, Any], **annotations: str) -> dict[str, Any]:
    body = copy.deepcopy(obj)
    body["metadata"]["annotations"] = dict(annotations)
    return body


def iso(seconds_from_now: float) -> str:
    now = run_basetime() + datetime.timedelta(seconds=trio.current_time() + seconds_from_now)
    return now.isoformat(timespec="microseconds")


def register_handlers(registry: kopf.OperatorRegistry, calls: list[str]) -> None:
    @kopf.on.create("kopfexamples", id="fn1", registry=registry)
    async def fn1(**_: Any) -> None:
        calls.append("fn1")

    @kopf.on.create("kopfexamples", id="fn2", registry=registry)
    async def fn2(**_: Any) -> None:
        calls.append("fn2")

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(**_: Any) -> None:
        calls.append("update_fn")


@pytest.mark.parametrize("before_start", [True, False], ids=["listed", "added"])
async def test_an_object_handled_by_kopf_is_not_handled_again(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    fake_api: Any,
    obj: dict[str, Any],
    before_start: bool,
) -> None:
    calls: list[str] = []
    register_handlers(registry, calls)
    body = kopf_object(obj, **{DIFFBASE: KOPF_ESSENCE})
    if before_start:
        fake_api.create_object("kopfexamples", body)
    running = await run_operator()
    if not before_start:
        running.create(body)
    await trio.sleep(30)
    assert calls == []
    assert running.writes() == []


async def test_handlers_finished_under_kopf_are_not_repeated(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any, obj: Any
) -> None:
    calls: list[str] = []
    register_handlers(registry, calls)
    started = iso(-100)
    fn1 = {
        "started": started,
        "stopped": iso(-99),
        "purpose": "create",
        "retries": 1,
        "success": True,
        "failure": False,
    }
    fn2 = {
        "started": started,
        "purpose": "create",
        "retries": 0,
        "success": False,
        "failure": False,
    }
    body = kopf_object(
        obj,
        **{
            "kopf.zalando.org/fn1": json.dumps(fn1, separators=(",", ":")),
            "kopf.zalando.org/fn2": json.dumps(fn2, separators=(",", ":")),
        },
    )
    fake_api.create_object("kopfexamples", body)
    running = await run_operator()
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"]["annotations"])
    await trio.sleep(10)
    assert calls == ["fn2"]
    assert running.obj()["metadata"]["annotations"] == {DIFFBASE: KOPF_ESSENCE}


async def test_a_delay_set_by_kopf_is_honoured(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any, obj: Any
) -> None:
    times: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        times.append(trio.current_time())
        assert retry == 3

    record = {
        "started": iso(-100),
        "delayed": iso(12),
        "purpose": "create",
        "retries": 3,
        "success": False,
        "failure": False,
        "message": "Kopf said so",
    }
    t0 = trio.current_time()
    body = kopf_object(obj, **{"kopf.zalando.org/create_fn": json.dumps(record)})
    fake_api.create_object("kopfexamples", body)
    running = await run_operator()
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"]["annotations"])
    assert times == [pytest.approx(t0 + 12, abs=1e-5)]


async def test_legacy_status_progress_is_read_and_purged(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any, obj: Any
) -> None:
    calls: list[str] = []
    register_handlers(registry, calls)
    body = kopf_object(obj)
    body["status"] = {
        "kopf": {"progress": {"fn1": {"started": iso(-10), "retries": 1, "success": True}}}
    }
    fake_api.put_object("kopfexamples", body)
    running = await run_operator()
    await running.wait_for(lambda: DIFFBASE in running.obj()["metadata"]["annotations"])
    await trio.sleep(10)
    assert calls == ["fn2"]
    assert running.obj().get("status", {}).get("kopf", {}).get("progress", {}) == {}
