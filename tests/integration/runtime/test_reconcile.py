"""``on.reconcile`` (trioperator's own handler kind) in a running operator on the fake API.

Children are made by the handler through the operator's own API client (a POST), so what the
fake API holds is what a user would see; time runs on trio's mock clock.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._client.errors import APINotFoundError
from trioperator._client.resources import Resource
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.program.operator import Operator

CONFIGMAPS = Resource(
    group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True
)


def _child_of(body: Any) -> dict[str, Any]:
    child: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{body['metadata']['name']}-cm"},
        "data": {"field": body["spec"]["field"]},
    }
    kopf.adopt(child, owner=body)  # the controller ownerReference
    return child


async def _ensure_child(operator: Operator, body: Any) -> bool:
    """Create the owner's ConfigMap if it is missing; True if it was created."""
    assert operator.api is not None
    namespace = body["metadata"]["namespace"]
    try:
        await operator.api.get(CONFIGMAPS, namespace=namespace, name=f"{body.meta['name']}-cm")
    except APINotFoundError:
        await operator.api.create(CONFIGMAPS, namespace=namespace, body=_child_of(body))
        return True
    return False


@pytest.fixture
def settings(settings: OperatorSettings) -> OperatorSettings:
    settings.reconciling.backoff = 2.0
    settings.reconciling.backoff_max = 16.0
    return settings


async def test_deleted_child_reconciles_its_owner_which_recreates_it(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    operators: list[Operator] = []
    runs: list[tuple[str, bool]] = []

    @kopf.on.reconcile("kopfexamples", owns=["configmaps"], registry=registry)
    async def reconcile_fn(body: Any, deleting: bool, **_: Any) -> None:
        created = await _ensure_child(operators[0], body)
        runs.append(("created" if created else "present", deleting))

    running = await run_operator()
    operators.append(running.operator)
    running.create()
    has_child = lambda: running.api.has_object("configmaps", "kopf-example-1-cm", "default")  # noqa: E731
    await running.wait_for(has_child, limit=10)
    child = running.api.get_object("configmaps", "kopf-example-1-cm", "default")
    uid = running.obj()["metadata"]["uid"]
    assert child["metadata"]["ownerReferences"][0]["uid"] == uid
    assert child["metadata"]["ownerReferences"][0]["controller"] is True
    # The child's own ADDED event enqueued the owner once more: it found the child present.
    await running.wait_for(lambda: ("present", False) in runs, limit=10)

    runs.clear()
    running.api.delete_object("configmaps", "kopf-example-1-cm", "default")
    await running.wait_for(has_child, limit=10)
    assert ("created", False) in runs
    restored = running.api.get_object("configmaps", "kopf-example-1-cm", "default")
    assert restored["metadata"]["uid"] != child["metadata"]["uid"]
    assert restored["data"] == {"field": "value"}


async def test_child_of_another_kind_or_not_controlled_does_not_enqueue(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    runs: list[str] = []

    # Async, for the sleep to show that no other run comes: a wrongly enqueued run is then a
    # trio task, which the autojump clock waits for (a sync handler's thread it does not).
    @kopf.on.reconcile("kopfexamples", owns=["configmaps"], registry=registry)
    async def reconcile_fn(name: str, **_: Any) -> None:
        runs.append(name)

    running = await run_operator()
    owner = running.create()
    await running.wait_for(lambda: runs == ["kopf-example-1"], limit=10)
    reference = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "name": "kopf-example-1",
        "uid": owner["metadata"]["uid"],
    }
    for name, extra in [("plain", {}), ("stale", {"controller": True, "uid": "another-uid"})]:
        running.api.create_object(
            "configmaps",
            {"metadata": {"name": name, "ownerReferences": [{**reference, **extra}]}},
            "default",
        )
    await trio.sleep(30)
    assert runs == ["kopf-example-1"]  # neither a non-controller nor a namesake's child counts


async def test_mapped_object_change_reconciles_the_mapped_owner(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    runs: list[str] = []

    def by_label(body: Any, **_: Any) -> list[str]:
        target = body["metadata"].get("labels", {}).get("for")
        return [target] if target else []

    # Async, for the last sleep to show that no third run comes (a sync handler's thread is
    # not waited for by the autojump clock).
    @kopf.on.reconcile("kopfexamples", watches={"secrets": by_label}, registry=registry)
    async def reconcile_fn(name: str, **_: Any) -> None:
        runs.append(name)

    running = await run_operator()
    running.create()
    running.create(name="kopf-example-2")
    await running.wait_for(lambda: sorted(runs) == ["kopf-example-1", "kopf-example-2"], limit=10)
    runs.clear()
    secret = {"metadata": {"name": "s1", "labels": {"for": "kopf-example-2"}}, "data": {}}
    running.api.create_object("secrets", secret, "default")
    await running.wait_for(lambda: runs == ["kopf-example-2"], limit=10)
    running.api.patch_object("secrets", "s1", {"data": {"x": "eQ=="}}, "default")
    await running.wait_for(lambda: runs == ["kopf-example-2"] * 2, limit=10)
    await trio.sleep(30)
    assert runs == ["kopf-example-2"] * 2


async def test_requeue_runs_again_after_the_delay_on_the_mock_clock(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    times: list[float] = []

    @kopf.on.reconcile("kopfexamples", registry=registry)
    async def reconcile_fn(**_: Any) -> kopf.Requeue | None:
        times.append(trio.current_time())
        return kopf.Requeue(after=45) if len(times) < 3 else None

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(times) == 3, limit=200)
    await trio.sleep(300)
    assert len(times) == 3  # no requeue asked by the last run: no more runs
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert gaps == [pytest.approx(45, abs=0.1)] * 2


async def test_errors_back_off_exponentially_per_object_up_to_the_cap(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    times: list[float] = []

    @kopf.on.reconcile("kopfexamples", registry=registry)
    async def reconcile_fn(**_: Any) -> None:
        times.append(trio.current_time())
        if len(times) < 7:
            raise RuntimeError("not yet")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(times) == 7, limit=200)
    await trio.sleep(100)
    assert len(times) == 7  # succeeded: no more retries
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # settings: 2 s, doubling, capped at 16 s.
    assert gaps == [pytest.approx(g, abs=0.1) for g in (2, 4, 8, 16, 16, 16)]


async def test_resync_runs_every_object_again(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    runs: list[tuple[str, float]] = []

    @kopf.on.reconcile("kopfexamples", resync=100, registry=registry)
    async def reconcile_fn(name: str, **_: Any) -> None:
        runs.append((name, trio.current_time()))

    running = await run_operator()
    start = trio.current_time()
    running.create()
    running.create(name="kopf-example-2")
    await running.wait_for(lambda: len(runs) == 2, limit=10)
    await trio.sleep(250 - (trio.current_time() - start))
    names = sorted(name for name, _ in runs)
    assert names == sorted(["kopf-example-1", "kopf-example-2"] * 3)


async def test_generation_changed_skips_status_writes_on_reconcile(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    runs: list[Any] = []

    # Async, for the sleep to show that no run comes (a sync handler's thread is not waited
    # for by the autojump clock).
    @kopf.on.reconcile("kopfexamples", when=kopf.generation_changed, registry=registry)
    async def reconcile_fn(spec: Any, **_: Any) -> None:
        runs.append(spec["field"])

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: runs == ["value"], limit=10)
    running.api.patch_object("kopfexamples", "kopf-example-1", {"status": {"x": 1}}, "default")
    running.patch({"metadata": {"labels": {"c": "d"}}})
    await trio.sleep(30)
    assert runs == ["value"]
    running.patch({"spec": {"field": "other"}})
    await running.wait_for(lambda: runs == ["value", "other"], limit=10)


async def test_generation_changed_on_a_kopf_update_handler_ignores_metadata_writes(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    updates: list[Any] = []

    # Async, for the sleep to show that no update runs (a sync handler's thread is not waited
    # for by the autojump clock).
    @kopf.on.update("kopfexamples", when=kopf.generation_changed, registry=registry)
    async def update_fn(spec: Any, **_: Any) -> None:
        updates.append(spec["field"])

    @kopf.on.create("kopfexamples", registry=registry)
    async def create_fn(**_: Any) -> None:
        pass

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: "last-handled-configuration" in str(running.obj()), limit=10)
    running.patch({"status": {"phase": "Running"}})
    running.patch({"metadata": {"labels": {"c": "d"}, "annotations": {"note": "x"}}})
    await trio.sleep(30)
    assert updates == []
    running.patch({"spec": {"field": "changed"}})
    await running.wait_for(lambda: updates == ["changed"], limit=10)


async def test_observed_generation_and_conditions_are_written(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: OperatorSettings,
) -> None:
    settings.reconciling.observed_generation = True

    @kopf.on.reconcile("kopfexamples", registry=registry)
    async def reconcile_fn(body: Any, patch: Any, **_: Any) -> None:
        ready = body["spec"]["field"] == "ready"
        kopf.conditions.set_condition(
            patch, "Ready", ready, reason="Checked" if ready else "Waiting", body=body
        )

    running = await run_operator()
    running.create()
    status = lambda: running.obj().get("status", {})  # noqa: E731
    await running.wait_for(lambda: "conditions" in status(), limit=10)
    first = status()["conditions"][0]
    assert first["type"] == "Ready"
    assert first["status"] == "False"
    assert status()["observedGeneration"] == running.obj()["metadata"]["generation"]
    await trio.sleep(20)
    # Converged: its own status write woke it once more, and that run wrote nothing new.
    writes = len(running.writes())
    await trio.sleep(60)
    assert len(running.writes()) == writes
    running.patch({"spec": {"field": "ready"}})
    await running.wait_for(lambda: status()["conditions"][0]["status"] == "True", limit=10)
    second = status()["conditions"][0]
    assert second["reason"] == "Checked"
    assert second["lastTransitionTime"] != first["lastTransitionTime"]
    assert second["observedGeneration"] == running.obj()["metadata"]["generation"]
    assert status()["observedGeneration"] == running.obj()["metadata"]["generation"]


async def test_a_run_for_an_object_being_deleted_is_told_so(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    runs: list[bool] = []

    @kopf.on.reconcile("kopfexamples", registry=registry)
    def reconcile_fn(deleting: bool, **_: Any) -> None:
        runs.append(deleting)

    @kopf.on.delete("kopfexamples", registry=registry)
    def delete_fn(**_: Any) -> None:
        # The finalizer is held until a reconcile run has seen the deletion: the two run in
        # tasks of their own, and the object could otherwise be gone before that run comes
        # (it did when the handlers' threads were slow to start).
        if True not in runs:
            raise kopf.TemporaryError("no reconcile run has seen the deletion yet", delay=1)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: runs[:1] == [False], limit=10)
    running.delete()
    await running.wait_for(lambda: True in runs, limit=30)
    await running.wait_for(lambda: not running.exists(), limit=30)
    assert runs[0] is False


async def test_changes_during_a_run_coalesce_into_one_more_run(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: list[Any] = []
    active: list[int] = [0, 0]  # now, at most

    @kopf.on.reconcile("kopfexamples", registry=registry)
    async def reconcile_fn(spec: Any, **_: Any) -> None:
        active[0] += 1
        active[1] = max(active)
        seen.append(spec["field"])
        await trio.sleep(10 if len(seen) == 1 else 0)
        active[0] -= 1

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen == ["value"], limit=5)
    for number in range(5):  # while the first run sleeps
        running.patch({"spec": {"field": f"v{number}"}})
        await trio.sleep(1)
    await trio.sleep(60)
    assert seen == ["value", "v4"]  # one more run, on the newest state
    assert active[1] == 1


async def test_child_resources_get_no_workers_and_timers_exist_only_for_reconcilers(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    runs: list[str] = []

    @kopf.on.reconcile("kopfexamples", owns=["configmaps"], registry=registry)
    def reconcile_fn(name: str, **_: Any) -> None:
        runs.append(name)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: runs == ["kopf-example-1"], limit=10)
    for number in range(5):
        running.api.create_object("configmaps", {"metadata": {"name": f"cm{number}"}}, "default")
    await trio.sleep(1)
    assert not [name for name in running.worker_tasks() if "configmaps" in name]
    [timers] = running.tasks("reconcile timers")  # one: for the reconciled resource only
    assert "kopfexamples" in timers
    await running.stop()
    assert running.tasks("reconcile timers") == []
    assert running.worker_tasks() == []


async def test_without_reconcile_handlers_no_reconcile_machinery_runs(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    created: list[str] = []

    @kopf.on.create("kopfexamples", registry=registry)
    def create_fn(name: str, **_: Any) -> None:
        created.append(name)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: created == ["kopf-example-1"], limit=10)
    assert running.tasks("reconcile timers") == []
    assert running.operator.context is not None
    assert len(running.operator.context.reconcilers) == 0


async def test_a_stop_lets_a_running_reconcile_finish_and_starts_no_more(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    events: list[str] = []

    @kopf.on.reconcile("kopfexamples", resync=0.5, registry=registry)
    async def reconcile_fn(**_: Any) -> None:
        events.append("started")
        await trio.sleep(1)  # within settings.queueing.exit_timeout (2 s)
        events.append("finished")

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: events == ["started"], limit=10)
    await running.stop()
    assert events == ["started", "finished"]
    assert running.tasks("reconcile timers") == []
    assert running.worker_tasks() == []


async def test_label_filters_apply_to_every_request_and_an_unmatched_object_is_left_alone(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: OperatorSettings,
) -> None:
    settings.reconciling.observed_generation = True
    runs: list[str] = []

    # Async: the mock clock jumps while a sync handler's thread runs, skipping resyncs.
    @kopf.on.reconcile("kopfexamples", labels={"a": "b"}, resync=10, registry=registry)
    async def reconcile_fn(name: str, **_: Any) -> None:
        runs.append(name)

    running = await run_operator()
    running.create()
    running.create(name="other", labels={"a": "c"})
    await trio.sleep(35)  # several resyncs
    assert set(runs) == {"kopf-example-1"}
    assert len(runs) >= 3
    assert "observedGeneration" in running.obj()["status"]
    assert "status" not in running.obj("other")
