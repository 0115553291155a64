"""Scanning the served resources from /api and /apis, with broken group versions skipped."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.discovery import scan_resources
from trioperator._client.errors import APIConnectionError, APIForbiddenError, APIProtocolError
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings
from trioperator._runtime.support.httpserver import DropConnection, Request, Response

CORE = {"kind": "APIVersions", "versions": ["v1"]}
CORE_V1 = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {"name": "namespaces", "singularName": "", "namespaced": False, "kind": "Namespace",
         "verbs": ["get", "list", "watch"], "shortNames": ["ns"]},
        {"name": "namespaces/status", "singularName": "", "namespaced": False,
         "kind": "Namespace", "verbs": ["get"]},
        {"name": "pods", "singularName": "", "namespaced": True, "kind": "Pod",
         "verbs": ["get", "list"], "shortNames": ["po"], "categories": ["all"]},
        {"name": "pods/log", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
        {"name": "pods/status", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    ],
}  # fmt: skip
GROUPS = {
    "kind": "APIGroupList",
    "groups": [
        {
            "name": "kopf.dev",
            "versions": [
                {"groupVersion": "kopf.dev/v1", "version": "v1"},
                {"groupVersion": "kopf.dev/v1beta1", "version": "v1beta1"},
            ],
            "preferredVersion": {"groupVersion": "kopf.dev/v1", "version": "v1"},
        },
        {
            "name": "metrics.k8s.io",
            "versions": [{"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}],
            "preferredVersion": {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"},
        },
        {
            "name": "gone.example.com",
            "versions": [{"groupVersion": "gone.example.com/v1", "version": "v1"}],
        },
    ],
}


def kopf_resources(version: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "groupVersion": f"kopf.dev/{version}",
        "resources": [
            {"name": "kopfexamples", "singularName": "kopfexample", "namespaced": True,
             "kind": "KopfExample", "verbs": ["list", "watch", "patch"],
             "shortNames": ["kex"], "categories": ["all"]},
            {"name": "kopfexamples/status", "singularName": "", "namespaced": True,
             "kind": "KopfExample", "verbs": ["get", "patch"]},
        ],
    }  # fmt: skip


DOCUMENTS: dict[str, Any] = {
    "/api": CORE,
    "/api/v1": CORE_V1,
    "/apis": GROUPS,
    "/apis/kopf.dev/v1": kopf_resources("v1"),
    "/apis/kopf.dev/v1beta1": kopf_resources("v1beta1"),
}


async def cluster(request: Request) -> Response:
    if request.path == "/apis/metrics.k8s.io/v1beta1":
        body = {"kind": "Status", "code": 503, "message": "the server is currently unable"}
        return Response(503, json.dumps(body).encode())
    if request.path in DOCUMENTS:
        return Response(200, json.dumps(DOCUMENTS[request.path]).encode())
    return Response(404, b'{"kind": "Status", "code": 404, "message": "not found"}')


async def test_scan(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    networking: NetworkingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    networking.error_backoffs = [1, 2]
    server.handler = cluster
    resources = await scan_resources(api)

    assert resources == [
        Resource(
            group="",
            version="v1",
            plural="namespaces",
            kind="Namespace",
            singular="namespace",
            shortcuts=frozenset({"ns"}),
            subresources=frozenset({"status"}),
            namespaced=False,
            preferred=True,
            verbs=frozenset({"get", "list", "watch"}),
        ),
        Resource(
            group="",
            version="v1",
            plural="pods",
            kind="Pod",
            singular="pod",
            shortcuts=frozenset({"po"}),
            categories=frozenset({"all"}),
            subresources=frozenset({"log", "status"}),
            namespaced=True,
            preferred=True,
            verbs=frozenset({"get", "list"}),
        ),
        *[
            Resource(
                group="kopf.dev",
                version=version,
                plural="kopfexamples",
                kind="KopfExample",
                singular="kopfexample",
                shortcuts=frozenset({"kex"}),
                categories=frozenset({"all"}),
                subresources=frozenset({"status"}),
                namespaced=True,
                preferred=version == "v1",
                verbs=frozenset({"list", "watch", "patch"}),
            )
            for version in ["v1", "v1beta1"]
        ],
    ]
    paths = [request.path for request in server.requests]
    assert paths == [
        "/api",
        "/api/v1",
        "/apis",
        "/apis/kopf.dev/v1",
        "/apis/kopf.dev/v1beta1",
        "/apis/metrics.k8s.io/v1beta1",  # 503: retried like any request, then skipped
        "/apis/metrics.k8s.io/v1beta1",
        "/apis/metrics.k8s.io/v1beta1",
        "/apis/gone.example.com/v1",  # 404: skipped at once
    ]
    skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(skipped) == 2
    assert skipped[0].startswith("Skipping /apis/metrics.k8s.io/v1beta1 in the resource discovery")
    assert skipped[1].startswith("Skipping /apis/gone.example.com/v1 in the resource discovery")


async def test_forbidden_group_version_is_skipped(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(
        server.json({"versions": []}),
        server.json(
            {"groups": [{"name": "x", "versions": [{"groupVersion": "x/v1", "version": "v1"}]}]}
        ),
        server.status(403),
    )
    assert await scan_resources(api) == []


async def test_malformed_group_version_is_skipped(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(
        server.json({"versions": []}),
        server.json(
            {"groups": [{"name": "x", "versions": [{"groupVersion": "x/v1", "version": "v1"}]}]}
        ),
        server.json({"resources": [{"no-name": True}]}),
    )
    assert await scan_resources(api) == []


async def test_forbidden_root_escalates(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.status(403))
    with pytest.raises(APIForbiddenError):
        await scan_resources(api)


async def test_connection_failure_escalates(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = []
    server.script(
        server.json({"versions": ["v1"]}),
        DropConnection(),
    )
    with pytest.raises(APIConnectionError):
        await scan_resources(api)


@pytest.mark.parametrize(
    ("core", "groups", "path"),
    [
        (b"<html>a proxy's login page</html>", b"{}", "/api"),
        (b'{"versions": "v1"}', b"{}", "/api"),
        (b'{"versions": ["v1"]}', b'{"groups": [{"versions": 42}]}', "/apis"),
    ],
)
async def test_malformed_root_documents_are_a_protocol_error_that_says_which(
    autojump_clock: MockClock, api: APIClient, server, core: bytes, groups: bytes, path: str
) -> None:
    # Without the resources of /api and /apis nothing can be served: the scan fails, with the
    # document named, instead of a decoder's exception from deep inside.
    server.script(Response(200, core), Response(200, b'{"resources": []}'), Response(200, groups))
    with pytest.raises(APIProtocolError, match=f"GET {path}: the discovery document"):
        await scan_resources(api)
