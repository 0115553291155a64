"""Async handlers written for asyncio run on the operator's asyncio loop (trio-asyncio).

The asyncio handlers live in ``asyncio_operator.py`` (a module without trio, so ``auto`` gives
them asyncio); asyncio's timers run on trio's clock there, so the mock clock drives them too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sniffio
import trio
import trioperator as kopf
from tests.integration.runtime import asyncio_operator
from tests.integration.runtime.asyncio_operator import Seen
from tests.integration.runtime.conftest import OBJ
from trioperator.testing import FakeAPI

Reason = kopf.DaemonStoppingReason


async def test_asyncio_handlers_of_every_kind_run_once_on_one_asyncio_loop(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: Seen = {}
    asyncio_operator.register_every_kind(registry, seen)
    running = await run_operator()
    assert seen["startup"] == ["asyncio"]

    running.create()
    await running.wait_for(lambda: "timer" in seen and "daemon" in seen)
    await running.wait_for(lambda: running.obj().get("status", {}).get("create_fn"))
    assert running.obj()["status"]["create_fn"] == {"library": "asyncio"}
    [(create_library, same_loop, loop_id)] = seen["create"]
    assert (create_library, same_loop) == ("asyncio", True)
    assert seen["daemon"] == ["asyncio"]
    [(timer_library, index)] = seen["timer"]
    assert (timer_library, {key: list(store) for key, store in index.items()}) == (
        "asyncio",
        {"kopf-example-1": ["asyncio"]},
    )
    assert set(seen["event"]) == {"asyncio"}

    running.patch({"spec": {"field": "changed"}})
    await running.wait_for(lambda: "update" in seen)
    assert seen["update"] == [("asyncio", loop_id)]  # the same loop for the whole run

    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert seen["delete"] == ["asyncio"]
    assert seen["daemon-stopped"] == [Reason.RESOURCE_DELETED]
    assert "cleanup" not in seen

    await running.stop()
    assert seen["cleanup"] == ["asyncio"]
    assert seen["startup"] == ["asyncio"]
    assert len(seen["create"]) == len(seen["update"]) == len(seen["delete"]) == 1


async def test_a_timeout_and_the_operator_exit_cancel_the_asyncio_tasks(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: Seen = {}
    asyncio_operator.register_cancellable(registry, seen)
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: "slow_fn" in seen)
    assert seen["slow_fn"] == ["asyncio"]  # asyncio.CancelledError after the 10 s timeout
    assert trio.current_time() == pytest.approx(10, abs=1)
    await running.wait_for(lambda: "was cancelled after its timeout" in caplog.text)

    assert "stubborn_daemon" not in seen
    await running.stop()  # the daemon ignores its flag: cancelled after the exit grace
    assert seen["stubborn_daemon"] == ["asyncio"]
    assert seen["slow_fn"] == ["asyncio"]  # not retried


async def test_execute_is_awaitable_from_asyncio_handlers(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: Seen = {}
    asyncio_operator.register_subhandlers(registry, seen)
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: "parent_fn" in seen)
    assert seen == {"sub_a": ["asyncio"], "sub_b": ["thread"], "parent_fn": ["asyncio"]}


async def test_trio_handlers_run_natively_next_to_asyncio_ones(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: Seen = {}
    asyncio_operator.register_overridden(registry, seen)  # flavor="trio" in an asyncio module

    @kopf.on.create("kopfexamples", registry=registry)
    async def native_fn(**_: Any) -> None:
        await trio.sleep(1)  # this module imports trio: auto gives it trio
        seen.setdefault("native_fn", []).append(sniffio.current_async_library())

    @kopf.on.create("kopfexamples", flavor="asyncio", registry=registry)
    async def forced_fn(**_: Any) -> None:
        await asyncio.sleep(1)
        seen.setdefault("forced_fn", []).append(sniffio.current_async_library())

    async def made_by_a_lambda(**_: Any) -> None:
        await trio.sleep(1)
        seen.setdefault("lambda", []).append(sniffio.current_async_library())

    kopf.on.create("kopfexamples", id="lambda_fn", registry=registry)(
        lambda **kwargs: made_by_a_lambda(**kwargs)
    )

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(seen) == 4)
    assert seen == {
        "trio_fn": ["trio"],
        "native_fn": ["trio"],
        "forced_fn": ["asyncio"],
        "lambda": ["trio"],
    }


async def test_the_setting_forces_a_flavor_for_handlers_without_their_own(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.execution.async_flavor = "asyncio"
    seen: Seen = {}
    asyncio_operator.register_overridden(registry, seen)  # its own flavor="trio" wins

    @kopf.on.create("kopfexamples", registry=registry)
    async def neutral_fn(**_: Any) -> None:
        seen.setdefault("neutral_fn", []).append(sniffio.current_async_library())

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(seen) == 2)
    assert seen == {"trio_fn": ["trio"], "neutral_fn": ["asyncio"]}


async def test_no_asyncio_loop_without_asyncio_code(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: list[str] = []

    @kopf.on.create("kopfexamples", registry=registry)
    async def create_fn(**_: Any) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            seen.append("no loop")
        else:
            seen.append("a loop")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen)
    assert seen == ["no loop"]


async def test_asyncio_idioms_of_kopf_operators_work(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: Seen = {}
    asyncio_operator.register_asyncio_idioms(registry, seen)
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: "task" in seen and "sub" in seen and "lambda" in seen)
    assert seen == {
        "executor": ["executor"],
        "to_thread": ["to_thread"],
        "gather": [["a", "b"]],
        "wait_for": ["c"],
        "timeout": ["expired"],
        "task": ["task"],
        "parent": ["asyncio"],
        "sub": ["asyncio"],
        "lambda": ["asyncio"],
    }


async def test_a_failing_asyncio_startup_fails_the_operator_with_its_own_error(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry
) -> None:
    seen: Seen = {}
    asyncio_operator.register_failing_startup(registry, seen)
    vault = kopf.Vault({"fake": kopf.ConnectionInfo(server=fake_api.url, token="fake")})
    operator = kopf.Operator(registry=registry, vault=vault)
    with pytest.raises(kopf.ActivityError, match="startup handlers failed: 'startup_fn'"):
        await operator.main()
    assert seen == {"startup": ["asyncio"]}


async def test_an_asyncio_login_handler_provides_the_credentials(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry
) -> None:
    seen: Seen = {}
    asyncio_operator.register_login(registry, seen, fake_api.url)
    operator = kopf.Operator(registry=registry)  # no credentials: the login handler gives them
    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        with trio.fail_after(60):
            await operator.ready_flag.wait()
        fake_api.create_object("kopfexamples", dict(OBJ))
        with trio.fail_after(60):
            while "create" not in seen:  # noqa: ASYNC110 -- polling what the handler recorded
                await trio.sleep(0.01)
        operator.stop()
    assert seen == {"login": ["asyncio"], "create": ["asyncio"]}
