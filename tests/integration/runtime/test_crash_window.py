"""A crash between the two writes of a cycle: the result is kept and the handler is not run again.

A cycle with a status subresource ends with two merge-patches: the handlers' results go to
``/status`` together with the journal of the second write, the marks of "handled" (diff-base,
progress) to the body. The operator here dies right after the first of them reached the API
server (the second request hangs and is then cut off, as by a SIGKILL), and a new operator
starts on the same objects: it completes the second write from the journal instead of running
the handler again. Only a crash before the first write lets a finished handler run again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import trio
import trioperator as kopf
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._runtime.program.operator import Operator
from trioperator.testing import FakeAPI

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
OBJ_WRITES = r"^/apis/kopf\.dev/v1/namespaces/default/kopfexamples/kopf-example-1(/status)?$"
STATUS_WRITES = r"^/apis/kopf\.dev/v1/namespaces/default/kopfexamples/kopf-example-1/status$"
BODY_WRITES = r"^/apis/kopf\.dev/v1/namespaces/default/kopfexamples/kopf-example-1$"


def crash_after_first_write(
    api: FakeAPI, seen: Callable[[dict[str, Any]], bool], name: str = "kopf-example-1"
) -> list[bool]:
    """From the first write that ``seen`` recognises on, every further write to the object
    hangs, then vanishes without effect; returns a flag list that becomes ``[True]`` then."""
    armed: list[bool] = []

    def on_change(change: Any) -> None:
        obj = change.obj
        if armed or obj.get("metadata", {}).get("name") != name:
            return
        if seen(obj):
            armed.append(True)
            api.inject("PATCH", OBJ_WRITES, delay=10**6, drop=True, times=None)

    api.store.listeners.append(on_change)
    return armed


def annotations(api: FakeAPI) -> dict[str, str]:
    obj = api.get_object("kopfexamples", "kopf-example-1", "default")
    return dict(obj["metadata"].get("annotations") or {})


def has_result(obj: dict[str, Any]) -> bool:
    return "create_fn" in (obj.get("status") or {})


def has_diffbase(obj: dict[str, Any]) -> bool:
    return DIFFBASE in (obj.get("metadata", {}).get("annotations") or {})


def make_operator(api: FakeAPI, registry: kopf.OperatorRegistry) -> Operator:
    vault = Vault({"fake": ConnectionInfo(server=api.url, token="fake")})
    return Operator(registry=registry, settings=kopf.OperatorSettings(), vault=vault)


async def run_until_killed(api: FakeAPI, operator: Operator, armed: list[bool]) -> None:
    """Run the operator until the crash is armed, then "SIGKILL" it a moment later."""
    async with trio.open_nursery() as nursery:
        killed = trio.CancelScope()

        async def doomed() -> None:
            with killed:
                await operator.main()

        nursery.start_soon(doomed)
        with trio.fail_after(60):
            while not armed:  # noqa: ASYNC110 -- polling what the fake API holds
                await trio.sleep(0.01)
        await trio.sleep(1)  # the second write is on its way and hangs
        killed.cancel()  # SIGKILL: nothing else of this process reaches the API server


async def run_until(api: FakeAPI, operator: Operator, done: Callable[[], bool]) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        with trio.fail_after(60):
            while not done():  # noqa: ASYNC110 -- polling what the fake API holds
                await trio.sleep(0.01)
        await trio.sleep(5)  # anything that would follow, e.g. the echoes of the writes
        operator.stop()


async def test_a_crash_between_result_and_mark_keeps_both_and_runs_nothing_again(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    obj: Any,
    logs: Any,
) -> None:
    calls: list[int] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(patch: Any, **_: Any) -> dict[str, int]:
        calls.append(len(calls) + 1)
        patch.metadata.labels["created"] = "yes"  # the handler's own change of the body
        return {"run": len(calls)}

    armed = crash_after_first_write(fake_api, has_result)
    fake_api.create_object("kopfexamples", obj)
    await run_until_killed(fake_api, make_operator(fake_api, registry), armed)

    # The first write is the result (with the journal); the marks never arrived.
    first = fake_api.get_object("kopfexamples", "kopf-example-1", "default")
    assert calls == [1]
    assert first["status"]["create_fn"] == {"run": 1}
    journaled = json.loads(first["status"]["kopf"]["journal"]["patch"])
    assert journaled["metadata"]["labels"] == {"created": "yes"}
    assert DIFFBASE not in annotations(fake_api)

    fake_api.clear_injections()
    second = make_operator(fake_api, registry)
    await run_until(fake_api, second, lambda: DIFFBASE in annotations(fake_api))

    # The handler did not run again: the second write was done from the journal, with the
    # handler's own change of the body; the object is handled, with its one result.
    final = fake_api.get_object("kopfexamples", "kopf-example-1", "default")
    assert calls == [1]
    assert final["status"]["create_fn"] == {"run": 1}
    assert final["metadata"]["labels"] == {**obj["metadata"]["labels"], "created": "yes"}
    assert json.loads(final["metadata"]["annotations"][DIFFBASE])["spec"] == obj["spec"]
    assert logs.count("The last write was interrupted after the results were stored") == 1


async def test_a_crash_before_the_result_is_stored_runs_the_handler_again(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: Any
) -> None:
    calls: list[int] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, int]:
        calls.append(len(calls) + 1)
        return {"run": len(calls)}

    # The handler has finished, but none of its outcome reaches the API server: the one window
    # in which it runs again (at least once).
    armed: list[bool] = []

    @kopf.on.event("kopfexamples", registry=registry)
    async def spy(**_: Any) -> None:
        if calls and not armed:
            armed.append(True)

    fake_api.inject("PATCH", STATUS_WRITES, delay=10**6, drop=True, times=None)
    fake_api.create_object("kopfexamples", obj)
    async with trio.open_nursery() as nursery:
        killed = trio.CancelScope()

        async def doomed() -> None:
            with killed:
                await make_operator(fake_api, registry).main()

        nursery.start_soon(doomed)
        with trio.fail_after(60):
            while not calls:  # noqa: ASYNC110 -- polling the handler's calls
                await trio.sleep(0.01)
        await trio.sleep(1)
        killed.cancel()
    assert "status" not in fake_api.get_object("kopfexamples", "kopf-example-1", "default")

    fake_api.clear_injections()
    await run_until(
        fake_api, make_operator(fake_api, registry), lambda: DIFFBASE in annotations(fake_api)
    )
    final = fake_api.get_object("kopfexamples", "kopf-example-1", "default")
    assert calls == [1, 2]
    assert final["status"]["create_fn"] == {"run": 2}


async def test_a_failed_body_write_is_completed_from_the_journal_in_the_same_process(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    obj: Any,
    logs: Any,
) -> None:
    calls: list[int] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, int]:
        calls.append(len(calls) + 1)
        return {"run": len(calls)}

    # The body write fails (once) after the status write has landed: the cycle fails, the
    # object is throttled, and the next cycle completes the write instead of re-running.
    settings = kopf.OperatorSettings()
    settings.networking.error_backoffs = []
    fake_api.inject("PATCH", BODY_WRITES, status=500, times=1)
    fake_api.create_object("kopfexamples", obj)
    vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})
    operator = Operator(registry=registry, settings=settings, vault=vault)
    await run_until(fake_api, operator, lambda: DIFFBASE in annotations(fake_api))

    final = fake_api.get_object("kopfexamples", "kopf-example-1", "default")
    assert calls == [1]
    assert final["status"]["create_fn"] == {"run": 1}
    assert logs.count("Throttling for") == 1
    assert logs.count("The last write was interrupted after the results were stored") == 1


async def test_a_restart_after_a_complete_cycle_finds_the_journal_stale(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    obj: Any,
    logs: Any,
) -> None:
    calls: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, int]:
        calls.append("create")
        return {"run": 1}

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(**_: Any) -> None:
        calls.append("update")

    fake_api.create_object("kopfexamples", obj)
    await run_until(
        fake_api, make_operator(fake_api, registry), lambda: DIFFBASE in annotations(fake_api)
    )
    assert "journal" in fake_api.get_object("kopfexamples", "kopf-example-1", "default")[
        "status"
    ].get("kopf", {})

    # Restarted: the journal is of a write that landed; nothing is written, nothing runs.
    writes_before = len(fake_api.requests)
    await run_until(fake_api, make_operator(fake_api, registry), lambda: True)
    assert calls == ["create"]
    assert not [r for r in fake_api.requests[writes_before:] if r.method == "PATCH"], (
        "a stale journal was written again"
    )
    assert logs.count("The last write was interrupted") == 0


async def test_a_stale_journal_is_removed_when_the_marks_return_to_its_base(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    obj: Any,
) -> None:
    # A resume over two cycles: the first stores a result (journal: base = no records), the
    # second purges the records -- the marks are back as they were before the first. The
    # journal must not look current again: it is removed in the second cycle.
    failures: list[int] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        pass

    fake_api.create_object("kopfexamples", obj)
    await run_until(
        fake_api, make_operator(fake_api, registry), lambda: DIFFBASE in annotations(fake_api)
    )

    # Restarted with resume handlers: the cause is a resume (the essence is the handled one).
    resuming = kopf.OperatorRegistry()

    @kopf.on.resume("kopfexamples", id="first", registry=resuming)
    async def first(**_: Any) -> dict[str, str]:
        return {"done": "yes"}

    @kopf.on.resume("kopfexamples", id="second", registry=resuming)
    async def second(**_: Any) -> None:
        if not failures:
            failures.append(1)
            raise kopf.TemporaryError("Later.", delay=1)

    def resumed() -> bool:
        current = annotations(fake_api)
        return bool(failures) and not any(k.endswith(("/first", "/second")) for k in current)

    await run_until(fake_api, make_operator(fake_api, resuming), resumed)
    status = fake_api.get_object("kopfexamples", "kopf-example-1", "default")["status"]
    assert status["first"] == {"done": "yes"}
    assert "journal" not in status.get("kopf", {})


async def test_a_crash_before_the_finalizer_is_removed_runs_no_deletion_handler_again(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: Any
) -> None:
    calls: list[str] = []

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(**_: Any) -> None:
        calls.append("delete")

    fake_api.create_object("kopfexamples", obj)
    first = make_operator(fake_api, registry)

    def finalized() -> bool:
        obj = fake_api.get_object("kopfexamples", "kopf-example-1", "default")
        return bool(obj["metadata"].get("finalizers"))

    await run_until(fake_api, first, finalized)

    # The deletion's records are written (the body write), the finalizer's removal (a write of
    # its own, after it) never lands.
    def handled(obj: dict[str, Any]) -> bool:
        record = (obj["metadata"].get("annotations") or {}).get("kopf.zalando.org/delete_fn")
        return record is not None and json.loads(record).get("success") is True

    armed = crash_after_first_write(fake_api, handled)
    second = make_operator(fake_api, registry)
    async with trio.open_nursery() as nursery:
        killed = trio.CancelScope()

        async def doomed() -> None:
            with killed:
                await second.main()

        nursery.start_soon(doomed)
        await trio.sleep(1)
        fake_api.delete_object("kopfexamples", "kopf-example-1", "default")
        with trio.fail_after(60):
            while not armed:  # noqa: ASYNC110 -- polling what the fake API holds
                await trio.sleep(0.01)
        await trio.sleep(1)
        killed.cancel()
    assert calls == ["delete"]
    assert fake_api.has_object("kopfexamples", "kopf-example-1", "default")

    fake_api.clear_injections()
    third = make_operator(fake_api, registry)
    await run_until(
        fake_api,
        third,
        lambda: not fake_api.has_object("kopfexamples", "kopf-example-1", "default"),
    )
    assert calls == ["delete"]  # the records say it is done: only the finalizer is removed


async def test_a_failed_completion_is_tried_again_and_runs_nothing_again(
    autojump_clock: Any,
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    obj: Any,
    logs: Any,
) -> None:
    calls: list[int] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, int]:
        calls.append(len(calls) + 1)
        return {"run": len(calls)}

    armed = crash_after_first_write(fake_api, has_result)
    fake_api.create_object("kopfexamples", obj)
    await run_until_killed(fake_api, make_operator(fake_api, registry), armed)
    fake_api.clear_injections()

    # The next operator's completion of the write fails once; the one after it lands.
    settings = kopf.OperatorSettings()
    settings.networking.error_backoffs = []
    fake_api.inject("PATCH", BODY_WRITES, status=500, times=1)
    vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})
    second = Operator(registry=registry, settings=settings, vault=vault)
    await run_until(fake_api, second, lambda: DIFFBASE in annotations(fake_api))

    assert calls == [1]
    assert logs.count("The last write was interrupted after the results were stored") == 2
