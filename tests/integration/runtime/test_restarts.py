"""Restarts: the state lives on the objects, so a new operator continues where the old one was."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trioperator as kopf

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
DIFFBASE = "kopf.zalando.org/last-handled-configuration"


def handled_spec(running: Any) -> Any:
    annotations = running.obj()["metadata"].get("annotations", {})
    return json.loads(annotations[DIFFBASE])["spec"] if DIFFBASE in annotations else None


async def test_nothing_reruns_after_a_restart_but_resume_handlers_run_once(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        calls.append("create")

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(**_: Any) -> None:
        calls.append("update")

    @kopf.on.resume("kopfexamples", id="resume_fn", registry=registry)
    async def resume_fn(**_: Any) -> None:
        calls.append("resume")

    first = await run_operator()
    first.create()
    await first.wait_for(lambda: handled_spec(first) is not None)
    await trio.sleep(10)
    await first.stop()
    assert calls == ["create"]  # creation never mixes with resuming
    writes = len(first.writes())

    second = await run_operator()
    await second.wait_for(lambda: len(calls) == 2)
    await trio.sleep(30)
    await second.stop()
    assert calls == ["create", "resume"]
    assert len(second.writes()) == writes  # nothing to store: the essence is the same

    third = await run_operator()
    await trio.sleep(30)
    # A re-listing in the same process (e.g. after a watch error) is not a restart.
    third.api.inject_watch_error("*kopfexamples*", 410)
    await trio.sleep(30)
    await third.stop()
    assert calls == ["create", "resume", "resume"]


async def test_changes_made_while_down_are_handled_with_resume_mixed_in(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[str, Any]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        calls.append(("create", None))

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(diff: Any, **_: Any) -> None:
        calls.append(("update", list(diff)))

    @kopf.on.resume("kopfexamples", id="resume_fn", registry=registry)
    async def resume_fn(reason: Any, **_: Any) -> None:
        calls.append(("resume", reason))

    first = await run_operator()
    first.create()
    await first.wait_for(lambda: handled_spec(first) is not None)
    await first.stop()

    first.patch({"spec": {"field": "changed while down"}})

    second = await run_operator()
    await second.wait_for(lambda: (handled_spec(second) or {}).get("field") == "changed while down")
    assert calls == [
        ("create", None),
        ("update", [("change", ("spec", "field"), "value", "changed while down")]),
        ("resume", kopf.Reason.UPDATE),
    ]
    await trio.sleep(30)
    assert len(calls) == 3
    # Later changes are plain updates: the object is handled once in this process.
    second.patch({"spec": {"field": "again"}})
    await second.wait_for(lambda: (handled_spec(second) or {}).get("field") == "again")
    assert [name for name, _ in calls[3:]] == ["update"]


@pytest.mark.parametrize("deleted", [False, True])
async def test_resume_handlers_on_deletion_only_if_declared_safe(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, deleted: bool
) -> None:
    calls: list[str] = []

    @kopf.on.resume("kopfexamples", id="resume_fn", deleted=deleted, registry=registry)
    async def resume_fn(**_: Any) -> None:
        calls.append("resume")

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(**_: Any) -> None:
        calls.append("delete")

    first = await run_operator()
    first.create()
    await first.wait_for(lambda: handled_spec(first) is not None)
    await first.stop()
    assert calls == []

    first.delete()  # blocked by our finalizer while the operator is down
    assert first.obj()["metadata"]["deletionTimestamp"]

    second = await run_operator()
    await second.wait_for(lambda: not second.exists())
    assert calls == (["resume", "delete"] if deleted else ["delete"])


async def test_a_delayed_handler_keeps_its_schedule_across_a_restart(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        attempts.append(trio.current_time())
        if retry == 0:
            raise kopf.TemporaryError("later", delay=20)

    first = await run_operator()
    first.create()
    await first.wait_for(lambda: len(attempts) == 1)
    await trio.sleep(10)
    await first.stop()

    second = await run_operator()
    await second.wait_for(lambda: handled_spec(second) is not None)
    assert len(attempts) == 2
    assert attempts[1] - attempts[0] == pytest.approx(20, abs=1e-5)
