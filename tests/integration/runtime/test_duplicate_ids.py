"""Two handlers of one resource under one id, as Kopf: registering them is not refused, and
they share one progress record, so the first one registered is run (and its success is the
id's) and the other one is not run for that cause (Kopf's default lifecycle, ``asap``)."""

from __future__ import annotations

from typing import Any

import trio
import trioperator as kopf


async def test_same_id_registered_twice_runs_the_first_one_only(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    ran: list[str] = []

    # Async, for the sleep to show that the second one does not run (the autojump clock does
    # not wait for a sync handler's worker thread).
    @kopf.on.create("kopfexamples", id="same", registry=registry)
    async def first(**_: Any) -> str:
        ran.append("first")
        return "first"

    @kopf.on.create("kopfexamples", id="same", registry=registry)
    async def second(**_: Any) -> str:
        ran.append("second")
        return "second"

    assert [h.id for h in registry.iter_all_handlers()] == ["same", "same"]
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: "same" in (running.obj().get("status") or {}))
    await trio.sleep(60)
    assert ran == ["first"]
    assert running.obj()["status"]["same"] == "first"
