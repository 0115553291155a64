"""Discovery limited to what the handlers' selectors can match (issue #15, start-up).

Which discovery documents the orchestrator asks the fake API for, for given selectors: only the
groups (and versions) that selectors name; every group for selectors without a group
(``EVERYTHING``, categories, bare names, callbacks).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trioperator as kopf
from tests.integration.runtime_scopes.test_orchestration import (
    EXAMPLES,
    example,
)
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.errors import APIForbiddenError
from trioperator._runtime.support.discovering import discover_resources
from trioperator.testing import FakeAPI


def discovery_requests(api: FakeAPI) -> list[str]:
    """The paths of the discovery documents read so far: /api, /apis, and group versions."""
    found = []
    for r in api.requests:
        parts = r.path.strip("/").split("/")
        is_root = parts in (["api"], ["apis"])
        is_group_version = (parts[0] == "api" and len(parts) == 2) or (
            parts[0] == "apis" and len(parts) == 3
        )
        if r.method == "GET" and (is_root or is_group_version) and "watch" not in r.query:
            found.append(r.path)
    return found


def every_group_version(api: FakeAPI) -> set[str]:
    """The discovery paths of every group version the fake API serves now."""
    paths = {"/api", "/apis", "/api/v1"}
    for resource in api.store.resources.values():
        if resource.group:
            paths.update(f"/apis/{resource.group}/{v}" for v in resource.versions)
    return paths


async def test_a_selector_with_a_group_discovers_only_that_group(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[str] = []

    @kopf.on.create("kopf.dev", "v1", EXAMPLES, registry=registry)
    def created(name: str, **_: Any) -> None:
        calls.append(name)

    fake_api.create_object(EXAMPLES, example("obj", "default"))
    running = await orchestrate(clusterwide=True)

    assert running.serving == {(EXAMPLES, None)}
    assert sorted(discovery_requests(fake_api)) == ["/apis", "/apis/kopf.dev/v1"]
    await running.wait_for(lambda: calls)
    assert calls == ["obj"]


async def test_a_group_without_a_version_discovers_all_its_versions(
    autojump_clock: Any,
    bare_api: FakeAPI,
    crd: dict[str, Any],
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
) -> None:
    crd["spec"]["versions"].append({**crd["spec"]["versions"][0], "name": "v2", "storage": False})
    bare_api.create_object("customresourcedefinitions", crd)
    kopf.on.create("kopf.dev", EXAMPLES, registry=registry)(lambda **_: None)

    running = await orchestrate(clusterwide=True)

    assert sorted(discovery_requests(bare_api)) == [
        "/apis",
        "/apis/kopf.dev/v1",
        "/apis/kopf.dev/v2",
    ]
    # The preferred version is served, as with a full discovery.
    assert {(r.version, ns) for r, ns in running.orchestration.serving} == {("v1", None)}


async def test_core_selectors_do_not_read_the_groups_list(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    kopf.on.event("", "v1", "configmaps", registry=registry)(lambda **_: None)

    running = await orchestrate(clusterwide=True)

    assert running.serving == {("configmaps", None)}
    assert sorted(discovery_requests(fake_api)) == ["/api", "/api/v1"]


async def test_everything_discovers_every_group(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    kopf.on.event(kopf.EVERYTHING, registry=registry)(lambda **_: None)

    running = await orchestrate(clusterwide=True)

    assert set(discovery_requests(fake_api)) == every_group_version(fake_api)
    assert (EXAMPLES, None) in running.serving
    assert ("configmaps", None) in running.serving


async def test_a_bare_name_discovers_every_group(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    # A bare name may be in any group (and the core group shadows the others): all are read.
    kopf.on.event(EXAMPLES, registry=registry)(lambda **_: None)

    running = await orchestrate(clusterwide=True)

    assert set(discovery_requests(fake_api)) == every_group_version(fake_api)
    assert running.serving == {(EXAMPLES, None)}


async def test_a_category_discovers_every_group(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    kopf.on.event(category="all", registry=registry)(lambda **_: None)

    await orchestrate(clusterwide=True)

    assert set(discovery_requests(fake_api)) == every_group_version(fake_api)


async def test_a_callback_discovers_every_group(
    autojump_clock: Any, fake_api: FakeAPI, orchestrate: Any, registry: kopf.OperatorRegistry
) -> None:
    kopf.on.event(lambda resource: resource.plural == EXAMPLES, registry=registry)(lambda **_: None)

    running = await orchestrate(clusterwide=True)

    assert set(discovery_requests(fake_api)) == every_group_version(fake_api)
    assert running.serving == {(EXAMPLES, None)}


async def test_a_new_crd_out_of_the_scope_causes_no_repeated_scans(
    autojump_clock: Any,
    fake_api: FakeAPI,
    crd: dict[str, Any],
    orchestrate: Any,
    registry: kopf.OperatorRegistry,
    logs: Any,
) -> None:
    kopf.on.event("kopf.dev", "v1", EXAMPLES, registry=registry)(lambda **_: None)
    running = await orchestrate(clusterwide=True)
    initial = len(discovery_requests(fake_api))

    spec = crd["spec"]
    fake_api.create_object(
        "customresourcedefinitions",
        {
            **crd,
            "metadata": {"name": "widgets.other.example.com"},
            "spec": {
                **spec,
                "group": "other.example.com",
                "names": {**spec["names"], "plural": "widgets", "kind": "Widget"},
            },
        },
    )
    await running.wait_for(lambda: len(discovery_requests(fake_api)) > initial)
    await trio.sleep(120)  # longer than all the retries of a disagreeing discovery

    # One rescan (a CRD changed), which agrees with the CRDs in its scope: no retries, and the
    # other group is not read.
    assert len(discovery_requests(fake_api)) == 2 * initial
    assert "/apis/other.example.com/v1" not in discovery_requests(fake_api)
    assert logs.count("still does not show the CRDs") == 0
    assert running.serving == {(EXAMPLES, None)}


async def test_a_failing_discovery_raises_the_api_error_itself(
    autojump_clock: Any, fake_api: FakeAPI, settings: kopf.OperatorSettings
) -> None:
    fake_api.inject("GET", "/apis", status=403, times=None)
    vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})
    async with APIClient(vault, settings.networking) as api:
        # Not wrapped in an exception group: callers handle it as after a sequential scan.
        with pytest.raises(APIForbiddenError):
            await discover_resources(api, scope=None, logger=logging.getLogger("test"))
        found = await discover_resources(
            api, scope=frozenset({("", "v1")}), logger=logging.getLogger("test")
        )
    assert {"namespaces", "configmaps"} <= {resource.plural for resource in found}
