"""In-memory indices: population, removal, error modes, kwargs, and the readiness gate."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._engine.indexing import Index, Store

from .conftest import OBJ

NS = "default"


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "labels": {"app": "x"}}, "data": data}


def snapshot(index: Any) -> dict[Any, list[Any]]:
    return {key: sorted(store, key=repr) for key, store in index.items()}


async def test_scalars_go_under_none_and_dicts_are_merged_by_key(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    seen: dict[str, Any] = {}

    @kopf.index("configmaps", id="names", registry=registry)
    async def names(name: str, **_: Any) -> Any:
        return name

    @kopf.index("configmaps", id="by_value", registry=registry)
    async def by_value(name: str, body: Any, **_: Any) -> Any:
        return {value: name for value in body.get("data", {}).values()}

    @kopf.index("configmaps", id="nested", registry=registry)
    async def nested(name: str, **_: Any) -> Any:
        return {"all": {"name": name}}

    @kopf.index("configmaps", id="nothing", registry=registry)
    async def nothing(**_: Any) -> Any:
        return None

    @kopf.on.event("kopfexamples", registry=registry)
    async def grab(**kwargs: Any) -> None:
        seen.update({key: kwargs[key] for key in ("names", "by_value", "nested", "nothing")})

    fake_api.create_object("configmaps", configmap("cm1", a="red", b="blue"))
    fake_api.create_object("configmaps", configmap("cm2", a="red"))
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen)

    assert isinstance(seen["names"], Index)
    assert snapshot(seen["names"]) == {None: ["cm1", "cm2"]}
    assert snapshot(seen["by_value"]) == {"red": ["cm1", "cm2"], "blue": ["cm1"]}
    assert snapshot(seen["nested"]) == {"all": [{"name": "cm1"}, {"name": "cm2"}]}
    assert snapshot(seen["nothing"]) == {}  # exists, empty
    store = seen["names"][None]
    assert isinstance(store, Store)
    assert len(store) == 2
    assert "cm1" in store
    assert "cm3" not in store
    assert None not in seen["by_value"]
    with pytest.raises(TypeError):
        seen["names"][None] = store  # read-only


async def test_index_population_updates_and_removals(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    seen: dict[str, Any] = {}

    @kopf.index("configmaps", id="by_color", labels={"app": "x"}, registry=registry)
    async def by_color(name: str, body: Any, **_: Any) -> Any:
        return {color: name for color in body.get("data", {}).values()}

    @kopf.index("configmaps", id="maybe", registry=registry)
    async def maybe(name: str, body: Any, **_: Any) -> Any:
        return None if body.get("data", {}).get("skip") else name

    @kopf.on.event("kopfexamples", registry=registry)
    async def grab(by_color: Any, maybe: Any, **_: Any) -> None:
        seen["by_color"], seen["maybe"] = by_color, maybe

    fake_api.create_object("configmaps", configmap("cm1", a="red", b="blue"))
    fake_api.create_object("configmaps", configmap("cm2", a="red"))
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen)
    colors, maybes = seen["by_color"], seen["maybe"]
    assert snapshot(colors) == {"red": ["cm1", "cm2"], "blue": ["cm1"]}
    assert snapshot(maybes) == {None: ["cm1", "cm2"]}

    # Updates replace the object's values: keys it no longer returns lose them.
    fake_api.patch_object("configmaps", "cm1", {"data": {"a": "green", "b": None}}, NS)
    await running.wait_for(lambda: "green" in colors)
    assert snapshot(colors) == {"red": ["cm2"], "green": ["cm1"]}

    # None means "no opinion": the previous values stay.
    fake_api.patch_object("configmaps", "cm2", {"data": {"skip": "yes"}}, NS)
    await running.wait_for(lambda: "yes" in colors)
    assert snapshot(maybes) == {None: ["cm1", "cm2"]}

    # Not matching the filters any more: the object's values go (from that index only).
    fake_api.patch_object("configmaps", "cm1", {"metadata": {"labels": {"app": "y"}}}, NS)
    await running.wait_for(lambda: "green" not in colors)
    assert snapshot(colors) == {"red": ["cm2"], "yes": ["cm2"]}
    assert snapshot(maybes) == {None: ["cm1", "cm2"]}

    # Deleted: gone from every index.
    fake_api.delete_object("configmaps", "cm2", NS)
    await running.wait_for(lambda: "red" not in colors)
    assert snapshot(colors) == {}
    assert snapshot(maybes) == {None: ["cm1"]}
    assert not colors


async def test_values_are_kept_while_deletion_is_pending(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: dict[str, Any] = {}

    @kopf.index("kopfexamples", id="kexes", registry=registry)
    async def kexes(name: str, **_: Any) -> Any:
        return name

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(kexes: Any, **_: Any) -> None:
        seen["during deletion"] = snapshot(kexes)
        seen["index"] = kexes

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: running.obj()["metadata"].get("finalizers"))
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert seen["during deletion"] == {None: ["kopf-example-1"]}
    await running.wait_for(lambda: not seen["index"])


async def test_indices_override_framework_kwargs_of_the_same_name(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    seen: list[Any] = []

    @kopf.index("configmaps", id="labels", registry=registry)
    async def labels_index(name: str, **_: Any) -> Any:
        return name

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(labels: Any, **_: Any) -> None:
        seen.append(labels)

    fake_api.create_object("configmaps", configmap("cm1"))
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen)
    assert isinstance(seen[0], Index)
    assert snapshot(seen[0]) == {None: ["cm1"]}


async def test_a_timer_sees_the_index_of_another_resource(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    counts: list[int] = []

    @kopf.index("pods", id="pod_names", registry=registry)
    async def pod_names(name: str, **_: Any) -> Any:
        return name

    @kopf.timer("kopfexamples", id="tick", interval=10, registry=registry)
    async def tick(pod_names: Any, **_: Any) -> None:
        counts.append(len(pod_names.get(None, [])))

    pod = {"metadata": {"name": "p1", "namespace": NS}, "spec": {"containers": [{"name": "c"}]}}
    fake_api.create_object("pods", pod)
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: counts)
    pod["metadata"]["name"] = "p2"
    fake_api.create_object("pods", pod)
    await running.wait_for(lambda: len(counts) >= 2)
    assert counts[:2] == [1, 2]


async def test_ignored_errors_keep_the_stale_values(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    seen: dict[str, Any] = {}

    @kopf.index("configmaps", id="idx", registry=registry)
    async def idx(body: Any, **_: Any) -> Any:
        if body.get("data", {}).get("fail"):
            raise ValueError("boom")
        return dict(body.get("data", {}))

    @kopf.on.event("kopfexamples", registry=registry)
    async def grab(idx: Any, **_: Any) -> None:
        seen["idx"] = idx

    fake_api.create_object("configmaps", configmap("cm1", a="1"))
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen)
    fake_api.patch_object("configmaps", "cm1", {"data": {"a": "2", "fail": "yes"}}, NS)
    await trio.sleep(1)
    assert snapshot(seen["idx"]) == {"a": ["1"]}  # stale, but kept


@pytest.mark.parametrize(
    "raising",
    [
        pytest.param(lambda: kopf.PermanentError("no"), id="PermanentError"),
        pytest.param(lambda: ValueError("no"), id="errors=PERMANENT"),
    ],
)
async def test_permanent_errors_remove_and_exclude_for_good(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    fake_api: Any,
    raising: Any,
) -> None:
    seen: dict[str, Any] = {}
    calls: list[str] = []

    @kopf.index("configmaps", id="idx", errors=kopf.ErrorsMode.PERMANENT, registry=registry)
    async def idx(body: Any, **_: Any) -> Any:
        calls.append(body["data"]["a"])
        if body["data"]["a"] == "bad":
            raise raising()
        return body["data"]["a"]

    @kopf.on.event("kopfexamples", registry=registry)
    async def grab(idx: Any, **_: Any) -> None:
        seen["idx"] = idx

    fake_api.create_object("configmaps", configmap("cm1", a="good"))
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen)
    assert snapshot(seen["idx"]) == {None: ["good"]}
    fake_api.patch_object("configmaps", "cm1", {"data": {"a": "bad"}}, NS)
    await running.wait_for(lambda: not seen["idx"])
    fake_api.patch_object("configmaps", "cm1", {"data": {"a": "fine"}}, NS)
    await trio.sleep(100)
    assert calls == ["good", "bad"]  # never called again for that object
    assert not seen["idx"]


async def test_temporary_errors_remove_and_exclude_until_the_delay(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    seen: dict[str, Any] = {}
    calls: list[tuple[float, str, int]] = []

    @kopf.index("configmaps", id="idx", registry=registry)
    async def idx(body: Any, retry: int, **_: Any) -> Any:
        calls.append((trio.current_time(), body["data"]["a"], retry))
        if body["data"]["a"] == "bad":
            raise kopf.TemporaryError("later", delay=30)
        return body["data"]["a"]

    @kopf.on.event("kopfexamples", registry=registry)
    async def grab(idx: Any, **_: Any) -> None:
        seen["idx"] = idx

    fake_api.create_object("configmaps", configmap("cm1", a="good"))
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen)
    start = trio.current_time()
    fake_api.patch_object("configmaps", "cm1", {"data": {"a": "bad"}}, NS)
    await running.wait_for(lambda: not seen["idx"])
    await trio.sleep(10)
    fake_api.patch_object("configmaps", "cm1", {"data": {"a": "fixed"}}, NS)  # still excluded
    await trio.sleep(25)
    assert not seen["idx"]
    fake_api.patch_object("configmaps", "cm1", {"data": {"a": "again"}}, NS)  # after the delay
    await running.wait_for(lambda: bool(seen["idx"]))
    assert snapshot(seen["idx"]) == {None: ["again"]}
    assert [(value, retry) for _, value, retry in calls] == [
        ("good", 0),
        ("bad", 0),
        ("again", 1),
    ]
    assert calls[2][0] - start >= 30


async def test_temporary_errors_with_retries_exclude_for_good_at_the_limit(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    calls: list[int] = []

    @kopf.index(
        "configmaps",
        id="idx",
        errors=kopf.ErrorsMode.TEMPORARY,
        backoff=0,
        retries=2,
        registry=registry,
    )
    async def idx(retry: int, **_: Any) -> Any:
        calls.append(retry)
        raise ValueError("always")

    fake_api.create_object("configmaps", configmap("cm1", a="0"))
    await run_operator()
    for value in range(1, 6):
        fake_api.patch_object("configmaps", "cm1", {"data": {"a": str(value)}}, NS)
        await trio.sleep(1)
    assert calls == [0, 1]


async def test_objects_deleted_while_the_stream_was_down_are_dropped_on_relisting(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    seen: dict[str, Any] = {}

    @kopf.index("configmaps", id="idx", registry=registry)
    async def idx(name: str, **_: Any) -> Any:
        return name

    @kopf.on.event("kopfexamples", registry=registry)
    async def grab(idx: Any, **_: Any) -> None:
        seen["idx"] = idx

    fake_api.create_object("configmaps", configmap("cm1"))
    fake_api.create_object("configmaps", configmap("cm2"))
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: seen)
    assert snapshot(seen["idx"]) == {None: ["cm1", "cm2"]}

    # The DELETED event is lost (the stream is "down"), then the stream expires (410).
    listeners = list(fake_api.store.listeners)
    fake_api.store.listeners[:] = []
    fake_api.delete_object("configmaps", "cm1", NS)
    fake_api.store.listeners[:] = listeners
    await trio.sleep(1)
    assert snapshot(seen["idx"]) == {None: ["cm1", "cm2"]}
    fake_api.inject_watch_error("*/configmaps*", 410)
    await running.wait_for(lambda: snapshot(seen["idx"]) == {None: ["cm2"]})


async def test_handlers_wait_until_everything_is_indexed_even_with_few_workers(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    fake_api: Any,
) -> None:
    # Kopf deadlocks here (kopf#1243): more indexed objects than worker slots.
    settings.queueing.worker_limit = 2
    total = 12
    seen_by_events: list[int] = []
    seen_by_creation: list[int] = []

    @kopf.index("configmaps", id="cms", registry=registry)
    async def cms(name: str, **_: Any) -> Any:
        await trio.sleep(0.1)  # slow enough for anything premature to show up
        return name

    @kopf.on.event("configmaps", registry=registry)
    async def cm_event(cms: Any, **_: Any) -> None:
        seen_by_events.append(len(cms.get(None, [])))

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(cms: Any, **_: Any) -> None:
        seen_by_creation.append(len(cms.get(None, [])))

    for number in range(total):
        fake_api.create_object("configmaps", configmap(f"cm{number}"))
    fake_api.create_object("kopfexamples", copy.deepcopy(OBJ))
    running = await run_operator()
    await running.wait_for(lambda: len(seen_by_events) == total and seen_by_creation)
    assert seen_by_events == [total] * total
    assert seen_by_creation == [total]
    assert running.operator.ready_flag.is_set()


async def test_resources_started_earlier_wait_for_those_indexed_later(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    # The operator starts its watchers one by one (kopfexamples before pods): the objects of the
    # first must not be handled while the later ones are still being listed and indexed.
    seen_by_creation: list[int] = []

    @kopf.index("pods", id="pod_names", registry=registry)
    async def pod_names(name: str, **_: Any) -> Any:
        await trio.sleep(0.5)
        return name

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(pod_names: Any, **_: Any) -> None:
        seen_by_creation.append(len(pod_names.get(None, [])))

    for number in range(5):
        pod = {"metadata": {"name": f"p{number}", "namespace": NS}, "spec": {"containers": []}}
        fake_api.create_object("pods", pod)
    fake_api.create_object("kopfexamples", copy.deepcopy(OBJ))
    running = await run_operator()
    await running.wait_for(lambda: seen_by_creation)
    assert seen_by_creation == [5]


async def test_operator_level_handlers_get_the_indices_too(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    seen: dict[str, Any] = {}

    @kopf.index("configmaps", id="names", registry=registry)
    async def names(name: str, **_: Any) -> Any:
        return name

    @kopf.on.cleanup(registry=registry)
    async def cleanup(names: Any, **_: Any) -> None:
        seen["names"] = snapshot(names)

    fake_api.create_object("configmaps", configmap("cm1", a="red"))
    running = await run_operator()
    running.operator.stop()
    await running.wait_for(running.finished.is_set)
    assert seen == {"names": {None: ["cm1"]}}


# Declared at module level: a handler id is the function's qualified name, and only top-level
# functions have one that is also a usable keyword (as under Kopf).
def kex_by_key(name: str, spec: Any, **_: Any) -> Any:
    return {spec["key"]: name}


def kex_names(name: str, **_: Any) -> Any:
    return name


async def test_indices_with_field_filters_arrive_under_the_function_name_or_id(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: Any
) -> None:
    seen: dict[str, Any] = {}
    kopf.index("kopfexamples", field="spec.key", value=kopf.PRESENT, registry=registry)(kex_by_key)
    kopf.index("kopfexamples", field="spec.key", id="keyed", registry=registry)(kex_names)

    @kopf.on.create("kopfexamples", field="spec.key", registry=registry)
    async def create_fn(name: str, kex_by_key: Any, keyed: Any, **_: Any) -> None:
        seen[name] = (snapshot(kex_by_key), snapshot(keyed))

    running = await run_operator()
    running.create(name="without-key")
    body = copy.deepcopy(OBJ)
    body["spec"]["key"] = "k1"
    running.create(body, name="with-key")
    await running.wait_for(lambda: "with-key" in seen)
    assert seen == {"with-key": ({"k1": ["with-key"]}, {None: ["with-key"]})}
