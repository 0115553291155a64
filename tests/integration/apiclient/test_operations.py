"""Every operation of the async client, seen in what the fake API holds and received."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trioperator as kopf
from tests.integration.apiclient.conftest import configmap
from trioperator.testing import FakeAPI


async def test_create_get_replace_delete_a_configmap(api: kopf.AsyncAPI, fake_api: FakeAPI) -> None:
    cms = api.resource("configmaps")
    created = await cms.create(configmap("one", key="a"))
    assert created["metadata"]["uid"]
    assert fake_api.get_object("configmaps", "one", "default")["data"] == {"key": "a"}

    got = await cms.get("one", namespace="default")
    assert got["data"] == {"key": "a"}
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    got["data"]["key"] = "b"
    replaced = await cms.replace(got)
    assert replaced["data"] == {"key": "b"}
    assert fake_api.get_object("configmaps", "one", "default")["data"] == {"key": "b"}

    await cms.delete("one", namespace="default")
    assert not fake_api.has_object("configmaps", "one", "default")
    assert await cms.delete("one", namespace="default", missing_ok=True) is None
    with pytest.raises(kopf.APINotFoundError) as info:
        await cms.get("one", namespace="default")
    assert info.value.status == 404
    assert info.value.payload is not None
    assert info.value.payload["kind"] == "Status"


async def test_the_three_patch_types(api: kopf.AsyncAPI, fake_api: FakeAPI) -> None:
    cms = api.resource("configmaps")
    await cms.create(configmap("p", a="1", b="2"))

    merged = await cms.patch("p", {"data": {"a": "10", "b": None}}, namespace="default")
    assert merged["data"] == {"a": "10"}

    ops = [{"op": "add", "path": "/data/c", "value": "3"}]
    patched = await cms.patch("p", ops, type="json", namespace="default")
    assert patched["data"] == {"a": "10", "c": "3"}

    strategic = await cms.patch("p", {"data": {"d": "4"}}, type="strategic", namespace="default")
    assert strategic["data"] == {"a": "10", "c": "3", "d": "4"}
    assert fake_api.get_object("configmaps", "p", "default")["data"] == strategic["data"]

    content_types = [
        request.headers.get("content-type")
        for request in fake_api.raw_requests
        if request.method == "PATCH"
    ]
    assert content_types == [
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/strategic-merge-patch+json",
    ]


async def test_bad_patches_are_refused_before_sending(
    api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    with pytest.raises(TypeError, match="list of operations"):
        await cms.patch("p", {"data": {}}, type="json", namespace="default")
    with pytest.raises(ValueError, match="Unknown patch type"):
        await cms.patch("p", {}, type="yaml", namespace="default")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namespaced"):
        await cms.get("p")
    assert not [r for r in fake_api.requests if "configmaps" in r.path]


async def test_cluster_scoped_resources_and_namespaces(
    api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    namespaces = api.resource("namespaces")
    await namespaces.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    assert fake_api.has_object("namespaces", "ns1")
    with pytest.raises(ValueError, match="cluster-scoped"):
        await namespaces.get("ns1", namespace="default")

    cms = api.resource("configmaps")
    await cms.create(configmap("x", "ns1"))
    await cms.create(configmap("x", "default"))
    everywhere = await cms.list()
    assert {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in everywhere} >= {
        ("ns1", "x"),
        ("default", "x"),
    }
    only = await cms.list(namespace="ns1")
    assert [o["metadata"]["name"] for o in only] == ["x"]


async def test_resources_are_found_by_any_of_their_names(
    api: kopf.AsyncAPI, fake_api: FakeAPI, crd: dict[str, Any]
) -> None:
    for names, keywords in [
        (("configmaps",), {}),
        (("ConfigMap",), {}),
        (("cm",), {}),
        (("v1", "configmaps"), {}),
        ((), {"kind": "ConfigMap"}),
    ]:
        resource = await api.resource(*names, **keywords).resolve()
        assert (resource.group, resource.version, resource.plural) == ("", "v1", "configmaps")

    # A CRD made after the first discovery: looked up again on a miss.
    fake_api.create_object("customresourcedefinitions", crd)
    found = await api.resource("kex").resolve()
    assert (found.group, found.plural, found.namespaced) == ("kopf.dev", "kopfexamples", True)

    with pytest.raises(LookupError, match="no such resource"):
        await api.resource("nonexistent").resolve()
    with pytest.raises(TypeError):
        api.resource("a", "b", "c", "d")  # type: ignore[arg-type]


async def test_a_resource_object_needs_no_discovery(api: kopf.AsyncAPI, fake_api: FakeAPI) -> None:
    resource = kopf.Resource(group="", version="v1", plural="configmaps", kind="ConfigMap")
    await api.resource(resource).create(configmap("direct"))
    assert fake_api.has_object("configmaps", "direct", "default")
    assert [r.path for r in fake_api.requests] == ["/api/v1/namespaces/default/configmaps"]


async def test_listing_pages_with_limit_and_continue(api: kopf.AsyncAPI, fake_api: FakeAPI) -> None:
    fake_api.create_namespace("paged")
    for index in range(7):
        fake_api.create_object("configmaps", configmap(f"cm{index}", "paged"))
    fake_api.requests.clear()

    cms = api.resource("configmaps")
    listed = await cms.list(namespace="paged", limit=3)
    assert sorted(o["metadata"]["name"] for o in listed) == [f"cm{i}" for i in range(7)]
    assert listed.resource_version == fake_api.resource_version
    assert all(o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" for o in listed)
    pages = [r for r in fake_api.requests if r.path.endswith("/namespaces/paged/configmaps")]
    assert [r.query.get("limit") for r in pages] == ["3", "3", "3"]
    assert [bool(r.query.get("continue")) for r in pages] == [False, True, True]

    seen = [obj["metadata"]["name"] async for obj in cms.iterate(namespace="paged", limit=5)]
    assert sorted(seen) == [f"cm{i}" for i in range(7)]


async def test_selectors_are_sent_to_the_server(api: kopf.AsyncAPI, fake_api: FakeAPI) -> None:
    for name, app in [("a", "web"), ("b", "db"), ("c", "web")]:
        body = configmap(name)
        body["metadata"]["labels"] = {"app": app}  # type: ignore[index]
        fake_api.create_object("configmaps", body)
    cms = api.resource("configmaps")
    web = await cms.list(namespace="default", label_selector={"app": "web"})
    assert sorted(o["metadata"]["name"] for o in web) == ["a", "c"]
    not_web = await cms.list(namespace="default", label_selector="app!=web")
    assert [o["metadata"]["name"] for o in not_web] == ["b"]
    by_name = await cms.list(namespace="default", field_selector={"metadata.name": "c"})
    assert [o["metadata"]["name"] for o in by_name] == ["c"]


async def test_status_subresource_and_delete_preconditions(
    api: kopf.AsyncAPI, fake_api: FakeAPI, crd: dict[str, Any]
) -> None:
    fake_api.create_object("customresourcedefinitions", crd)
    kex = api.resource("kopf.dev", "v1", "kopfexamples")
    body = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": "e", "namespace": "default"},
        "spec": {"x": 1},
    }
    created = await kex.create(body)
    await kex.patch("e", {"status": {"ready": True}}, namespace="default", subresource="status")
    assert fake_api.get_object("kopfexamples", "e", "default")["status"] == {"ready": True}
    status = await kex.get("e", namespace="default", subresource="status")
    assert status["status"] == {"ready": True}

    with pytest.raises(kopf.APIConflictError):
        await kex.delete("e", namespace="default", uid="not-the-uid")
    assert fake_api.has_object("kopfexamples", "e", "default")
    await kex.delete(
        "e", namespace="default", uid=created["metadata"]["uid"], propagation_policy="Foreground"
    )
    assert not fake_api.has_object("kopfexamples", "e", "default")
    deletion = [r for r in fake_api.requests if r.method == "DELETE"][-1]
    assert deletion.body["propagationPolicy"] == "Foreground"
    assert deletion.body["preconditions"] == {"uid": created["metadata"]["uid"]}


async def test_adopt_works_with_what_the_client_returns(
    api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    owner = await cms.create(configmap("owner"))
    child = configmap("child")
    kopf.adopt(child, owner=owner)
    created = await cms.create(child)
    [reference] = created["metadata"]["ownerReferences"]
    assert reference["uid"] == owner["metadata"]["uid"]
    assert reference["kind"] == "ConfigMap"
    assert reference["controller"] is True

    # Items of a listing carry their kind again, so they can be owners as well.
    [listed_owner] = await cms.list(namespace="default", field_selector={"metadata.name": "owner"})
    second = configmap("second")
    kopf.adopt(second, owner=listed_owner)
    assert second["metadata"]["ownerReferences"][0]["kind"] == "ConfigMap"  # type: ignore[index]


async def test_the_resource_kwarg_of_a_handler_can_be_used_directly(
    api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    resource = await api.resource("configmaps").resolve()
    again = api.resource(resource)
    await again.create(configmap("same"))
    assert fake_api.has_object("configmaps", "same", "default")


async def test_a_broken_group_is_skipped_at_once_in_the_discovery(
    autojump_clock: Any, api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    fake_api.inject("GET", "/apis/coordination.k8s.io/v1", status=503, times=None)
    started = trio.current_time()
    resource = await api.resource("configmaps").resolve()
    assert resource.plural == "configmaps"
    assert trio.current_time() == started  # no retries of the broken group's 503
    with pytest.raises(LookupError):
        await api.resource("leases").resolve()
