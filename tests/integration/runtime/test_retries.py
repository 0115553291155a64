"""Handler errors: retries, delays (exact in mock time), limits, timeouts and error modes."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import pytest
import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
RECORD = "kopf.zalando.org/create_fn"
TOUCH = "kopf.zalando.org/touch-dummy"


def annotations_of(running: Any) -> dict[str, str]:
    return dict(running.obj()["metadata"].get("annotations", {}))


def handled(running: Any) -> bool:
    return DIFFBASE in annotations_of(running)


async def test_temporary_error_retries_after_its_delay_via_the_touch_dummy(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    attempts: list[float] = []
    records: list[dict[str, Any]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(retry: int, annotations: Any, **_: Any) -> str:
        attempts.append(trio.current_time())
        if RECORD in annotations:
            records.append(json.loads(annotations[RECORD]))
        if retry == 0:
            raise kopf.TemporaryError("not ready", delay=10)
        return "done"

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))

    assert len(attempts) == 2
    assert attempts[1] - attempts[0] == pytest.approx(10, abs=1e-5)
    # What the second attempt found on the object: the record of the first attempt.
    assert len(records) == 1
    record = records[0]
    started = datetime.datetime.fromisoformat(record.pop("started"))
    delayed = datetime.datetime.fromisoformat(record.pop("delayed"))
    assert delayed - started == datetime.timedelta(seconds=10)
    assert record == {
        "purpose": "create",
        "retries": 1,
        "success": False,
        "failure": False,
        "message": "not ready",
    }
    # Nothing changed the object meanwhile: the sleep ended with the touch-dummy patch.
    writes = [body for _, sub, body in running.writes() if sub == ""]
    assert [set(body["metadata"]["annotations"]) for body in writes] == [
        {RECORD},
        {TOUCH},
        {RECORD, TOUCH, DIFFBASE},  # the record purged, the touch-dummy removed
    ]
    assert writes[2]["metadata"]["annotations"][RECORD] is None
    assert writes[2]["metadata"]["annotations"][TOUCH] is None
    assert running.obj()["status"]["create_fn"] == "done"
    assert logs.times("Sleeping for 10.0 seconds for the delayed handlers.") == [
        pytest.approx(attempts[0], abs=1e-5)
    ]
    logs.assert_in_order(
        "Handler 'create_fn' failed temporarily: not ready",
        "Sleeping for 10.0 seconds",
        "Handler 'create_fn' succeeded.",
        "Creation is processed: 1 succeeded; 0 failed.",
    )


async def test_arbitrary_exception_retries_after_the_backoff(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", backoff=3, registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        attempts.append(trio.current_time())
        if retry < 2:
            raise ValueError("boom")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    assert [t - attempts[0] for t in attempts] == pytest.approx([0, 3, 6], abs=1e-5)
    assert logs.count("Handler 'create_fn' failed with an exception") == 2


async def test_default_backoff_comes_from_the_settings(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.execution.default_backoff = 7
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        attempts.append(trio.current_time())
        if retry < 1:
            raise ValueError("boom")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    assert [t - attempts[0] for t in attempts] == pytest.approx([0, 7], abs=1e-5)


async def test_retries_limit_fails_permanently_without_waiting_for_a_pointless_retry(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", retries=2, registry=registry)
    async def create_fn(**_: Any) -> None:
        attempts.append(trio.current_time())
        raise kopf.TemporaryError("not ready", delay=5)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    await trio.sleep(60)
    assert [t - attempts[0] for t in attempts] == pytest.approx([0, 5], abs=1e-5)
    logs.assert_in_order(
        "Handler 'create_fn' failed temporarily: not ready",
        # Kopf's words: the 2nd attempt fails for good, rather than wait for a pointless 3rd.
        "Handler 'create_fn' failed temporarily but will exceed 2 retries: not ready",
        "Creation is processed: 0 succeeded; 1 failed.",
    )
    # The failed change is done with: the records are purged, the diff-base stored.
    assert RECORD not in annotations_of(running)


async def test_timeout_cancels_a_slow_async_handler(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    started: list[float] = []
    finished: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", timeout=5, registry=registry)
    async def create_fn(**_: Any) -> None:
        started.append(trio.current_time())
        await trio.sleep(100)
        finished.append(trio.current_time())

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    assert len(started) == 1
    assert finished == []
    assert logs.times("Creation is processed: 0 succeeded; 1 failed.") == [
        pytest.approx(started[0] + 5, abs=1e-5)
    ]
    assert logs.count("Handler 'create_fn' failed permanently") == 1


async def test_timeout_across_temporary_errors_is_looked_ahead(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", timeout=15, registry=registry)
    async def create_fn(**_: Any) -> None:
        attempts.append(trio.current_time())
        raise kopf.TemporaryError("not ready", delay=10)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    # The 2nd attempt at 10 s would be retried at 20 s, after the timeout: it fails at once.
    assert [t - attempts[0] for t in attempts] == pytest.approx([0, 10], abs=1e-5)
    message = "Handler 'create_fn' failed temporarily but will time out after 15 seconds"
    assert logs.count(f"{message}: not ready") == 1


async def test_permanent_error_is_not_retried(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        attempts.append(trio.current_time())
        raise kopf.PermanentError("never")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    await trio.sleep(100)
    assert len(attempts) == 1
    assert logs.count("Handler 'create_fn' failed permanently: never") == 1
    assert "create_fn" not in (running.obj().get("status") or {})  # no result delivered


@pytest.mark.parametrize(
    ("mode", "succeeded", "failed"),
    [(kopf.ErrorsMode.IGNORED, 1, 0), (kopf.ErrorsMode.PERMANENT, 0, 1)],
)
async def test_errors_mode_decides_about_arbitrary_exceptions(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
    mode: kopf.ErrorsMode,
    succeeded: int,
    failed: int,
) -> None:
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", errors=mode, registry=registry)
    async def create_fn(**_: Any) -> None:
        attempts.append(trio.current_time())
        raise ValueError("boom")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: handled(running))
    await trio.sleep(100)
    assert len(attempts) == 1
    assert logs.count(f"Creation is processed: {succeeded} succeeded; {failed} failed.") == 1


async def test_long_delays_are_slept_in_portions_of_ten_minutes(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    attempts: list[float] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        attempts.append(trio.current_time())
        if retry == 0:
            raise kopf.TemporaryError("much later", delay=1000)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: bool(attempts))
    t0 = attempts[0]

    def touches() -> int:
        return sum(1 for _, _, body in running.writes() if TOUCH in str(body))

    await trio.sleep(599)
    assert touches() == 0
    await trio.sleep(2)
    assert touches() == 1  # at 600 s: touched, woken up, and sleeping for the rest
    assert logs.count("Sleeping for 1000.0 (capped 600) seconds for the delayed handlers.") == 1
    await trio.sleep(398)
    assert len(attempts) == 1
    await running.wait_for(lambda: handled(running))
    assert [t - t0 for t in attempts] == pytest.approx([0, 1000], abs=1e-5)
    assert logs.count("Sleeping for 400.0 seconds for the delayed handlers.") == 1


async def test_retries_used_up_before_a_restart_fail_without_invoking_again(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    """A record left by an earlier process (Kopf's or ours) at the limit: logged as Kopf logs it."""
    calls: list[int] = []

    @kopf.on.create("kopfexamples", id="create_fn", retries=3, registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        calls.append(retry)

    record = {"started": "2026-03-01T12:00:00+00:00", "purpose": "create", "retries": 3,
              "success": False, "failure": False, "message": "boom"}  # fmt: skip
    running = await run_operator()
    running.create(annotations={RECORD: json.dumps(record)})
    await running.wait_for(lambda: handled(running))
    assert calls == []
    assert logs.count("Handler 'create_fn' has exceeded 3 retries.") == 1
    assert logs.count("Creation is processed: 0 succeeded; 1 failed.") == 1


async def test_a_timeout_passed_before_a_restart_fails_without_invoking_again(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    calls: list[int] = []

    @kopf.on.create("kopfexamples", id="create_fn", timeout=60, registry=registry)
    async def create_fn(retry: int, **_: Any) -> None:
        calls.append(retry)

    record = {"started": "2020-01-01T00:00:00+00:00", "purpose": "create", "retries": 1,
              "success": False, "failure": False, "message": "boom"}  # fmt: skip
    running = await run_operator()
    running.create(annotations={RECORD: json.dumps(record)})
    await running.wait_for(lambda: handled(running))
    assert calls == []
    # Kopf's words, with the runtime as a timedelta ("2155 days, 12:00:00.123456").
    pattern = re.compile(r"Handler 'create_fn' has timed out after \d+ days, [\d:.]+\.$")
    assert len([m for m in logs.messages() if pattern.search(m)]) == 1
