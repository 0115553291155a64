"""The verbs of the API client: the exact requests they send and what they return."""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path
from types import MappingProxyType

import pytest
import trustme
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.errors import APIConnectionError, APIGoneError, APINotFoundError
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings
from trioperator._runtime.support.httpserver import Response

KEX = Resource(group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample")
NODES = Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
KEX_URL = "/apis/kopf.dev/v1/namespaces/ns1/kopfexamples"


def kex(name: str, rv: str = "1") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns1", "resourceVersion": rv}, "spec": {}}


def page(items: list[dict[str, object]], rv: str, token: str | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"resourceVersion": rv}
    if token is not None:
        meta["continue"] = token
    return {
        "kind": "KopfExampleList",
        "apiVersion": "kopf.dev/v1",
        "metadata": meta,
        "items": items,
    }


async def test_get(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", **kex("a")}))
    obj = await api.get(KEX, namespace="ns1", name="a")
    assert obj["metadata"]["name"] == "a"
    [request] = server.requests
    assert (request.method, request.path) == ("GET", f"{KEX_URL}/a")
    assert request.query == {}


async def test_get_subresource(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json({"status": {}}))
    await api.get(KEX, namespace="ns1", name="a", subresource="status")
    assert server.requests[0].path == f"{KEX_URL}/a/status"


async def test_get_missing_object(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.status(404, 'kopfexamples.kopf.dev "a" not found', reason="NotFound"))
    with pytest.raises(APINotFoundError) as info:
        await api.get(KEX, namespace="ns1", name="a")
    assert info.value.message == 'kopfexamples.kopf.dev "a" not found'
    assert info.value.reason == "NotFound"


async def test_list_in_one_page(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json(page([kex("a"), kex("b")], rv="100")))
    items, rv = await api.list_objs(KEX, namespace="ns1")
    assert rv == "100"
    assert [item["metadata"]["name"] for item in items] == ["a", "b"]  # type: ignore[index]
    # Kubernetes omits these in lists; the client restores them from the list itself.
    assert all(item["apiVersion"] == "kopf.dev/v1" for item in items)
    assert all(item["kind"] == "KopfExample" for item in items)
    [request] = server.requests
    assert request.path == KEX_URL
    assert request.query == {}


async def test_list_keeps_what_items_declare(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    item = {"apiVersion": "kopf.dev/v1beta1", "kind": "Other", **kex("a")}
    server.script(server.json({"metadata": {"resourceVersion": "5"}, "items": [item]}))
    items, _ = await api.list_objs(KEX, namespace="ns1")
    assert items[0]["apiVersion"] == "kopf.dev/v1beta1"
    assert items[0]["kind"] == "Other"


async def test_list_without_list_kind_uses_the_resource(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(server.json({"metadata": {"resourceVersion": "5"}, "items": [kex("a")]}))
    items, _ = await api.list_objs(KEX, namespace="ns1")
    assert items[0]["apiVersion"] == "kopf.dev/v1"
    assert items[0]["kind"] == "KopfExample"


async def test_list_with_null_items(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json({"metadata": {"resourceVersion": "7"}, "items": None}))
    assert await api.list_objs(KEX) == ([], "7")
    assert server.requests[0].path == "/apis/kopf.dev/v1/kopfexamples"


async def test_list_paginates(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(
        server.json(page([kex("a"), kex("b")], rv="100", token="t1")),
        server.json(page([kex("c"), kex("d")], rv="100", token="t2")),
        server.json(page([kex("e")], rv="100")),
    )
    items, rv = await api.list_objs(
        KEX, namespace="ns1", limit=2, label_selector="app=x", field_selector="metadata.name!=z"
    )
    assert [item["metadata"]["name"] for item in items] == ["a", "b", "c", "d", "e"]  # type: ignore[index]
    assert rv == "100"
    queries = [request.query for request in server.requests]
    common = {"labelSelector": ["app=x"], "fieldSelector": ["metadata.name!=z"], "limit": ["2"]}
    assert queries == [common, {**common, "continue": ["t1"]}, {**common, "continue": ["t2"]}]


async def test_list_restarts_when_the_continue_token_expires(
    autojump_clock: MockClock, api: APIClient, server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    server.script(
        server.json(page([kex("a")], rv="100", token="t1")),
        server.status(410, "The provided continue parameter is too old", reason="Expired"),
        server.json(page([kex("a")], rv="200", token="t9")),
        server.json(page([kex("b")], rv="200")),
    )
    items, rv = await api.list_objs(KEX, namespace="ns1", limit=1)
    assert [item["metadata"]["name"] for item in items] == ["a", "b"]  # type: ignore[index]
    assert rv == "200"
    assert [r.param("continue") for r in server.requests] == [None, "t1", None, "t9"]
    assert any("expired midway" in r.getMessage() for r in caplog.records)


async def test_list_pages_hands_each_page_on_before_fetching_the_next(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(
        server.json(page([kex("a"), kex("b")], rv="100", token="t1")),
        server.status(410, "The provided continue parameter is too old", reason="Expired"),
        server.json(page([kex("a")], rv="200", token="t9")),
        server.json(page([kex("c")], rv="200")),
    )
    seen: list[tuple[list[str], bool, int]] = []

    async def on_page(items: list[dict[str, object]], restarted: bool) -> None:
        names = [item["metadata"]["name"] for item in items]  # type: ignore[index]
        # How many requests the server has had when the page is handed on: one per page so far.
        seen.append((names, restarted, len(server.requests)))
        assert all(item["kind"] == "KopfExample" for item in items)

    rv = await api.list_pages(KEX, namespace="ns1", limit=2, on_page=on_page)
    assert rv == "200"
    assert seen == [(["a", "b"], False, 1), (["a"], True, 3), (["c"], False, 4)]


async def test_list_gone_at_the_first_page_escalates(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(server.status(410))
    with pytest.raises(APIGoneError):
        await api.list_objs(KEX, namespace="ns1")


async def test_create(autojump_clock: MockClock, api: APIClient, server) -> None:
    body = {"apiVersion": "kopf.dev/v1", "kind": "KopfExample", **kex("new")}
    server.script(server.json({**body, "metadata": {**body["metadata"], "uid": "u1"}}, 201))  # type: ignore[dict-item]
    created = await api.create(KEX, body=body)
    assert created["metadata"]["uid"] == "u1"
    [request] = server.requests
    assert (request.method, request.path) == ("POST", KEX_URL)
    assert request.headers["content-type"] == "application/json"
    assert request.json() == body


async def test_create_cluster_scoped(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json({"metadata": {"name": "n1"}}, 201))
    await api.create(NODES, body={"metadata": {"name": "n1"}})
    assert server.requests[0].path == "/api/v1/nodes"


async def test_merge_patch(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json(kex("a", rv="2")))
    patch = {"metadata": {"annotations": {"x": "y", "gone": None}}}
    result = await api.patch(KEX, namespace="ns1", name="a", payload=patch)
    assert result["metadata"]["resourceVersion"] == "2"
    [request] = server.requests
    assert (request.method, request.path) == ("PATCH", f"{KEX_URL}/a")
    assert request.headers["content-type"] == "application/merge-patch+json"
    assert request.json() == patch


async def test_status_patch(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json(kex("a", rv="3")))
    await api.patch(
        KEX, namespace="ns1", name="a", subresource="status", payload={"status": {"a": 1}}
    )
    [request] = server.requests
    assert request.path == f"{KEX_URL}/a/status"
    assert request.headers["content-type"] == "application/merge-patch+json"
    assert request.json() == {"status": {"a": 1}}


async def test_json_patch(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json(kex("a", rv="4")))
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "3"},
        {"op": "remove", "path": "/metadata/finalizers"},
    ]
    await api.patch(KEX, namespace="ns1", name="a", payload=ops)
    [request] = server.requests
    assert request.headers["content-type"] == "application/json-patch+json"
    assert request.body == (
        b'[{"op":"test","path":"/metadata/resourceVersion","value":"3"},'
        b'{"op":"remove","path":"/metadata/finalizers"}]'
    )


async def test_json_patch_flag(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json(kex("a")))
    await api.patch(KEX, namespace="ns1", name="a", payload=[], json_patch=True)
    assert server.requests[0].headers["content-type"] == "application/json-patch+json"


async def test_delete(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(
        server.json({**kex("a"), "metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"}})
    )
    result = await api.delete(KEX, namespace="ns1", name="a", propagation_policy="Foreground")
    assert result is not None
    [request] = server.requests
    assert (request.method, request.path) == ("DELETE", f"{KEX_URL}/a")
    assert request.query == {"propagationPolicy": ["Foreground"]}
    assert request.body == b""


async def test_delete_with_empty_response(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(Response(200, b""))
    assert await api.delete(KEX, namespace="ns1", name="a") is None
    assert server.requests[0].query == {}


async def test_request_with_empty_and_text_bodies(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(Response(204, b""), Response(200, b"ok", content_type="text/plain"))
    assert await api.request("GET", "/x") is None
    assert await api.request("GET", "/healthz") == "ok"


async def test_request_with_raw_bytes_payload(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(server.json([1, 2]))
    result = await api.request("POST", "/x", payload=b"raw", content_type="text/plain")
    assert result == [1, 2]
    assert server.requests[0].body == b"raw"
    assert server.requests[0].headers["content-type"] == "text/plain"


async def test_read_only_mappings_are_encoded_as_objects(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(server.json({}))
    frozen = MappingProxyType({"spec": MappingProxyType({"field": "value"})})
    await api.patch(KEX, namespace="ns1", name="a", payload=frozen)
    assert server.requests[0].json() == {"spec": {"field": "value"}}


async def test_request_params(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json({}))
    await api.request("GET", "/x", params={"a": "1", "b": "x y"})
    assert server.requests[0].query == {"a": ["1"], "b": ["x y"]}


async def test_sequential_requests_on_kept_alive_connections(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.handler = _empty_object
    for _ in range(5):
        assert await api.request("GET", "/x") == {}
    assert len(server.requests) == 5


async def _empty_object(request: object) -> Response:
    return Response(200, b"{}")


# ---------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(
    ca: trustme.CA, *names: str, client_ca: trustme.CA | None = None
) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(context)
    return context


def ours() -> set[str]:
    """Temporary files of the HTTP layer (their prefix is trioperator's)."""
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("trioperator-")}


async def tls_request(info: ConnectionInfo, networking: NetworkingSettings) -> object:
    networking.error_backoffs = []
    async with APIClient(Vault({"tls": info}), networking) as api:
        return await api.request("GET", "/version")


async def test_tls_with_ca_data(
    autojump_clock: MockClock, start_server, ca: trustme.CA, networking: NetworkingSettings
) -> None:
    server = await start_server(server_context(ca, "127.0.0.1"))
    server.script(server.json({"gitVersion": "v1.20.2"}))
    info = ConnectionInfo(server=server.url, ca_data=ca.cert_pem.bytes())
    assert await tls_request(info, networking) == {"gitVersion": "v1.20.2"}


async def test_tls_with_ca_path(
    autojump_clock: MockClock,
    start_server,
    ca: trustme.CA,
    networking: NetworkingSettings,
    tmp_path: Path,
) -> None:
    server = await start_server(server_context(ca, "127.0.0.1"))
    server.script(server.json({}))
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    assert (
        await tls_request(ConnectionInfo(server=server.url, ca_path=str(ca_file)), networking) == {}
    )


async def test_tls_with_an_unknown_ca_fails(
    autojump_clock: MockClock, start_server, ca: trustme.CA, networking: NetworkingSettings
) -> None:
    server = await start_server(server_context(ca, "127.0.0.1"))
    other = trustme.CA()
    info = ConnectionInfo(server=server.url, ca_data=other.cert_pem.bytes())
    with pytest.raises(APIConnectionError):
        await tls_request(info, networking)


async def test_tls_insecure(
    autojump_clock: MockClock, start_server, ca: trustme.CA, networking: NetworkingSettings
) -> None:
    server = await start_server(server_context(ca, "somewhere.else"))
    server.script(server.json({}))
    assert await tls_request(ConnectionInfo(server=server.url, insecure=True), networking) == {}


async def test_tls_server_name(
    autojump_clock: MockClock, start_server, ca: trustme.CA, networking: NetworkingSettings
) -> None:
    # The certificate does not name 127.0.0.1: only the configured TLS name makes it valid.
    server = await start_server(server_context(ca, "kube.internal"))
    server.script(server.json({"named": True}))
    ca_data = ca.cert_pem.bytes()
    with pytest.raises(APIConnectionError):
        await tls_request(ConnectionInfo(server=server.url, ca_data=ca_data), networking)
    named = ConnectionInfo(server=server.url, ca_data=ca_data, tls_server_name="kube.internal")
    assert await tls_request(named, networking) == {"named": True}


async def test_tls_client_certificate_from_data(
    autojump_clock: MockClock,
    start_server,
    ca: trustme.CA,
    networking: NetworkingSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The temporary files go to a directory of this test's own: other processes on the machine
    # (another test run, a control plane's state directory) make "trioperator-" files in the
    # shared one too, and one made during this request failed the test.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    client_ca = trustme.CA()
    client_cert = client_ca.issue_cert("operator@example.com")
    server = await start_server(server_context(ca, "127.0.0.1", client_ca=client_ca))
    server.script(server.json({}))
    info = ConnectionInfo(
        server=server.url,
        ca_data=ca.cert_pem.bytes(),
        certificate_data=b"".join(blob.bytes() for blob in client_cert.cert_chain_pems),
        private_key_data=client_cert.private_key_pem.bytes(),
    )
    files_before = ours()
    assert await tls_request(info, networking) == {}
    # The key material was written to temporary files only for loading, then removed.
    assert ours() - files_before == set()
    peer = server.requests[0].peer
    assert peer is not None
    assert peer["subjectAltName"] == (("email", "operator@example.com"),)


async def test_tls_client_certificate_from_files(
    autojump_clock: MockClock,
    start_server,
    ca: trustme.CA,
    networking: NetworkingSettings,
    tmp_path: Path,
) -> None:
    client_ca = trustme.CA()
    client_cert = client_ca.issue_cert("operator")
    server = await start_server(server_context(ca, "127.0.0.1", client_ca=client_ca))
    server.script(server.json({}))
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    client_cert.cert_chain_pems[0].write_to_path(str(cert_file))
    client_cert.private_key_pem.write_to_path(str(key_file))
    info = ConnectionInfo(
        server=server.url,
        ca_data=ca.cert_pem.bytes(),
        certificate_path=str(cert_file),
        private_key_path=str(key_file),
    )
    assert await tls_request(info, networking) == {}
    assert server.requests[0].peer["subjectAltName"] == (("DNS", "operator"),)


async def test_tls_without_a_client_certificate_is_refused(
    autojump_clock: MockClock, start_server, ca: trustme.CA, networking: NetworkingSettings
) -> None:
    server = await start_server(server_context(ca, "127.0.0.1", client_ca=trustme.CA()))
    info = ConnectionInfo(server=server.url, ca_data=ca.cert_pem.bytes())
    with pytest.raises(APIConnectionError):
        await tls_request(info, networking)
