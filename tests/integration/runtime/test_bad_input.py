"""Objects with corrupt records of the operator: a clear log line, and every other object served."""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
OBJ: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "placeholder", "namespace": "default"},
    "spec": {"field": "value"},
}


def make(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    body = copy.deepcopy(OBJ)
    body["metadata"]["name"] = name
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def annotations(running: Any, name: str) -> dict[str, str]:
    result: dict[str, str] = running.obj(name)["metadata"].get("annotations", {})
    return result


async def test_a_corrupt_progress_record_reruns_its_handler_and_is_replaced(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    runs: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        runs.append(name)

    running = await run_operator()
    running.create(make("invalid-json", {"kopf.zalando.org/create_fn": "{not json"}))
    wrong_types = '{"retries":"many","subrefs":5,"started":17}'
    running.create(make("wrong-types", {"kopf.zalando.org/create_fn": wrong_types}))
    running.create(make("healthy"))
    names = ["invalid-json", "wrong-types", "healthy"]
    await running.wait_for(lambda: all(DIFFBASE in annotations(running, n) for n in names))
    await trio.sleep(10)

    assert sorted(runs) == sorted(names)  # each exactly once, the corrupt ones included
    for name in names:
        assert "kopf.zalando.org/create_fn" not in annotations(running, name)  # purged when done
    warnings = [m for m in logs.messages(logging.WARNING) if "progress record" in m]
    assert len(warnings) == 2
    assert all("'create_fn' cannot be read" in m for m in warnings)
    assert all("runs as if for the first time" in m for m in warnings)


async def test_a_corrupt_diffbase_stops_only_its_object_until_fixed(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    runs: list[tuple[str, str]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        runs.append(("create", name))

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(name: str, **_: Any) -> None:
        runs.append(("update", name))

    running = await run_operator()
    running.create(make("broken", {DIFFBASE: '{"spec": {"field": '}))
    running.create(make("healthy"))
    await running.wait_for(lambda: DIFFBASE in annotations(running, "healthy"))
    await trio.sleep(30)

    assert runs == [("create", "healthy")]  # never a creation for an object handled before
    errors = [m for m in logs.messages(logging.ERROR) if "diff-base" in m]
    assert errors
    assert f"The diff-base in the annotation {DIFFBASE!r} is not valid JSON" in errors[0]
    assert "fix or remove it by hand" in errors[0]

    # Fixed by hand (an older essence): the object is served again, as an update.
    fixed = json.dumps({"spec": {"field": "older"}})
    running.patch({"metadata": {"annotations": {DIFFBASE: fixed}}}, name="broken")
    await running.wait_for(lambda: ("update", "broken") in runs, limit=700)
    assert runs == [("create", "healthy"), ("update", "broken")]


FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
OTHER = "other.example.com/keep"


async def test_finalizers_edited_by_others_are_kept_and_ours_comes_back(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    deletions: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        pass

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(name: str, **_: Any) -> None:
        deletions.append(name)

    def finalizers() -> list[str]:
        result: list[str] = running.obj("edited")["metadata"].get("finalizers", [])
        return result

    running = await run_operator()
    running.create(make("edited"))
    await running.wait_for(lambda: DIFFBASE in annotations(running, "edited"))
    assert finalizers() == [FINALIZER]

    # Another client replaces the list, dropping ours: it is put back, theirs kept.
    running.patch({"metadata": {"finalizers": [OTHER]}}, name="edited")
    await running.wait_for(lambda: FINALIZER in finalizers())
    assert finalizers() == [OTHER, FINALIZER]
    assert logs.count("Adding the finalizer, thus preventing the actual deletion.") == 2

    # On deletion, only ours goes; the other one keeps the object for its own controller.
    running.delete("edited")
    await running.wait_for(lambda: finalizers() == [OTHER])
    await trio.sleep(10)
    assert deletions == ["edited"]
    assert running.exists("edited")
    assert not logs.messages(logging.ERROR)


async def test_undecodable_watch_lines_are_logged_and_skipped(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    created: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        created.append(name)

    running = await run_operator()

    def streams() -> list[Any]:
        return [s for s in list(running.api._watches) if s.path.endswith("/kopfexamples")]

    await running.wait_for(lambda: streams())
    opened = streams()
    for stream in opened:  # as a broken proxy or server might send them
        stream._put(b'{"type":"ADDED","object":{"metadata":{"name":"\xff\xfe"}}}\n')
        stream._put(b"<html>Bad gateway</html>\n")
    running.create(make("after-the-garbage"))
    await running.wait_for(lambda: created == ["after-the-garbage"])

    skipped = [m for m in logs.messages(logging.WARNING) if "Skipping an undecodable line" in m]
    assert len(skipped) == 2 * len(opened)
    assert any("Bad gateway" in m for m in skipped)
    assert all(not stream.closed for stream in opened)  # the same streams go on
