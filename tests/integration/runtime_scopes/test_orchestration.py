"""Scopes: which (resource, namespace) pairs are served, as namespaces and CRDs come and go."""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._client.watching import WatchHealth
from trioperator._runtime.pipeline.contexts import ResourceContext
from trioperator.testing import FakeAPI

EXAMPLES = "kopfexamples"


def example(name: str, namespace: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": {"field": "value"},
    }


def watched(api: FakeAPI, plural: str = EXAMPLES) -> set[str]:
    """The collection paths of ``plural`` that got watch requests so far."""
    return {
        r.path
        for r in api.requests
        if r.method == "GET" and r.query.get("watch") == "true" and r.path.endswith(f"/{plural}")
    }


def example_path(namespace: str | None) -> str:
    if namespace is None:
        return "/apis/kopf.dev/v1/kopfexamples"
    return f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfexamples"


def creations(registry: kopf.OperatorRegistry) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    # Async, for the tests' sleeps to show that no other object is handled (the autojump clock
    # does not wait for a sync handler's worker thread).
    @kopf.on.create(EXAMPLES, registry=registry)
    async def created(namespace: str, name: str, **_: Any) -> None:
        calls.append((namespace, name))

    return calls


# ---------------------------------------------------------------------------------- namespaces


async def test_existing_matching_namespaces_are_served_and_others_not(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    calls = creations(registry)
    for namespace in ("scope-a", "scope-b", "scope-pr-1", "other"):
        fake_api.create_namespace(namespace)
        fake_api.create_object(EXAMPLES, example("obj", namespace))

    running = await orchestrate("scope-*,!*-pr-*", "default")

    assert running.orchestration.namespaces == {"scope-a", "scope-b", "default"}
    assert running.serving == {(EXAMPLES, "scope-a"), (EXAMPLES, "scope-b"), (EXAMPLES, "default")}
    await running.wait_for(lambda: len(calls) >= 2)
    await trio.sleep(10)
    assert sorted(calls) == [("scope-a", "obj"), ("scope-b", "obj")]
    assert watched(fake_api) == {example_path(ns) for ns in ("scope-a", "scope-b", "default")}


async def test_readiness_comes_after_the_initial_listings(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    creations(registry)
    fake_api.create_namespace("scope-a")
    fake_api.create_namespace("scope-b")

    await orchestrate("scope-*")

    listed = {r.path for r in fake_api.requests if r.method == "GET" and "watch" not in r.query}
    assert {example_path("scope-a"), example_path("scope-b")} <= listed


async def test_new_matching_namespace_gets_served(
    autojump_clock: Any,
    fake_api: FakeAPI,
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
) -> None:
    calls = creations(registry)
    running = await orchestrate("scope-*")
    assert running.serving == set()

    fake_api.create_namespace("scope-new")
    await running.wait_for(lambda: (EXAMPLES, "scope-new") in running.serving)
    fake_api.create_object(EXAMPLES, example("obj", "scope-new"))
    await running.wait_for(lambda: calls)
    assert calls == [("scope-new", "obj")]
    assert logs.count("Serving kopfexamples.v1.kopf.dev in 'scope-new'.", logging.INFO) == 1


async def test_new_namespace_not_matching_is_not_served(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    calls = creations(registry)
    running = await orchestrate("scope-*,!scope-x")

    for namespace in ("other", "scope-x", "scope-y"):
        fake_api.create_namespace(namespace)
        fake_api.create_object(EXAMPLES, example("obj", namespace))
    await running.wait_for(lambda: calls)
    await trio.sleep(10)

    assert calls == [("scope-y", "obj")]
    assert running.serving == {(EXAMPLES, "scope-y")}


async def test_a_separate_negated_pattern_serves_all_other_namespaces(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    # "!scope-x" alone means "*,!scope-x": it serves everything else, whatever "scope-*" says.
    creations(registry)
    for namespace in ("other", "scope-x"):
        fake_api.create_namespace(namespace)
    running = await orchestrate("scope-*", "!scope-x")

    namespaces = {"default", "kube-system", "kube-public", "kube-node-lease", "other", "scope-x"}
    assert running.orchestration.namespaces == namespaces


async def test_deleted_namespace_stops_its_watchers(
    autojump_clock: Any,
    fake_api: FakeAPI,
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
) -> None:
    calls = creations(registry)
    fake_api.create_namespace("scope-a")
    fake_api.create_namespace("scope-b")
    running = await orchestrate("scope-*")
    # namespaces + CRDs + kopfexamples in two namespaces
    await running.wait_for(lambda: fake_api.open_watches == 4)

    fake_api.delete_object("namespaces", "scope-a")
    await running.wait_for(lambda: fake_api.open_watches == 3)

    assert running.serving == {(EXAMPLES, "scope-b")}
    assert logs.count("Stopping kopfexamples.v1.kopf.dev in 'scope-a'.", logging.INFO) == 1
    fake_api.create_object(EXAMPLES, example("obj", "scope-b"))
    await running.wait_for(lambda: calls)
    assert calls == [("scope-b", "obj")]


async def test_terminating_namespace_is_not_served(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    # A foreign finalizer keeps the namespace Terminating (as a bare API server keeps every
    # deleted namespace, having no namespace controller).
    creations(registry)
    fake_api.create_namespace("scope-a")
    fake_api.create_object(EXAMPLES, example("held", "scope-a", finalizers=["example.com/hold"]))
    running = await orchestrate("scope-*")
    await running.wait_for(lambda: fake_api.open_watches == 3)

    fake_api.delete_object("namespaces", "scope-a")
    assert fake_api.get_object("namespaces", "scope-a")["status"]["phase"] == "Terminating"
    await running.wait_for(lambda: fake_api.open_watches == 2)
    assert running.serving == set()
    assert running.orchestration.namespaces == frozenset()


async def test_a_recreated_namespace_is_served_again(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    calls = creations(registry)
    fake_api.create_namespace("scope-a")
    running = await orchestrate("scope-*")

    fake_api.delete_object("namespaces", "scope-a")
    await running.wait_for(lambda: not running.serving)
    fake_api.create_namespace("scope-a")
    await running.wait_for(lambda: running.serving)
    fake_api.create_object(EXAMPLES, example("obj", "scope-a"))
    await running.wait_for(lambda: calls)
    assert calls == [("scope-a", "obj")]


async def test_forbidden_namespaces_fall_back_to_literal_names(
    autojump_clock: Any,
    fake_api: FakeAPI,
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
) -> None:
    calls = creations(registry)
    for namespace in ("scope-a", "scope-b", "default"):
        fake_api.create_namespace(namespace) if namespace != "default" else None
        fake_api.create_object(EXAMPLES, example("obj", namespace))
    fake_api.inject("GET", "/api/v1/namespaces", status=403, times=None)

    running = await orchestrate("scope-a", "scope-*", re.compile("default"), "!other")

    assert running.orchestration.namespaces == {"scope-a"}
    assert running.serving == {(EXAMPLES, "scope-a")}
    await running.wait_for(lambda: calls)
    await trio.sleep(10)
    assert calls == [("scope-a", "obj")]
    warnings = logs.messages(logging.WARNING)
    assert any("Not enough permissions to list namespaces" in m for m in warnings)
    assert any("['scope-a']" in m for m in warnings)


async def test_forbidden_namespace_watch_keeps_the_listed_ones(
    autojump_clock: Any,
    fake_api: FakeAPI,
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
) -> None:
    creations(registry)
    fake_api.create_namespace("scope-a")
    fake_api.inject("GET", "/api/v1/namespaces", status=403, times=None, watch=True)

    running = await orchestrate("scope-*")
    await running.wait_for(
        lambda: logs.count("Not enough permissions to watch namespaces", logging.WARNING)
    )
    assert running.serving == {(EXAMPLES, "scope-a")}


async def test_cluster_scoped_resources_are_served_once_in_namespaced_mode(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: list[str] = []

    @kopf.on.event("namespaces", registry=registry)
    def namespace_event(name: str, **_: Any) -> None:
        seen.append(name)

    fake_api.create_namespace("scope-a")
    fake_api.create_namespace("scope-b")
    running = await orchestrate("scope-*")

    assert running.serving == {("namespaces", None)}
    await running.wait_for(lambda: {"scope-a", "scope-b", "default"} <= set(seen))


async def test_clusterwide_mode_serves_each_resource_once(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    calls = creations(registry)
    fake_api.create_namespace("scope-a")
    running = await orchestrate(clusterwide=True)

    assert running.serving == {(EXAMPLES, None)}
    fake_api.create_namespace("other")
    fake_api.create_object(EXAMPLES, example("obj", "other"))
    await running.wait_for(lambda: calls)
    assert calls == [("other", "obj")]
    assert watched(fake_api) == {example_path(None)}
    assert not watched(fake_api, "namespaces")


# ---------------------------------------------------------------------------------- resources


async def test_crd_created_at_runtime_gets_served(
    autojump_clock: Any,
    bare_api: FakeAPI,
    crd: dict[str, Any],
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
) -> None:
    calls = creations(registry)
    running = await orchestrate(clusterwide=True)
    assert running.serving == set()

    bare_api.create_object("customresourcedefinitions", crd)
    await running.wait_for(lambda: running.serving)
    assert running.serving == {(EXAMPLES, None)}
    bare_api.create_object(EXAMPLES, example("obj", "default"))
    await running.wait_for(lambda: calls)
    assert calls == [("default", "obj")]
    assert logs.count("Serving kopfexamples.v1.kopf.dev cluster-wide.", logging.INFO) == 1


async def test_crd_created_at_runtime_is_served_in_every_namespace(
    autojump_clock: Any,
    bare_api: FakeAPI,
    crd: dict[str, Any],
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
) -> None:
    calls = creations(registry)
    bare_api.create_namespace("scope-a")
    bare_api.create_namespace("scope-b")
    running = await orchestrate("scope-*")

    bare_api.create_object("customresourcedefinitions", crd)
    await running.wait_for(lambda: len(running.serving) == 2)
    assert running.serving == {(EXAMPLES, "scope-a"), (EXAMPLES, "scope-b")}
    bare_api.create_object(EXAMPLES, example("obj", "scope-b"))
    await running.wait_for(lambda: calls)
    assert calls == [("scope-b", "obj")]


async def test_deleted_crd_stops_its_watchers(
    autojump_clock: Any,
    fake_api: FakeAPI,
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
) -> None:
    creations(registry)
    fake_api.create_namespace("scope-a")
    running = await orchestrate("scope-*")
    await running.wait_for(lambda: fake_api.open_watches == 3)

    fake_api.delete_object("customresourcedefinitions", "kopfexamples.kopf.dev")
    await running.wait_for(lambda: fake_api.open_watches == 2)
    await trio.sleep(60)  # rescans come and go; nothing restarts it

    assert running.serving == set()
    assert running.orchestration.resources == frozenset()
    assert fake_api.open_watches == 2
    assert logs.count("Stopping kopfexamples.v1.kopf.dev in 'scope-a'.", logging.INFO) == 1
    assert logs.count("Serving kopfexamples.v1.kopf.dev", logging.INFO) == 1
    assert not logs.messages(logging.ERROR)


async def test_watcher_of_a_vanished_resource_stops_without_failing(
    autojump_clock: Any,
    fake_api: FakeAPI,
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    logs: Any,
) -> None:
    # No CRD observation: the watcher itself finds out (HTTP 404) that the resource is gone.
    settings.scanning.disabled = True
    creations(registry)
    running = await orchestrate(clusterwide=True)
    assert running.serving == {(EXAMPLES, None)}

    fake_api.delete_object("customresourcedefinitions", "kopfexamples.kopf.dev")
    await running.wait_for(lambda: not running.serving)
    await trio.sleep(60)
    assert not running.serving
    assert fake_api.open_watches == 0
    assert logs.count("the resource is gone", logging.WARNING) == 1
    await running.stop()


async def test_recreated_crd_is_served_again(
    autojump_clock: Any,
    fake_api: FakeAPI,
    crd: dict[str, Any],
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
) -> None:
    calls = creations(registry)
    running = await orchestrate(clusterwide=True)

    fake_api.delete_object("customresourcedefinitions", "kopfexamples.kopf.dev")
    await running.wait_for(lambda: not running.serving)
    fake_api.create_object("customresourcedefinitions", crd)
    await running.wait_for(lambda: running.serving)
    fake_api.create_object(EXAMPLES, example("obj", "default"))
    await running.wait_for(lambda: calls)
    assert calls == [("default", "obj")]


async def test_discovery_lagging_behind_a_new_crd_is_scanned_again(
    autojump_clock: Any,
    bare_api: FakeAPI,
    crd: dict[str, Any],
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
) -> None:
    creations(registry)
    running = await orchestrate(clusterwide=True)
    # The new group is not in the discovery yet (as while kube-apiserver registers it).
    lag = bare_api.inject("GET", "/apis/kopf.dev/v1", status=404, times=2)

    bare_api.create_object("customresourcedefinitions", crd)
    await running.wait_for(lambda: running.serving)
    assert lag.hits == 2
    assert running.serving == {(EXAMPLES, None)}


async def test_forbidden_crds_leave_the_initial_resources_served(
    autojump_clock: Any,
    fake_api: FakeAPI,
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
) -> None:
    creations(registry)
    fake_api.inject("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", status=403)

    running = await orchestrate(clusterwide=True)
    await running.wait_for(lambda: logs.count("Cannot watch CRDs", logging.WARNING))
    assert running.serving == {(EXAMPLES, None)}


async def test_scanning_disabled_watches_no_crds_and_serves_literal_namespaces(
    autojump_clock: Any,
    fake_api: FakeAPI,
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
) -> None:
    settings.scanning.disabled = True
    calls = creations(registry)
    fake_api.create_namespace("scope-a")
    fake_api.create_namespace("ns1")
    running = await orchestrate("ns1", "scope-*")

    assert running.serving == {(EXAMPLES, "ns1")}
    fake_api.create_object(EXAMPLES, example("obj", "ns1"))
    fake_api.create_object(EXAMPLES, example("obj", "scope-a"))
    await running.wait_for(lambda: calls)
    await trio.sleep(10)
    assert calls == [("ns1", "obj")]
    touched = {r.path for r in fake_api.requests}
    assert "/apis/apiextensions.k8s.io/v1/customresourcedefinitions" not in touched
    assert "/api/v1/namespaces" not in touched


# ---------------------------------------------------------------------------------- health


async def test_health_signals_follow_the_watchers(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    creations(registry)
    fake_api.create_namespace("scope-a")
    fake_api.create_namespace("scope-b")
    health: dict[str, WatchHealth] = {}
    running = await orchestrate("scope-*", health=health)
    await running.wait_for(lambda: "CRDs observer" in health)

    assert set(health) == {
        "namespaces observer",
        "CRDs observer",
        "kopfexamples.v1.kopf.dev in 'scope-a'",
        "kopfexamples.v1.kopf.dev in 'scope-b'",
    }
    assert all(signal.alive for signal in health.values())

    fake_api.delete_object("namespaces", "scope-a")
    await running.wait_for(lambda: "kopfexamples.v1.kopf.dev in 'scope-a'" not in health)
    assert len(health) == 3

    # Stopping on purpose is not dying: no signal is ever seen dead on the way.
    running.context.stopping.set()
    while not running.finished.is_set():
        assert all(signal.alive for signal in health.values())
        await trio.sleep(0.001)
    assert health == {}


# ---------------------------------------------------------------------------------- stopping


async def test_graceful_stop_stops_everything(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    creations(registry)
    fake_api.create_namespace("scope-a")
    fake_api.create_namespace("scope-b")
    running = await orchestrate("scope-*")
    await running.wait_for(lambda: fake_api.open_watches == 4)

    await running.stop()
    assert running.orchestration.serving == frozenset()
    # The fake notices closed watches when it writes to them: give them news to bookmark.
    fake_api.create_object("configmaps", {"metadata": {"name": "news", "namespace": "default"}})
    await running.wait_for(lambda: fake_api.open_watches == 0)


async def test_handlers_in_progress_finish_on_a_graceful_stop(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    finished: list[str] = []

    @kopf.on.create(EXAMPLES, registry=registry)
    async def slow(name: str, **_: Any) -> None:
        await trio.sleep(1.5)  # shorter than settings.queueing.exit_timeout
        finished.append(name)

    fake_api.create_namespace("scope-a")
    running = await orchestrate("scope-*")
    fake_api.create_object(EXAMPLES, example("obj", "scope-a"))
    await trio.sleep(0.5)

    await running.stop()
    assert finished == ["obj"]


@pytest.mark.skipif(
    "stopping" not in {field.name for field in dataclasses.fields(ResourceContext)},
    reason="a watcher can be stopped alone only by cancelling it until ResourceContext.stopping",
)
async def test_handlers_in_progress_finish_when_their_namespace_goes_away(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    finished: list[str] = []

    @kopf.on.create(EXAMPLES, registry=registry)
    async def slow(name: str, **_: Any) -> None:
        await trio.sleep(1.5)  # shorter than settings.queueing.exit_timeout
        finished.append(name)

    fake_api.create_namespace("scope-a")
    fake_api.create_object(EXAMPLES, example("held", "scope-a", finalizers=["example.com/hold"]))
    running = await orchestrate("scope-*")
    await trio.sleep(0.5)

    fake_api.delete_object("namespaces", "scope-a")  # stays Terminating: "held" holds it
    await running.wait_for(lambda: not running.serving)
    await trio.sleep(5)
    assert finished == ["held"]
