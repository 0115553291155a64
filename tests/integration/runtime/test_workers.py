"""Per-object workers: they idle out, come back on demand, keep memories, and respect limits."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"


def handled(running: Any, name: str = "kopf-example-1") -> bool:
    return DIFFBASE in running.obj(name)["metadata"].get("annotations", {})


async def test_workers_idle_out_and_come_back_with_their_memo(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.queueing.idle_timeout = 3
    seen: list[Any] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(memo: Any, **_: Any) -> None:
        memo.counter = 1

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(memo: Any, **_: Any) -> None:
        memo.counter += 1
        seen.append(memo.counter)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    assert len(running.workers()) == 1
    await trio.sleep(3.5)
    assert running.workers() == []  # idle for 3 s: gone

    running.patch({"spec": {"field": "changed"}})
    await running.wait_for(lambda: seen == [2])
    assert len(running.workers()) == 1
    await trio.sleep(3.5)
    assert running.workers() == []
    running.patch({"spec": {"field": "again"}})
    await running.wait_for(lambda: seen == [2, 3])


async def test_a_sleeping_worker_does_not_idle_out(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.queueing.idle_timeout = 3
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        attempts.append(trio.current_time())
        if retry == 0:
            raise kopf.TemporaryError("later", delay=20)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(attempts) == 1)
    await trio.sleep(10)
    assert len(running.workers()) == 1  # sleeping for the delayed handler
    await running.wait_for(lambda: handled(running))
    assert attempts[1] - attempts[0] == pytest.approx(20, abs=1e-5)


async def test_a_recreated_object_gets_a_fresh_memo_and_no_worker_is_left(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    memos: list[Any] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(memo: Any, **_: Any) -> None:
        memos.append(dict(memo))
        memo.created = True

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    running.delete()
    await trio.sleep(10)
    running.create()  # the same name, a new object (uid)
    await running.wait_for(lambda: len(memos) == 2)
    assert memos == [{}, {}]
    await trio.sleep(10)
    assert running.workers() == []  # the deleted object's worker is not left behind


async def test_worker_limit_still_serves_all_objects(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.queueing.worker_limit = 1
    settings.queueing.idle_timeout = 1
    running_now: list[str] = []
    overlaps: list[list[str]] = []
    done: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        running_now.append(name)
        overlaps.append(list(running_now))
        await trio.sleep(1)
        running_now.remove(name)
        done.append(name)

    running = await run_operator()
    names = [f"object-{i}" for i in range(4)]
    for name in names:
        running.create(name=name)
    await running.wait_for(lambda: all(handled(running, name) for name in names))
    assert sorted(done) == names
    assert all(len(overlap) == 1 for overlap in overlaps)  # one worker at a time
    assert len(running.workers()) <= len(names)


async def test_an_idle_worker_waits_without_a_task_until_its_idle_timeout(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.queueing.idle_timeout = 3
    seen: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(memo: Any, **_: Any) -> None:
        memo.created = True

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(memo: Any, spec: Any, **_: Any) -> None:
        seen.append(f"{spec['field']} {memo.created}")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    await running.wait_for(lambda: running.worker_tasks() == [])  # idle: parked, no task
    parked_at = trio.current_time()
    assert len(running.workers()) == 1  # ... but alive, as the metric says

    await trio.sleep(2)  # within the idle timeout: the same worker wakes up, with its memory
    running.patch({"spec": {"field": "changed"}})
    await running.wait_for(lambda: seen == ["changed True"])
    await running.wait_for(lambda: running.worker_tasks() == [])
    assert len(running.workers()) == 1
    idle_since = trio.current_time()
    await running.wait_for(lambda: running.workers() == [])
    # At its idle timeout, or later by a tenth of it at most (retirements due together share
    # one wake-up of the retirer).
    assert 3 - 0.05 <= trio.current_time() - idle_since <= 3 + 0.3 + 0.05
    assert trio.current_time() - parked_at > 3


async def test_under_a_worker_limit_an_idle_worker_keeps_its_task_and_slot(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.queueing.worker_limit = 1
    settings.queueing.idle_timeout = 3
    started: dict[str, float] = {}

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        started[name] = trio.current_time()

    running = await run_operator()
    running.create(name="first")
    await running.wait_for(lambda: handled(running, "first"))
    assert len(running.worker_tasks()) == 1  # waiting in its task, holding the only slot
    running.create(name="second")
    await running.wait_for(lambda: handled(running, "second"))
    # The second object got the slot only when the first worker idled out (as in Kopf).
    assert started["second"] - started["first"] >= 3


async def test_a_restart_over_handled_objects_leaves_no_idle_workers_behind(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    logs: Any,
) -> None:
    # A listed object with nothing to do writes nothing, so no echo of ours is coming: its
    # worker ends at once, instead of lingering until idle_timeout (after a restart over
    # thousands of handled objects, all those retirements would come later, together).
    settings.queueing.idle_timeout = 60
    seen: list[str] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(name: str, **_: Any) -> None:
        seen.append(f"created {name}")

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(name: str, **_: Any) -> None:
        seen.append(f"updated {name}")

    first = await run_operator()
    for index in range(1, 4):
        first.create(name=f"kopf-example-{index}")
    await first.wait_for(lambda: all(handled(first, f"kopf-example-{i}") for i in range(1, 4)))
    await first.stop()

    second = await run_operator()  # the restart: a listing of three handled objects
    started = trio.current_time()
    await second.wait_for(lambda: logs.count("we are not interested") >= 3)
    await second.wait_for(lambda: second.workers() == [])
    assert trio.current_time() - started < 1  # not after idle_timeout (60 s)

    second.patch({"spec": {"field": "changed"}}, name="kopf-example-2")  # still served
    await second.wait_for(lambda: "updated kopf-example-2" in seen)
    assert sorted(seen) == [
        "created kopf-example-1",
        "created kopf-example-2",
        "created kopf-example-3",
        "updated kopf-example-2",
    ]
