"""Proxies on the one HTTP path: CONNECT tunnels, kubeconfig proxy-url, HTTPS_PROXY/NO_PROXY.

The proxy is a small one on loopback (h11 reads its requests): it opens the tunnels it is asked
for, or refuses them, and records what it was asked. The API server behind it is the scripted
server of the conftest, with TLS certified by a test CA.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator

import pytest
import trio
import trustme
from tests.tunnelproxy import TunnelProxy, start_proxy
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.errors import APIConnectionError, APIProtocolError
from trioperator._client.http import HTTPSession
from trioperator._client.settings import NetworkingSettings
from trioperator._runtime.support.httpserver import Request, Response


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def api_server(start_server, ca: trustme.CA):  # type: ignore[no-untyped-def]
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server = await start_server(ssl_context=context)

    async def echo_path(request: Request) -> Response:
        return server.json({"path": request.path})

    server.handler = echo_path
    return server


def cluster(server, ca: trustme.CA, **kwargs: object) -> ConnectionInfo:  # type: ignore[no-untyped-def]
    return ConnectionInfo(
        server=server.url, ca_data=ca.cert_pem.bytes(), token="cluster-secret", **kwargs
    )


@contextlib.asynccontextmanager
async def session(info: ConnectionInfo, *, trust_env: bool = False) -> AsyncIterator[HTTPSession]:
    http = HTTPSession(info, trust_env=trust_env)
    try:
        yield http
    finally:
        await http.aclose()


async def test_kubeconfig_proxy_url_tunnels_tls_to_the_api_server(
    autojump_clock: MockClock, nursery: trio.Nursery, api_server, ca: trustme.CA
) -> None:
    proxy = await start_proxy(nursery, TunnelProxy())
    async with session(cluster(api_server, ca, proxy_url=proxy.url)) as http:
        bodies = [(await http.request("GET", f"/api/r{i}")).body for i in range(3)]
        async with http.stream("GET", "/api/watch") as stream:
            lines = [line async for line in stream.lines()]
    assert bodies == [b'{"path": "/api/r%d"}' % i for i in range(3)]
    assert lines == [b'{"path": "/api/watch"}']
    # One tunnel for the three kept-alive requests, one for the stream; the proxy saw only
    # the way in, never the requests or their credentials (those went through TLS).
    target = f"CONNECT 127.0.0.1:{api_server.port}"
    assert [asked for asked, _ in proxy.asked] == [target, target]
    assert proxy.asked[0][1]["host"] == f"127.0.0.1:{api_server.port}"
    assert all("authorization" not in headers for _, headers in proxy.asked)
    assert [r.path for r in api_server.requests] == ["/api/r0", "/api/r1", "/api/r2", "/api/watch"]
    assert api_server.requests[0].headers["authorization"] == "Bearer cluster-secret"


async def test_proxy_credentials_from_the_url_go_to_the_proxy_only(
    autojump_clock: MockClock, nursery: trio.Nursery, api_server, ca: trustme.CA
) -> None:
    proxy = await start_proxy(nursery, TunnelProxy(password="p@ss:word"))
    url = f"http://me:p%40ss%3Aword@127.0.0.1:{proxy.port}"
    async with session(cluster(api_server, ca, proxy_url=url)) as http:
        assert (await http.request("GET", "/api")).status == 200
    assert proxy.tunnels == 1
    assert "proxy-authorization" not in api_server.requests[0].headers


async def test_a_refused_tunnel_is_a_clear_error_without_the_proxy_credentials(
    autojump_clock: MockClock, nursery: trio.Nursery, api_server, ca: trustme.CA
) -> None:
    proxy = await start_proxy(nursery, TunnelProxy(password="right"))
    url = f"http://me:wrong@127.0.0.1:{proxy.port}"
    async with session(cluster(api_server, ca, proxy_url=url)) as http:
        with pytest.raises(APIConnectionError) as caught:
            await http.request("GET", "/api")
    message = str(caught.value)
    assert message == (
        f"GET {api_server.url}/api: the proxy http://127.0.0.1:{proxy.port} refused the tunnel: "
        "HTTP 407 Proxy Authentication Required"
    )
    assert "wrong" not in message
    assert api_server.requests == []


async def test_an_https_proxy_carries_tls_inside_tls(
    autojump_clock: MockClock, nursery: trio.Nursery, api_server, ca: trustme.CA
) -> None:
    proxy_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(proxy_context)
    proxy = await start_proxy(nursery, TunnelProxy(stream_wrapper=proxy_context))
    async with session(cluster(api_server, ca, proxy_url=proxy.url)) as http:
        bodies = [(await http.request("GET", f"/api/r{i}")).body for i in range(2)]
    assert bodies == [b'{"path": "/api/r0"}', b'{"path": "/api/r1"}']
    assert proxy.tunnels == 1  # kept alive through both TLS layers


async def test_environment_proxies_only_with_trust_env_and_not_for_no_proxy(
    autojump_clock: MockClock,
    nursery: trio.Nursery,
    api_server,
    ca: trustme.CA,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = await start_proxy(nursery, TunnelProxy())
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.delenv("https_proxy", raising=False)
    info = cluster(api_server, ca)

    async with session(info, trust_env=False) as http:
        await http.request("GET", "/direct")
    assert proxy.tunnels == 0

    async with session(info, trust_env=True) as http:
        await http.request("GET", "/proxied")
    assert proxy.tunnels == 1

    monkeypatch.setenv("NO_PROXY", "example.com, 127.0.0.1")
    async with session(info, trust_env=True) as http:
        await http.request("GET", "/bypassed")
    assert proxy.tunnels == 1

    assert [r.path for r in api_server.requests] == ["/direct", "/proxied", "/bypassed"]


async def test_an_unusable_proxy_url_fails_each_request_clearly_and_is_not_retried(
    autojump_clock: MockClock, api_server, ca: trustme.CA, caplog: pytest.LogCaptureFixture
) -> None:
    info = cluster(api_server, ca, proxy_url="socks5://127.0.0.1:1080")
    async with APIClient(Vault({"default": info}), NetworkingSettings()) as api:
        with pytest.raises(APIProtocolError, match="unsupported proxy URL scheme 'socks5'"):
            await api.request("GET", "/api")
    assert not [r for r in caplog.records if "will retry" in r.getMessage()]
    assert api_server.requests == []


async def test_environment_proxy_credentials_from_netrc(
    autojump_clock: MockClock,
    nursery: trio.Nursery,
    api_server,
    ca: trustme.CA,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path,
) -> None:
    proxy = await start_proxy(nursery, TunnelProxy(password="from-netrc"))
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text("machine 127.0.0.1 login me password from-netrc\n")
    netrc_file.chmod(0o600)
    for name in ("https_proxy", "no_proxy", "NO_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("NETRC", str(netrc_file))
    async with session(cluster(api_server, ca), trust_env=True) as http:
        assert (await http.request("GET", "/api")).status == 200
    assert proxy.tunnels == 1


async def test_a_tunnel_h11_cannot_ask_for_is_a_protocol_error(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    proxy = await start_proxy(nursery, TunnelProxy())
    info = ConnectionInfo(server="https://bad host:6443", proxy_url=proxy.url)
    async with session(info) as http:
        with pytest.raises(APIProtocolError, match=r"^GET https://bad host:6443/api: cannot ask"):
            await http.request("GET", "/api")
    assert proxy.asked == []  # nothing malformed was sent
