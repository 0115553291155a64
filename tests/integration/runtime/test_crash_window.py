"""A crash between the two writes of a cycle: the handler may run again, its result is never lost.

A cycle with a status subresource ends with two merge-patches: the handlers' results go to
``/status``, the marks of "handled" (diff-base, progress, finalizers) to the body. The operator
here dies right after the first of them reached the API server (the second request hangs and is
then cut off, as by a SIGKILL), and a new operator starts on the same objects.
"""

from __future__ import annotations

import json
from typing import Any

import trio
import trioperator as kopf
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._runtime.operator import Operator
from trioperator.testing import FakeAPI

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
OBJ_WRITES = r"^/apis/kopf\.dev/v1/namespaces/default/kopfexamples/kopf-example-1(/status)?$"


def crash_after_first_write(api: FakeAPI, name: str = "kopf-example-1") -> list[bool]:
    """From the first write of a handler's result or mark on, every further write hangs, then
    vanishes without effect; returns a flag list that becomes ``[True]`` at that moment."""
    armed: list[bool] = []

    def on_change(change: Any) -> None:
        obj = change.obj
        if armed or obj.get("metadata", {}).get("name") != name:
            return
        annotations = obj.get("metadata", {}).get("annotations") or {}
        if DIFFBASE in annotations or "create_fn" in (obj.get("status") or {}):
            armed.append(True)
            api.inject("PATCH", OBJ_WRITES, delay=10**6, drop=True, times=None)

    api.store.listeners.append(on_change)
    return armed


async def test_a_crash_between_result_and_mark_reruns_the_handler_and_keeps_the_result(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: Any
) -> None:
    calls: list[int] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> dict[str, int]:
        calls.append(len(calls) + 1)
        return {"run": len(calls)}

    def operator() -> Operator:
        vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})
        return Operator(registry=registry, settings=kopf.OperatorSettings(), vault=vault)

    armed = crash_after_first_write(fake_api)
    async with trio.open_nursery() as nursery:
        killed = trio.CancelScope()

        async def doomed() -> None:
            with killed:
                await operator().main()

        nursery.start_soon(doomed)
        fake_api.create_object("kopfexamples", obj)
        with trio.fail_after(60):
            while not armed:  # noqa: ASYNC110 -- polling what the fake API holds
                await trio.sleep(0.01)
        await trio.sleep(1)  # the second write is on its way and hangs
        killed.cancel()  # SIGKILL: nothing else of this process reaches the API server

    # The first write is the result; the mark of "handled" never arrived.
    first = fake_api.get_object("kopfexamples", "kopf-example-1", "default")
    assert calls == [1]
    assert first["status"]["create_fn"] == {"run": 1}
    assert DIFFBASE not in (first["metadata"].get("annotations") or {})

    fake_api.clear_injections()
    second = operator()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(second.main)
        with trio.fail_after(60):
            while DIFFBASE not in (  # noqa: ASYNC110 -- polling what the fake API holds
                fake_api.get_object("kopfexamples", "kopf-example-1", "default")["metadata"].get(
                    "annotations"
                )
                or {}
            ):
                await trio.sleep(0.01)
        second.stop()

    # At-least-once: the handler ran again (a creation, since nothing marked it handled), and
    # the object ends with its result and the mark.
    final = fake_api.get_object("kopfexamples", "kopf-example-1", "default")
    assert calls == [1, 2]
    assert final["status"]["create_fn"] == {"run": 2}
    assert json.loads(final["metadata"]["annotations"][DIFFBASE])["spec"] == obj["spec"]
