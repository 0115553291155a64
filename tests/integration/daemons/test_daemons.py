"""Daemons: spawning, the stop flag, staged termination, finalizers, errors, patches, filters."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._engine.stoppers import DaemonStopped, DaemonStoppingReason

from .conftest import OBJ

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
Reason = DaemonStoppingReason


def approx(value: float) -> Any:
    """A time measured after the test itself changed something: the change travels over the
    fake API's loopback HTTP, during which the mock clock may jump by the tests' 10 ms polls."""
    return pytest.approx(value, abs=0.05)


def finalized(running: Any) -> bool:
    return running.exists() and FINALIZER in running.obj()["metadata"].get("finalizers", [])


async def test_async_daemon_runs_until_deletion_and_exits_instantly(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    seen: list[Any] = []

    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    async def monitor(stopped: DaemonStopped, name: str, **_: Any) -> None:
        seen.append(("start", trio.current_time(), name, bool(stopped), stopped.reason))
        while not stopped:
            await stopped.wait(10)
        seen.append(("stop", trio.current_time(), bool(stopped), stopped.reason))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running) and seen)
    assert seen == [("start", 0.0, "kopf-example-1", False, None)]
    assert len(running.daemons()) == 1

    await trio.sleep(100)
    assert len(seen) == 1  # still running, waiting on the flag
    writes_before = len(running.writes())

    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert seen[1] == ("stop", approx(100), True, Reason.RESOURCE_DELETED)
    # The daemon exits at once: the finalizer goes in the very first patch, without sleeping.
    writes = running.writes()[writes_before:]
    assert len(writes) == 1
    assert writes[0][2][1:] == [{"op": "remove", "path": "/metadata/finalizers"}]
    assert running.daemons() == []
    logs.assert_in_order(
        "Adding the finalizer, thus preventing the actual deletion.",
        "Daemon 'monitor' is invoked.",
        "Daemon 'monitor' succeeded.",
        "'monitor' has exited on request and will not be retried or restarted.",
        "Removing the finalizer, thus allowing the actual deletion.",
    )


async def test_sync_daemon_runs_in_a_thread_and_waits_on_the_flag(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    threads: list[Any] = []

    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    def monitor(stopped: DaemonStopped, **_: Any) -> str:
        threads.append(threading.current_thread() is not threading.main_thread())
        while not stopped:
            stopped.wait(0.5)  # real seconds: the thread does not follow the mock clock
        threads.append(stopped.reason)
        return "bye"

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running) and threads)
    assert threads == [True]
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert threads[1] == Reason.RESOURCE_DELETED


async def test_daemon_is_spawned_for_objects_existing_before_the_start(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any, obj: Any
) -> None:
    started: list[str] = []

    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    async def monitor(name: str, stopped: DaemonStopped, **_: Any) -> None:
        started.append(name)
        await stopped.wait()

    fake_api.create_object("kopfexamples", obj)
    obj["metadata"]["name"] = "kopf-example-2"
    fake_api.create_object("kopfexamples", obj)
    running = await run_operator()
    await running.wait_for(lambda: len(started) == 2)
    assert sorted(started) == ["kopf-example-1", "kopf-example-2"]
    await running.stop()


@pytest.mark.parametrize(
    ("initial_delay", "expected"),
    [
        pytest.param(30, 30.0, id="number"),
        pytest.param(lambda spec, **_: spec["delay"], 12.5, id="callable"),
    ],
)
async def test_initial_delay_postpones_the_first_call(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    initial_delay: Any,
    expected: float,
) -> None:
    times: list[float] = []

    @kopf.daemon("kopfexamples", id="monitor", initial_delay=initial_delay, registry=registry)
    async def monitor(stopped: DaemonStopped, **_: Any) -> None:
        times.append(trio.current_time())
        await stopped.wait()

    running = await run_operator()
    body = copy.deepcopy(OBJ)
    body["spec"]["delay"] = 12.5
    running.create(body)
    await running.wait_for(lambda: times)
    assert times == [pytest.approx(expected, abs=0.05)]


async def test_a_stop_during_the_initial_delay_skips_the_call(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[float] = []

    @kopf.daemon("kopfexamples", id="monitor", initial_delay=60, registry=registry)
    async def monitor(**_: Any) -> None:
        calls.append(trio.current_time())

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running))
    await trio.sleep(10)
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert trio.current_time() < 11
    await trio.sleep(100)
    assert calls == []


async def test_graceful_exit_within_the_cancellation_backoff(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    events: list[Any] = []

    @kopf.daemon(
        "kopfexamples",
        id="monitor",
        cancellation_backoff=5,
        cancellation_timeout=10,
        registry=registry,
    )
    async def monitor(stopped: DaemonStopped, **_: Any) -> None:
        await stopped.wait()
        events.append(("flag", trio.current_time()))
        with trio.CancelScope(shield=True):
            await trio.sleep(2)  # a slow but graceful exit
        events.append(("exit", trio.current_time(), stopped.reason))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running) and running.daemons())
    await trio.sleep(10)
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert events == [
        ("flag", approx(10)),
        ("exit", approx(12), Reason.RESOURCE_DELETED | Reason.DAEMON_SIGNALLED),
    ]
    # Released when the daemon ended, not when the backoff is over.
    assert trio.current_time() == approx(12.0)
    assert logs.count("is signalled to exit gracefully") == 1
    assert logs.count("by force") == 0


async def test_async_daemon_is_cancelled_after_the_backoff(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    events: list[Any] = []

    @kopf.daemon(
        "kopfexamples",
        id="monitor",
        cancellation_backoff=1.23,
        cancellation_timeout=10,
        registry=registry,
    )
    async def monitor(stopped: DaemonStopped, **_: Any) -> None:
        try:
            await trio.sleep_forever()  # ignores the flag
        except trio.Cancelled:
            events.append(("cancelled", trio.current_time(), stopped.reason))
            raise

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running) and running.daemons())
    await trio.sleep(10)
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert events == [
        (
            "cancelled",
            approx(11.23),
            Reason.RESOURCE_DELETED | Reason.DAEMON_SIGNALLED | Reason.DAEMON_CANCELLED,
        )
    ]
    assert trio.current_time() == approx(11.23)
    logs.assert_in_order(
        "'monitor' is signalled to exit gracefully.",
        "'monitor' is signalled to exit by force.",
        "Daemon 'monitor' is cancelled. Will escalate.",  # Kopf's words, for those who grep
        "Removing the finalizer, thus allowing the actual deletion.",
    )


async def test_cancelled_daemon_may_take_its_time_within_the_timeout(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    events: list[float] = []

    @kopf.daemon("kopfexamples", id="monitor", cancellation_timeout=4.56, registry=registry)
    async def monitor(**_: Any) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            events.append(trio.current_time())
            with trio.CancelScope(shield=True):
                await trio.sleep(4)  # slow cleanup, still within the timeout
            events.append(trio.current_time())
            raise

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running) and running.daemons())
    running.delete()
    await running.wait_for(lambda: not running.exists())
    # No backoff: cancelled at once; released when it is done.
    assert events == [approx(0), approx(4)]


async def test_disobedient_daemon_is_abandoned_after_the_timeout(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    reasons: list[Any] = []
    done = trio.Event()

    @kopf.daemon(
        "kopfexamples",
        id="monitor",
        cancellation_backoff=1,
        cancellation_timeout=4.56,
        registry=registry,
    )
    async def monitor(stopped: DaemonStopped, **_: Any) -> None:
        with trio.CancelScope(shield=True):  # ignores both the flag and the cancellation
            await done.wait()
        reasons.append(stopped.reason)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running) and running.daemons())
    running.delete()
    with pytest.warns(ResourceWarning, match="'monitor' did not exit in time"):
        await running.wait_for(lambda: not running.exists())
    # The object is released anyway, after the backoff and the timeout.
    assert trio.current_time() == approx(5.56)
    assert logs.count("'monitor' did not exit in time. Leaving it orphaned.") == 1
    assert running.daemons()  # trio cannot let go of a task: it is still there
    done.set()
    await running.wait_for(lambda: not running.daemons())
    assert reasons == [
        Reason.RESOURCE_DELETED
        | Reason.DAEMON_SIGNALLED
        | Reason.DAEMON_CANCELLED
        | Reason.DAEMON_ABANDONED
    ]


async def test_sync_daemon_thread_is_abandoned_after_the_timeout(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    release = threading.Event()
    finished = threading.Event()

    @kopf.daemon("kopfexamples", id="monitor", cancellation_timeout=3, registry=registry)
    def monitor(**_: Any) -> None:
        release.wait(30)  # ignores the flag
        finished.set()

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running) and running.daemons())
    running.delete()
    with pytest.warns(ResourceWarning, match="did not exit in time"):
        await running.wait_for(lambda: not running.exists())
    # trio let go of the thread: the daemon's task is over, the thread still runs.
    await running.wait_for(lambda: not running.daemons())
    assert not finished.is_set()
    release.set()
    await trio.to_thread.run_sync(finished.wait, 5)


async def test_daemon_without_timeout_holds_the_object_until_it_exits(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    logs: Any,
) -> None:
    settings.background.cancellation_polling = 30
    done = trio.Event()

    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    async def monitor(**_: Any) -> None:
        await done.wait()  # ignores the flag, and nothing cancels it

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running) and running.daemons())
    running.delete()
    await trio.sleep(100)
    assert finalized(running)
    assert logs.count("'monitor' is still exiting. The next check is in 30 s.") == 3
    done.set()
    await running.wait_for(lambda: not running.exists())
    assert trio.current_time() == approx(100)


async def test_delete_handlers_run_once_while_a_daemon_holds_the_object(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    deletions: list[float] = []

    @kopf.daemon("kopfexamples", id="monitor", cancellation_backoff=20, registry=registry)
    async def monitor(stopped: DaemonStopped, **_: Any) -> None:
        await stopped.wait()
        with trio.CancelScope(shield=True):
            await trio.sleep(15)

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(**_: Any) -> None:
        deletions.append(trio.current_time())

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: finalized(running) and running.daemons())
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert deletions == [approx(0)]
    assert trio.current_time() == approx(15)


async def test_daemon_exited_on_its_own_is_not_respawned(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    calls: list[float] = []

    @kopf.daemon("kopfexamples", id="once", registry=registry)
    async def once(**_: Any) -> dict[str, Any]:
        calls.append(trio.current_time())
        return {"finished": True}

    @kopf.daemon("kopfexamples", id="forever", registry=registry)
    async def forever(stopped: DaemonStopped, **_: Any) -> None:
        await stopped.wait()

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: running.obj().get("status", {}).get("once"))
    assert running.obj()["status"]["once"] == {"finished": True}
    for value in range(3):
        running.patch({"spec": {"field": f"v{value}"}})
        await trio.sleep(1)
    assert calls == [0.0]
    assert logs.count("'once' has exited on its own and will not be retried or restarted.") == 1
    # It does not hold the object either: the other daemon alone keeps the finalizer.
    running.delete()
    await running.wait_for(lambda: not running.exists())


async def test_temporary_error_restarts_the_daemon_after_the_delay(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[float, int]] = []

    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    async def monitor(retry: int, **_: Any) -> str:
        calls.append((trio.current_time(), retry))
        if retry < 2:
            raise kopf.TemporaryError("not yet", delay=10)
        return "ok"

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: running.obj().get("status", {}).get("monitor") == "ok")
    assert calls == [(0.0, 0), (10.0, 1), (20.0, 2)]


async def test_errors_follow_the_handler_options(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    calls: list[tuple[float, int]] = []

    @kopf.daemon(
        "kopfexamples",
        id="monitor",
        errors=kopf.ErrorsMode.TEMPORARY,
        backoff=3,
        retries=3,
        registry=registry,
    )
    async def monitor(retry: int, **_: Any) -> None:
        calls.append((trio.current_time(), retry))
        raise ValueError("boom")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(calls) == 3)
    await trio.sleep(100)
    assert calls == [(0.0, 0), (3.0, 1), (6.0, 2)]
    message = "Daemon 'monitor' failed with an exception and will stop now"
    assert logs.count(f"{message} (it would exceed 3 retries on the next attempt): boom") == 1


async def test_permanent_error_stops_the_daemon_for_good(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[float] = []

    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    async def monitor(**_: Any) -> None:
        calls.append(trio.current_time())
        raise kopf.PermanentError("never again")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: calls)
    running.patch({"spec": {"field": "changed"}})
    await trio.sleep(100)
    assert calls == [0.0]
    assert running.daemons() == []


async def test_patch_is_applied_after_each_iteration(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    async def monitor(patch: kopf.Patch, retry: int, **_: Any) -> None:
        patch.status["iteration"] = retry
        patch.fns.append(lambda body: body["status"].setdefault("seen", []).append(retry))
        if retry < 2:
            raise kopf.TemporaryError("again", delay=5)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: running.obj().get("status", {}).get("iteration") == 0)
    assert running.obj()["status"]["seen"] == [0]
    assert trio.current_time() < 1
    await running.wait_for(lambda: running.obj().get("status", {}).get("iteration") == 2)
    assert running.obj()["status"]["seen"] == [0, 1, 2]
    assert trio.current_time() == approx(10)


async def test_body_kwargs_are_live_views_of_the_newest_state(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: list[Any] = []

    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    async def monitor(
        stopped: DaemonStopped, spec: Any, body: Any, meta: Any, status: Any, **_: Any
    ) -> None:
        while not stopped:
            labels = meta.labels
            seen.append((spec.get("field"), body["spec"]["field"], labels.get("a"), dict(status)))
            await stopped.wait(10)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen)
    running.patch({"spec": {"field": "new"}, "metadata": {"labels": {"a": "c"}}})
    running.patch({"status": {"x": 1}})
    await trio.sleep(15)
    assert seen[0] == ("value", "value", "b", {})
    assert seen[-1] == ("new", "new", "c", {"x": 1})


async def test_filter_mismatch_stops_and_a_new_match_respawns(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    events: list[Any] = []

    @kopf.daemon("kopfexamples", id="monitor", labels={"a": "b"}, registry=registry)
    async def monitor(stopped: DaemonStopped, **_: Any) -> None:
        events.append(("start", trio.current_time()))
        await stopped.wait()
        events.append(("stop", trio.current_time(), stopped.reason))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: events)
    await trio.sleep(5)
    running.patch({"metadata": {"labels": {"a": "x"}}})
    await running.wait_for(lambda: len(events) == 2)
    await trio.sleep(5)
    running.patch({"metadata": {"labels": {"a": "b"}}})
    await running.wait_for(lambda: len(events) == 3)
    assert events == [
        ("start", approx(0)),
        ("stop", approx(5), Reason.FILTERS_MISMATCH),
        ("start", approx(10)),
    ]
    assert len(running.daemons()) == 1


async def test_operator_exit_stops_daemons(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    events: list[Any] = []

    @kopf.daemon("kopfexamples", id="polite", registry=registry)
    async def polite(stopped: DaemonStopped, **_: Any) -> None:
        await stopped.wait()
        events.append(("polite", trio.current_time(), stopped.reason))

    @kopf.daemon("kopfexamples", id="slow", cancellation_backoff=3, registry=registry)
    async def slow(stopped: DaemonStopped, **_: Any) -> None:
        await stopped.wait()
        with trio.CancelScope(shield=True):
            await trio.sleep(2)
        events.append(("slow", trio.current_time(), stopped.reason))

    @kopf.daemon("kopfexamples", id="deaf", registry=registry)
    async def deaf(**_: Any) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            events.append(("deaf", trio.current_time()))
            raise

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(running.daemons()) == 3)
    await trio.sleep(10)
    await running.stop()
    assert sorted(events, key=lambda event: event[0]) == [
        ("deaf", approx(15)),  # no timeout: cancelled after the grace period of exiting
        ("polite", approx(10), Reason.OPERATOR_EXITING),
        ("slow", approx(12), Reason.OPERATOR_EXITING | Reason.DAEMON_SIGNALLED),
    ]
    assert running.daemons() == []
    # The object keeps its finalizer: the operator is gone, not the object.
    assert finalized(running)


async def test_no_daemons_are_spawned_while_the_operator_stops(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any, obj: Any
) -> None:
    started: list[float] = []

    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    async def monitor(stopped: DaemonStopped, **_: Any) -> None:
        started.append(trio.current_time())
        await stopped.wait()

    @kopf.on.create("kopfexamples", id="slow_create", registry=registry)
    async def slow_create(**_: Any) -> None:
        await trio.sleep(1)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: started)
    running.operator.stop()
    obj["metadata"]["name"] = "late"
    fake_api.create_object("kopfexamples", obj)
    await running.wait_for(running.finished.is_set)
    assert started == [0.0]


async def test_stopped_flag_reason_and_truthiness() -> None:
    from trioperator._runtime.objects.daemon_flags import AsyncDaemonStopped, TrioDaemonStopper

    stopper = TrioDaemonStopper()
    stopped = AsyncDaemonStopped(stopper)
    assert not stopped
    assert not stopped.is_set()
    assert stopped.reason is None
    with trio.move_on_after(1):
        result = await stopped.wait(0.1)
        assert not result
    stopper.set(Reason.RESOURCE_DELETED)
    stopper.set(Reason.DAEMON_SIGNALLED)
    assert stopped
    assert stopped.reason == Reason.RESOURCE_DELETED | Reason.DAEMON_SIGNALLED
    assert await stopped.wait() is stopped
    with pytest.raises(TypeError):
        await stopped  # type: ignore[misc]
    assert "True" in repr(stopped)


def test_sync_flag_waits_in_the_thread() -> None:
    from trioperator._engine.stoppers import DaemonStopper, SyncDaemonStopped

    stopper = DaemonStopper()
    stopped = SyncDaemonStopped(stopper)
    assert stopped.wait(0.01) is stopped
    assert not stopped
    threading.Timer(0.05, stopper.set, args=(Reason.OPERATOR_EXITING,)).start()
    assert stopped.wait(10)
    assert stopped.reason == Reason.OPERATOR_EXITING


async def test_daemons_start_only_once_the_finalizer_is_on_the_object(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    # Otherwise a deletion right after the creation would not wait for the daemon.
    finalizers_at_start: list[list[str]] = []

    @kopf.daemon("kopfexamples", id="monitor", registry=registry)
    async def monitor(stopped: DaemonStopped, **_: Any) -> None:
        finalizers_at_start.append(list(running.obj()["metadata"].get("finalizers", [])))
        await stopped.wait()

    @kopf.timer("kopfexamples", id="ticker", interval=1, registry=registry)
    async def ticker(**_: Any) -> None:
        finalizers_at_start.append(list(running.obj()["metadata"].get("finalizers", [])))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(finalizers_at_start) >= 2)
    assert all(FINALIZER in finalizers for finalizers in finalizers_at_start)
