"""The FakeAPI's fault injection and test-only controls, observed through plain httpx2 requests.

Everything runs on trio's autojump clock: injected delays, watch timeouts and bookmarks take no
real time.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import pytest
import trio
import trio.testing
import yaml
from trioperator.testing import FakeAPI, RecordedRequest, StatusError

CM = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "things.example.dev"},
    "spec": {
        "group": "example.dev",
        "scope": "Namespaced",
        "names": {"plural": "things", "kind": "Thing"},
        "versions": [{"name": "v1", "served": True, "storage": True}],
    },
}


# Every test takes ``autojump_clock`` itself: pytest-trio only uses a clock that is among the
# test function's own arguments.


@pytest.fixture
async def api() -> AsyncIterator[FakeAPI]:
    async with FakeAPI.serve(bookmark_interval=10) as fake:
        yield fake


@pytest.fixture
async def client(api: FakeAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        yield http


class Watch:
    """A watch stream read in the background, so tests can act while it is open."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.ended = trio.Event()
        self.opened = trio.Event()

    async def run(self, client: httpx.AsyncClient, path: str, params: dict[str, str]) -> None:
        try:
            async with client.stream(
                "GET", path, params={"watch": "true", **params}, timeout=None
            ) as response:
                assert response.status_code == 200
                self.opened.set()
                async for line in response.aiter_lines():
                    if line.strip():
                        self.events.append(json.loads(line))
        except httpx.TransportError as exc:
            self.error = exc
        finally:
            self.ended.set()

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]


async def open_watch(
    nursery: trio.Nursery, client: httpx.AsyncClient, path: str, **params: str
) -> Watch:
    watch = Watch()
    nursery.start_soon(watch.run, client, path, params)
    await watch.opened.wait()
    await trio.testing.wait_all_tasks_blocked()  # the initial events are in
    return watch


# ------------------------------------------------------------------------------ request faults


async def test_status_injection_fails_the_next_matching_request(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    injection = api.inject("GET", f"{CM}*", status=503)
    response = await client.get(CM)
    assert response.status_code == 503
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server is currently unable to handle the request",
        "reason": "ServiceUnavailable",
        "code": 503,
    }
    assert (await client.get(CM)).status_code == 200  # times=1: only once
    assert injection.hits == 1
    assert [(r.method, r.path) for r in api.requests] == [("GET", CM), ("GET", CM)]


async def test_retry_after_header_and_details(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.inject(
        "PATCH", "/api/v1/namespaces/*/configmaps/*", status=429, headers={"Retry-After": "3"}
    )
    api.create_object("configmaps", {"metadata": {"name": "x", "namespace": "default"}})
    response = await client.patch(f"{CM}/x", json={"data": {"a": "1"}}, headers=MERGE)
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "3"
    assert response.json()["reason"] == "TooManyRequests"
    assert response.json()["details"] == {"retryAfterSeconds": 3}
    assert "data" not in api.get_object("configmaps", "x", "default")  # nothing was applied


async def test_custom_bodies(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.inject(None, CM, status=500, body={"kind": "Status", "message": "custom"})
    api.inject(None, CM, status=502, body=b"<html>bad gateway</html>")
    first = await client.get(CM)
    assert (first.status_code, first.json()) == (500, {"kind": "Status", "message": "custom"})
    second = await client.get(CM)
    assert (second.status_code, second.text) == (502, "<html>bad gateway</html>")


async def test_method_and_pattern_matching(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.inject("POST", "/api/v1/*", status=409, times=None)
    api.inject(None, re.compile(r"/secrets$"), status=403, times=2)
    api.inject(None, r"^/apis/coordination\.k8s\.io/", status=404)

    assert (await client.get(CM)).status_code == 200  # GET is not affected by the POST one
    for _ in range(3):
        assert (await client.post(CM, json={"metadata": {"name": "x"}})).status_code == 409
    secrets = "/api/v1/namespaces/default/secrets"
    assert [(await client.get(secrets)).status_code for _ in range(3)] == [403, 403, 200]
    leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    assert [(await client.get(leases)).status_code for _ in range(2)] == [404, 200]

    api.clear_injections()
    assert (await client.post(CM, json={"metadata": {"name": "x"}})).status_code == 201


async def test_removing_an_injection(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    injection = api.inject(None, "*", status=500, times=None)
    assert (await client.get("/api")).status_code == 500
    api.remove_injection(injection)
    assert (await client.get("/api")).status_code == 200
    assert injection.hits == 1


async def test_dropped_connection(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.inject("GET", CM, drop=True)
    with pytest.raises(httpx.RemoteProtocolError):
        await client.get(CM)
    assert (await client.get(CM)).status_code == 200
    assert len(api.requests) == 2


async def test_delay_stalls_then_serves(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.inject("GET", CM, delay=7)
    started = trio.current_time()
    response = await client.get(CM)
    assert response.status_code == 200
    assert trio.current_time() - started == pytest.approx(7, abs=0.01)


async def test_delay_beyond_the_client_timeout(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.inject("GET", CM, delay=100)
    with pytest.raises(httpx.ReadTimeout):
        await client.get(CM, timeout=5)


async def test_delay_then_status_or_drop(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.inject("GET", CM, delay=2, status=504)
    api.inject("GET", CM, delay=3, drop=True)
    started = trio.current_time()
    assert (await client.get(CM)).status_code == 504
    assert trio.current_time() - started == pytest.approx(2, abs=0.01)
    with pytest.raises(httpx.RemoteProtocolError):
        await client.get(CM)
    assert trio.current_time() - started == pytest.approx(5, abs=0.01)


async def test_injection_needs_an_effect(
    autojump_clock: trio.testing.MockClock, api: FakeAPI
) -> None:
    with pytest.raises(ValueError, match="needs a status"):
        api.inject("GET", "*")


async def test_watch_only_injection(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.inject("GET", CM, status=410, watch=True)
    assert (await client.get(CM)).status_code == 200  # a list is not a watch
    response = await client.get(CM, params={"watch": "true"})
    assert response.status_code == 410
    assert response.json()["reason"] == "Expired"


# ------------------------------------------------------------------------------ watch faults


async def test_watch_error_into_an_open_stream(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.create_object("configmaps", {"metadata": {"name": "a", "namespace": "default"}})
    async with trio.open_nursery() as nursery:
        watch = await open_watch(nursery, client, CM)
        assert watch.types == ["ADDED"]
        assert api.inject_watch_error("/api/v1/namespaces/*/configmaps") == 1
        await watch.ended.wait()
    assert watch.error is None  # the stream ended properly after the error
    assert watch.types == ["ADDED", "ERROR"]
    assert watch.events[1]["object"] == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "The resourceVersion for the provided watch is too old.",
        "reason": "Expired",
        "code": 410,
    }
    assert api.open_watches == 0


async def test_watch_error_for_the_next_stream(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    assert api.inject_watch_error(CM, code=500, message="etcd is sad") == 0  # none open: pending
    async with trio.open_nursery() as nursery:
        first = await open_watch(nursery, client, CM)
        await first.ended.wait()
        assert first.events == [
            {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "etcd is sad",
                    "reason": "InternalError",
                    "code": 500,
                },
            }
        ]
        second = await open_watch(nursery, client, CM, timeoutSeconds="5")  # served normally
        await second.ended.wait()
        assert second.events == []


async def test_drop_watches_cuts_streams(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    async with trio.open_nursery() as nursery:
        cms = await open_watch(nursery, client, CM)
        secrets = await open_watch(nursery, client, "/api/v1/secrets")
        assert api.open_watches == 2
        assert api.drop_watches("*/configmaps") == 1
        await cms.ended.wait()
        assert isinstance(cms.error, httpx.RemoteProtocolError)  # no clean end of the stream
        assert not secrets.ended.is_set()
        assert api.drop_watches() == 1
        await secrets.ended.wait()
        assert isinstance(secrets.error, httpx.RemoteProtocolError)
    assert api.open_watches == 0


async def test_compaction_expires_old_resource_versions(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    for name in "abc":
        api.create_object("configmaps", {"metadata": {"name": name, "namespace": "default"}})
    page = (await client.get(CM, params={"limit": "1"})).json()
    old = page["metadata"]["resourceVersion"]
    api.create_object("configmaps", {"metadata": {"name": "d", "namespace": "default"}})
    api.compact()
    response = await client.get(CM, params={"watch": "1", "resourceVersion": old})
    assert response.status_code == 200
    [event] = [json.loads(line) for line in response.text.splitlines()]
    assert (event["type"], event["object"]["code"]) == ("ERROR", 410)
    assert event["object"]["message"] == f"too old resource version: {old} ({api.resource_version})"
    response = await client.get(CM, params={"limit": "1", "continue": page["metadata"]["continue"]})
    assert response.status_code == 410
    assert response.json()["reason"] == "Expired"
    # A watch from the current version works.
    response = await client.get(
        CM, params={"watch": "1", "resourceVersion": api.resource_version, "timeoutSeconds": "1"}
    )
    assert response.text == ""


async def test_history_limit_expires_old_versions(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeAPI.serve(history_limit=2) as api, httpx.AsyncClient(base_url=api.url) as client:
        start = api.resource_version
        for name in "abc":
            api.create_object("configmaps", {"metadata": {"name": name, "namespace": "default"}})
        response = await client.get(CM, params={"watch": "1", "resourceVersion": start})
        assert json.loads(response.text)["object"]["code"] == 410


# ------------------------------------------------------------------------------ watch timing


async def test_watch_timeout_and_periodic_bookmarks(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    start = api.resource_version
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        watch = await open_watch(
            nursery,
            client,
            CM,
            resourceVersion=start,
            allowWatchBookmarks="true",
            timeoutSeconds="35",
            labelSelector="none=here",
        )
        api.create_object("configmaps", {"metadata": {"name": "x", "namespace": "default"}})
        await watch.ended.wait()
    assert trio.current_time() - began == pytest.approx(35, abs=0.01)
    # Every 10 s (bookmark_interval), and once more 2 s before the timeout.
    assert watch.types == ["BOOKMARK"] * 4
    assert {e["object"]["metadata"]["resourceVersion"] for e in watch.events} == {
        api.resource_version
    }


async def test_no_bookmarks_without_news(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    response = await client.get(
        CM,
        params={
            "watch": "1",
            "resourceVersion": api.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "25",
        },
    )
    assert response.text == ""


async def test_timestamps_follow_trio_time(
    autojump_clock: trio.testing.MockClock, api: FakeAPI
) -> None:
    first = api.create_object("configmaps", {"metadata": {"name": "a", "namespace": "default"}})
    await trio.sleep(3600)
    second = api.create_object("configmaps", {"metadata": {"name": "b", "namespace": "default"}})
    hour = int(first["metadata"]["creationTimestamp"][11:13])
    assert int(second["metadata"]["creationTimestamp"][11:13]) == (hour + 1) % 24


# ------------------------------------------------------------------------------ auth & records


async def test_tokens_and_kubeconfig(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, tmp_path: Any
) -> None:
    api.tokens = {"sesame"}
    path = api.kubeconfig(tmp_path)
    assert path == tmp_path / "kubeconfig"
    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == api.url
    assert config["users"][0]["user"]["token"] == "sesame"
    assert config["contexts"][0]["context"]["namespace"] == "default"
    async with httpx.AsyncClient(base_url=api.url) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            response = await client.get(CM, headers=headers)
            assert response.status_code == 401
            assert response.json()["reason"] == "Unauthorized"
        good = await client.get(CM, headers={"Authorization": "Bearer sesame"})
        assert good.status_code == 200


async def test_requests_are_recorded(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    await client.post(CM, json={"metadata": {"name": "r"}})
    await client.patch(
        f"{CM}/r",
        json=[{"op": "add", "path": "/data", "value": {}}],
        headers={"Content-Type": "application/json-patch+json"},
    )
    await client.get(CM, params={"labelSelector": "a=b", "limit": "5"})
    assert api.requests == [
        RecordedRequest("POST", CM, {}, {"metadata": {"name": "r"}}),
        RecordedRequest("PATCH", f"{CM}/r", {}, [{"op": "add", "path": "/data", "value": {}}]),
        RecordedRequest("GET", CM, {"labelSelector": "a=b", "limit": "5"}, None),
    ]
    assert api.raw_requests[1].headers["content-type"] == "application/json-patch+json"


# ------------------------------------------------------------------------------ direct access


async def test_direct_state_access(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.create_namespace("ns1", labels={"team": "a"})
    api.create_object(
        "configmaps", {"metadata": {"name": "d", "namespace": "ns1", "finalizers": ["x/y"]}}
    )
    async with trio.open_nursery() as nursery:
        watch = await open_watch(nursery, client, "/api/v1/namespaces/ns1/configmaps")
        patched = api.patch_object("configmaps", "d", {"data": {"k": "v"}}, "ns1")
        assert patched["data"] == {"k": "v"}
        api.delete_object("configmaps", "d", "ns1")
        assert api.get_object("configmaps", "d", "ns1")["metadata"]["deletionTimestamp"]
        api.patch_object("configmaps", "d", {"metadata": {"finalizers": None}}, "ns1")
        await trio.testing.wait_all_tasks_blocked()
        assert watch.types == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
        nursery.cancel_scope.cancel()
    assert not api.has_object("configmaps", "d", "ns1")
    with pytest.raises(KeyError):
        api.get_object("configmaps", "d", "ns1")
    with pytest.raises(StatusError) as caught:
        api.create_object("configmaps", {"metadata": {"name": "x", "namespace": "nowhere"}})
    assert caught.value.code == 404
    assert [ns["metadata"]["name"] for ns in api.objects("namespaces")] == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
        "ns1",
    ]


async def test_put_object_sets_status_too(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.put_object("pods", {"metadata": {"name": "p", "namespace": "default"}, "spec": {}})
    assert api.get_object("pods", "p", "default")["status"] == {"phase": "Pending"}
    api.put_object(
        "pods",
        {
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {},
            "status": {"phase": "Running"},
        },
    )
    response = await client.get("/api/v1/namespaces/default/pods/p")
    assert response.json()["status"] == {"phase": "Running"}


async def test_direct_access_to_custom_objects(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.create_object("customresourcedefinitions", CRD)
    base = "/apis/example.dev/v1/namespaces/default/things"
    thing = {
        "apiVersion": "example.dev/v1",
        "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default"},
    }
    created = api.put_object("things", {**thing, "spec": {"a": 1}, "status": {"ready": True}})
    assert created["status"] == {"ready": True}  # unlike a POST, which drops it
    async with trio.open_nursery() as nursery:
        watch = await open_watch(nursery, client, base)
        patched = api.patch_object(
            "things.example.dev", "t", {"spec": {"a": 2}, "status": {"ready": False}}, "default"
        )
        assert (patched["spec"], patched["status"]) == ({"a": 2}, {"ready": False})
        assert patched["metadata"]["generation"] == 2
        api.patch_object("things", "t", {"metadata": {"finalizers": ["x/y"]}}, "default")
        api.delete_object("things", "t", "default")
        api.patch_object("things", "t", {"metadata": {"finalizers": None}}, "default")
        await trio.testing.wait_all_tasks_blocked()
        assert watch.types == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
        nursery.cancel_scope.cancel()
    assert api.objects("things") == []
    response = await client.get(f"{base}/t")
    assert response.status_code == 404


async def test_added_resources_are_served(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.add_resource("apps", "v1", "deployments", "Deployment", status_subresource=True)
    path = "/apis/apps/v1/namespaces/default/deployments"
    created = await client.post(path, json={"metadata": {"name": "d"}, "spec": {"replicas": 1}})
    assert created.status_code == 201
    assert created.json()["metadata"]["generation"] == 1
    discovery = (await client.get("/apis/apps/v1")).json()
    assert [r["name"] for r in discovery["resources"]] == ["deployments", "deployments/status"]
    assert api.objects("deployments.apps")[0]["spec"] == {"replicas": 1}


async def test_crd_deletion_ends_watches(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    api.create_object("customresourcedefinitions", CRD)
    thing = {"apiVersion": "example.dev/v1", "kind": "Thing", "metadata": {"name": "t"}}
    api.create_object("things", thing, namespace="default")
    async with trio.open_nursery() as nursery:
        watch = await open_watch(nursery, client, "/apis/example.dev/v1/things")
        api.delete_object("customresourcedefinitions", "things.example.dev")
        await watch.ended.wait()
    assert watch.error is None
    assert watch.types == ["ADDED", "DELETED"]
    assert (await client.get("/apis/example.dev/v1/things")).status_code == 404


async def test_apply_object_plays_another_field_manager(
    autojump_clock: trio.testing.MockClock, api: FakeAPI, client: httpx.AsyncClient
) -> None:
    path = "/api/v1/namespaces/default/configmaps/owned"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}}
    response = await client.patch(
        path,
        content=json.dumps({**body, "data": {"a": "1"}}).encode(),
        headers={"Content-Type": "application/apply-patch+yaml"},
        params={"fieldManager": "operator"},
    )
    assert response.status_code == 201
    edited = {**body, "metadata": {"name": "owned", "namespace": "default"}, "data": {"a": "2"}}
    with pytest.raises(StatusError) as raised:
        api.apply_object("configmaps", edited, manager="kubectl")
    assert raised.value.code == 409
    assert api.get_object("configmaps", "owned", "default")["data"] == {"a": "1"}
    api.apply_object("configmaps", edited, manager="kubectl", force=True)
    stored = api.get_object("configmaps", "owned", "default")
    assert stored["data"] == {"a": "2"}
    assert [(e["manager"], e["fieldsV1"]) for e in stored["metadata"]["managedFields"]] == [
        ("kubectl", {"f:data": {"f:a": {}}})
    ]
    # The operator's next apply now conflicts with the user's.
    response = await client.patch(
        path,
        content=json.dumps({**body, "data": {"a": "1"}}).encode(),
        headers={"Content-Type": "application/apply-patch+yaml"},
        params={"fieldManager": "operator"},
    )
    assert response.status_code == 409
    assert response.json()["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "kubectl"', "field": ".data.a"}
    ]
