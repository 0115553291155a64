"""The echo of the operator's own write: skipped only when it cannot matter.

A cycle that settles an object (nothing left to do) writes its results and marks; the API
server sends that state back. Its change handling is skipped when the write is known to leave
everything the change handling reads as it was. These tests pin down both sides: the skip
happens in the usual case, and every echo that does matter is still handled.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._engine.diffbase import AnnotationsDiffBaseStorage
from trioperator.testing import fakeapi

NOOP_LINE = "Something has changed, but we are not interested (the essence is the same)."
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


@pytest.fixture
def essence_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the objects whose essence the change handling has built, in order."""
    built: list[str] = []
    original = AnnotationsDiffBaseStorage.build

    def build(self: AnnotationsDiffBaseStorage, *, body: Any, extra_fields: Any = None) -> Any:
        name = (body.get("metadata") or {}).get("name")
        if name is not None:  # the echo check builds name-less annotations-only bodies
            built.append(name)
        return original(self, body=body, extra_fields=extra_fields)

    monkeypatch.setattr(AnnotationsDiffBaseStorage, "build", build)
    return built


async def test_the_echo_of_a_settled_creation_is_not_handled_again(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
    essence_builds: list[str],
) -> None:
    calls: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> dict[str, str]:
        calls.append(name)
        return {"message": "hello"}

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: "create_fn" in (running.obj().get("status") or {}))
    await trio.sleep(30)  # the echo, and anything that would follow it

    assert calls == ["kopf-example-1"]
    assert essence_builds == ["kopf-example-1"]  # the creation's cycle only
    # The line of a cycle that finds nothing new is there for the echo, as it always was.
    assert len(logs.times(NOOP_LINE)) == 1
    # Someone else's change after it is handled as usual.
    running.patch({"spec": {"field": "other"}})
    await trio.sleep(30)
    assert essence_builds == ["kopf-example-1", "kopf-example-1"]


async def test_the_echo_of_a_settled_creation_is_taken_without_the_worker_task(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The worker parks right after its settling write; the echo is taken for it, with the same
    # line, instead of waking up its task only to find nothing to do.
    order: list[str] = []

    # As over a network: the echo comes a moment after the answer to the write, not in the same
    # instant (when it does, the worker still active takes it itself, as it always has).
    receive = fakeapi._WatchStream.__anext__

    async def lagging(self: Any) -> bytes:
        line = await receive(self)
        await trio.sleep(0.01)
        return line

    monkeypatch.setattr(fakeapi._WatchStream, "__anext__", lagging)

    class WorkerExits(trio.abc.Instrument):
        def task_exited(self, task: trio.lowlevel.Task) -> None:
            if task.name.startswith("worker "):
                order.append("worker task ended")

    class NoopLines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == NOOP_LINE:
                order.append("echo taken")

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, str]:
        return {"message": "hello"}

    lines = NoopLines()
    logging.getLogger("trioperator").addHandler(lines)
    exits = WorkerExits()
    trio.lowlevel.add_instrument(exits)
    try:
        running = await run_operator()
        running.create()
        await running.wait_for(lambda: "create_fn" in (running.obj().get("status") or {}))
        await trio.sleep(30)
    finally:
        trio.lowlevel.remove_instrument(exits)
        logging.getLogger("trioperator").removeHandler(lines)
    assert order == ["worker task ended", "echo taken"]
    assert running.worker_tasks() == []
    # Someone else's change after it revives the worker, which handles it as usual.
    seen: list[str] = []

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(spec: Any, **_: Any) -> None:
        seen.append(spec["field"])

    running.patch({"spec": {"field": "other"}})
    await running.wait_for(lambda: seen == ["other"])


async def test_a_handler_that_writes_a_counted_annotation_sees_its_echo_as_an_update(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    updates: list[Any] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(patch: kopf.Patch, **_: Any) -> None:
        patch.metadata.annotations["example.com/touched"] = "yes"

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(diff: Any, **_: Any) -> None:
        updates.append(list(diff))

    running = await run_operator()
    running.create()
    await trio.sleep(30)

    assert updates == [[("add", ("metadata", "annotations"), None, {"example.com/touched": "yes"})]]


async def test_a_handler_watching_a_status_field_sees_its_own_write_of_it(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    phases: list[tuple[Any, Any]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(patch: kopf.Patch, **_: Any) -> None:
        patch.status["phase"] = "Running"

    @kopf.on.field("kopfexamples", field="status.phase", id="phase_fn", registry=registry)
    async def phase_fn(old: Any, new: Any, **_: Any) -> None:
        phases.append((old, new))

    running = await run_operator()
    running.create()
    await trio.sleep(30)

    assert phases == [(None, "Running")]


async def test_a_finalizer_that_depends_on_the_status_is_added_on_the_echo(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    deleted: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, str]:
        return {"message": "hello"}

    # Only objects that were created successfully need cleaning up.
    @kopf.on.delete(
        "kopfexamples",
        id="delete_fn",
        registry=registry,
        when=lambda status, **_: "create_fn" in status,
    )
    async def delete_fn(name: str, **_: Any) -> None:
        deleted.append(name)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: FINALIZER in running.obj()["metadata"].get("finalizers", []))
    running.delete()
    await running.wait_for(lambda: not running.exists())

    assert deleted == ["kopf-example-1"]
