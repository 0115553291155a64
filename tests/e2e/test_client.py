"""The API client against the real kube-apiserver: discovery, list+watch, patches, errors."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio
from trioperator._client.api import APIClient
from trioperator._client.config import load_kubeconfig
from trioperator._client.credentials import Vault
from trioperator._client.discovery import scan_resources
from trioperator._client.errors import APINotFoundError, APIUnprocessableEntityError
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings, WatchingSettings
from trioperator._client.watching import LISTED, WatchItem, stream_events

from tests.e2e.conftest import Kubectl
from tests.tunnelproxy import TunnelProxy, start_proxy

KOPFEXAMPLES = Resource(
    group="kopf.dev",
    version="v1",
    plural="kopfexamples",
    kind="KopfExample",
    namespaced=True,
    subresources=frozenset({"status"}),
)


@pytest.fixture
async def api(kubeconfig: Path) -> AsyncIterator[APIClient]:
    vault = Vault({"kubeconfig": load_kubeconfig(str(kubeconfig))})
    async with APIClient(vault, NetworkingSettings()) as client:
        yield client


def _obj(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_discovery_finds_the_crd_with_its_names(example_crd: None, api: APIClient) -> None:
    resources = await scan_resources(api)
    found = [r for r in resources if r.group == "kopf.dev" and r.plural == "kopfexamples"]
    assert len(found) == 1
    resource = found[0]
    assert resource.kind == "KopfExample"
    assert resource.singular == "kopfexample"
    assert {"kex", "kexes", "kopfex", "kopfexes"} <= resource.shortcuts
    assert resource.namespaced
    assert "status" in resource.subresources
    assert {"list", "watch", "patch"} <= resource.verbs
    pods = [r for r in resources if r.group == "" and r.plural == "pods"]
    assert pods
    assert pods[0].version == "v1"


async def test_list_then_watch_sees_every_change(
    example_crd: None, api: APIClient, namespace: str
) -> None:
    await api.create(KOPFEXAMPLES, namespace=namespace, body=_obj("pre-existing", a=1))
    send, receive = trio.open_memory_channel[WatchItem](math.inf)
    seen: list[tuple[str | None, str, Any]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(
                stream_events, api, KOPFEXAMPLES, namespace, settings=WatchingSettings(), send=send
            )
        )
        with trio.fail_after(30):
            async for item in receive:
                if item is LISTED:
                    created = await api.create(
                        KOPFEXAMPLES, namespace=namespace, body=_obj("new", a=1)
                    )
                    await api.patch(
                        KOPFEXAMPLES, namespace=namespace, name="new", payload={"spec": {"a": 2}}
                    )
                    await api.delete(KOPFEXAMPLES, namespace=namespace, name="new")
                    assert created["metadata"]["name"] == "new"
                    continue
                obj = item["object"]
                seen.append((item["type"], obj["metadata"]["name"], obj.get("spec", {}).get("a")))
                if item["type"] == "DELETED":
                    break
        nursery.cancel_scope.cancel()
    assert seen == [
        (None, "pre-existing", 1),
        ("ADDED", "new", 1),
        ("MODIFIED", "new", 2),
        ("DELETED", "new", 2),
    ]


async def test_the_echo_of_an_echoed_write_is_its_answer_not_decoded_again(
    example_crd: None, api: APIClient, namespace: str
) -> None:
    """The real API server sends our write back byte for byte: the watch hands on the answer.

    A write made without ``echo_after`` (as by someone else) comes decoded from its line. The
    stream is held back (an unbuffered channel nobody reads) while writing, so that the watch
    reads the echoes only after the answers: the API server may otherwise send an event before
    the answer to the write, and the watch then decodes it as any other.
    """
    created = await api.create(KOPFEXAMPLES, namespace=namespace, body=_obj("echoed", a=1))
    send, receive = trio.open_memory_channel[WatchItem](0)
    answers: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(
                stream_events, api, KOPFEXAMPLES, namespace, settings=WatchingSettings(), send=send
            )
        )
        with trio.fail_after(30):
            async for item in receive:
                if item is LISTED:
                    # Its event holds the stream back: the watch waits to send it.
                    other = await api.patch(
                        KOPFEXAMPLES, namespace=namespace, name="echoed", payload={"spec": {"a": 2}}
                    )
                    status = await api.patch(
                        KOPFEXAMPLES,
                        namespace=namespace,
                        name="echoed",
                        payload={"status": {"done": {"n": 1.5, "text": "d\u00e9j\u00e0 <vu>"}}},
                        subresource="status",
                        echo_after=other["metadata"]["resourceVersion"],
                    )
                    marked = await api.patch(
                        KOPFEXAMPLES,
                        namespace=namespace,
                        name="echoed",
                        payload={"metadata": {"annotations": {"mark": json.dumps({"a": 1})}}},
                        echo_after=status["metadata"]["resourceVersion"],
                    )
                    answers = [other, status, marked]
                    assert len(api.recent_writes) == 2
                    continue
                if item["type"] == "MODIFIED":
                    events.append(item["object"])
                    if len(events) == 3:
                        break
        nursery.cancel_scope.cancel()
    assert created["metadata"]["resourceVersion"] != answers[0]["metadata"]["resourceVersion"]
    assert events[0] is not answers[0]
    assert events[0] == answers[0]
    assert events[1] is answers[1]
    assert events[2] is answers[2]
    assert events[1]["status"] == {"done": {"n": 1.5, "text": "d\u00e9j\u00e0 <vu>"}}
    assert events[2]["metadata"]["annotations"]["mark"] == '{"a": 1}'
    assert not api.recent_writes  # both taken by their echoes


async def test_bookmarks_advance_the_resume_version(
    example_crd: None, api: APIClient, namespace: str
) -> None:
    """A quiet resource still gets BOOKMARKs with newer versions while the cluster is busy.

    (kube-apiserver sends them shortly before ``timeoutSeconds`` ends, if its watch cache has
    advanced, which writes to any resource make it do.)
    """
    configmaps = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap")
    _, version = await api.list_objs(KOPFEXAMPLES, namespace=namespace)
    bookmark_versions: list[int] = []

    async def keep_cluster_busy() -> None:
        for index in range(1000):
            await api.create(
                configmaps,
                namespace=namespace,
                body={"metadata": {"name": f"busy-{index}"}, "data": {"i": str(index)}},
            )
            await trio.sleep(0.25)

    path = KOPFEXAMPLES.get_url(namespace=namespace)
    params = {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": version,
        "timeoutSeconds": "12",
    }
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_cluster_busy)
        with trio.fail_after(30):
            async with api.stream(path, params=params) as lines:
                async for line in lines:
                    event = json.loads(line)
                    if event["type"] == "BOOKMARK":
                        bookmark_versions.append(
                            int(event["object"]["metadata"]["resourceVersion"])
                        )
        nursery.cancel_scope.cancel()
    assert bookmark_versions
    assert max(bookmark_versions) > int(version)


async def test_json_patch_with_a_stale_version_is_a_typed_422(
    example_crd: None, api: APIClient, namespace: str
) -> None:
    created = await api.create(KOPFEXAMPLES, namespace=namespace, body=_obj("guarded", a=1))
    stale = created["metadata"]["resourceVersion"]
    await api.patch(KOPFEXAMPLES, namespace=namespace, name="guarded", payload={"spec": {"a": 2}})
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": stale},
        {"op": "replace", "path": "/spec/a", "value": 3},
    ]
    with pytest.raises(APIUnprocessableEntityError) as caught:
        await api.patch(
            KOPFEXAMPLES, namespace=namespace, name="guarded", payload=ops, json_patch=True
        )
    assert caught.value.status == 422
    assert caught.value.message  # the API's own explanation is kept
    current = await api.get(KOPFEXAMPLES, namespace=namespace, name="guarded")
    assert current["spec"] == {"a": 2}


async def test_status_subresource_is_patched_separately(
    example_crd: None, api: APIClient, namespace: str
) -> None:
    await api.create(KOPFEXAMPLES, namespace=namespace, body=_obj("statusful", a=1))
    # The main endpoint ignores status; the status endpoint changes only the status.
    await api.patch(
        KOPFEXAMPLES, namespace=namespace, name="statusful", payload={"status": {"x": 1}}
    )
    body = await api.get(KOPFEXAMPLES, namespace=namespace, name="statusful")
    assert "status" not in body
    await api.patch(
        KOPFEXAMPLES,
        namespace=namespace,
        name="statusful",
        payload={"status": {"x": 2}, "spec": {"a": 9}},
        subresource="status",
    )
    body = await api.get(KOPFEXAMPLES, namespace=namespace, name="statusful")
    assert body["status"] == {"x": 2}
    assert body["spec"] == {"a": 1}


async def test_missing_objects_are_a_typed_404(
    example_crd: None, api: APIClient, namespace: str
) -> None:
    with pytest.raises(APINotFoundError) as caught:
        await api.get(KOPFEXAMPLES, namespace=namespace, name="nope")
    assert "not found" in caught.value.message


def test_kubectl_sees_what_the_client_made(kubectl: Kubectl) -> None:
    assert "default" in kubectl("get", "namespaces", "-o", "name")


async def test_list_watch_and_patch_through_a_connect_proxy(
    example_crd: None, kubeconfig: Path, namespace: str, nursery: trio.Nursery
) -> None:
    """The kubeconfig's proxy-url: every request and the watch go through CONNECT tunnels."""
    proxy = await start_proxy(nursery, TunnelProxy())
    info = dataclasses.replace(load_kubeconfig(str(kubeconfig)), proxy_url=proxy.url)
    async with APIClient(Vault({"proxied": info}), NetworkingSettings()) as api:
        await api.create(KOPFEXAMPLES, namespace=namespace, body=_obj("proxied", a=1))
        send, receive = trio.open_memory_channel[WatchItem](math.inf)
        seen: list[tuple[str | None, Any]] = []
        async with trio.open_nursery() as watcher:
            watcher.start_soon(
                partial(
                    stream_events,
                    api,
                    KOPFEXAMPLES,
                    namespace,
                    settings=WatchingSettings(),
                    send=send,
                )
            )
            with trio.fail_after(30):
                async for item in receive:
                    if item is LISTED:
                        await api.patch(
                            KOPFEXAMPLES,
                            namespace=namespace,
                            name="proxied",
                            payload={"spec": {"a": 2}},
                        )
                        continue
                    seen.append((item["type"], item["object"]["spec"]["a"]))
                    if item["type"] == "MODIFIED":
                        break
            watcher.cancel_scope.cancel()
    assert seen == [(None, 1), ("MODIFIED", 2)]
    server = urlsplit(info.server)
    assert proxy.tunnels >= 2  # the regular requests' connection(s) and the watch's own
    assert {asked for asked, _ in proxy.asked} == {f"CONNECT {server.hostname}:{server.port}"}
