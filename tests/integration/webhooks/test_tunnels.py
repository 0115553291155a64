"""The ngrok tunnel (with pyngrok replaced by a fake: ngrok itself is not reachable from tests)
and the detection of local clusters by the auto server and tunnel (against TLS servers on
loopback that present the certificates such clusters have)."""

from __future__ import annotations

import base64
import dataclasses
import json
import ssl
import sys
import types
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio
import trustme
from trioperator._client.credentials import ConnectionInfo
from trioperator._engine.webhooks import WebhookClientConfig, WebhookFn
from trioperator._kits.cluster_detection import detect_cluster_host
from trioperator._kits.webhooks import (
    WebhookAutoServer,
    WebhookAutoTunnel,
    WebhookNgrokTunnel,
    WebhookServer,
)
from trioperator._runtime.support.httpserver import UNBOUNDED, Request, Response, serve_http

from .conftest import Recorder, post, running, write_server_files


def trusting_file(cafile: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cafile))


@dataclasses.dataclass
class FakeNgrok:
    """What pyngrok was asked to do; tunnels get public URLs in order."""

    configs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    connected: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    disconnected: list[str] = dataclasses.field(default_factory=list)

    def module(self) -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
        fake = self
        package = types.ModuleType("pyngrok")
        conf = types.ModuleType("pyngrok.conf")
        ngrok = types.ModuleType("pyngrok.ngrok")

        class PyngrokConfig:
            def __init__(self, **options: Any) -> None:
                fake.configs.append(options)

        def connect(addr: str, proto: str, *, pyngrok_config: Any) -> Any:
            assert isinstance(pyngrok_config, PyngrokConfig)
            fake.connected.append((addr, proto))
            return types.SimpleNamespace(public_url=f"https://t{len(fake.connected)}.ngrok.example")

        def disconnect(public_url: str, *, pyngrok_config: Any) -> None:
            fake.disconnected.append(public_url)

        conf.PyngrokConfig = PyngrokConfig  # type: ignore[attr-defined]
        ngrok.connect = connect  # type: ignore[attr-defined]
        ngrok.disconnect = disconnect  # type: ignore[attr-defined]
        package.conf = conf  # type: ignore[attr-defined]
        package.ngrok = ngrok  # type: ignore[attr-defined]
        return package, conf, ngrok


@pytest.fixture
def fake_ngrok(monkeypatch: pytest.MonkeyPatch) -> FakeNgrok:
    fake = FakeNgrok()
    package, conf, ngrok = fake.module()
    monkeypatch.setitem(sys.modules, "pyngrok", package)
    monkeypatch.setitem(sys.modules, "pyngrok.conf", conf)
    monkeypatch.setitem(sys.modules, "pyngrok.ngrok", ngrok)
    return fake


async def test_ngrok_tunnels_a_local_http_server(recorder: Recorder, fake_ngrok: FakeNgrok) -> None:
    tunnel = WebhookNgrokTunnel(
        addr="127.0.0.1", path="/hooks", token="T", region="eu", binary="/bin/ngrok"
    )
    async with running(tunnel, recorder) as srv:
        assert srv.config == {"url": "https://t1.ngrok.example/hooks"}
        [(target, proto)] = fake_ngrok.connected
        local_host, local_port = target.split(":")
        assert local_host == "127.0.0.1"
        assert proto == "http"
        # What ngrok forwards to: the local plain-HTTP server, with the same paths.
        reply = await post(int(local_port), "/hooks/validate-x")
        assert reply.status == 200
        assert fake_ngrok.disconnected == []
    assert fake_ngrok.configs == [{"auth_token": "T", "region": "eu", "ngrok_path": "/bin/ngrok"}]
    assert [call.webhook for call in recorder.calls] == ["validate-x"]
    assert fake_ngrok.disconnected == ["https://t1.ngrok.example"]


@dataclasses.dataclass
class FakeCluster:
    info: ConnectionInfo
    kubeconfig: Path


@asynccontextmanager
async def fake_cluster(
    tmp_path: Path, *, common_name: str | None = None, sans: tuple[str, ...] = (), version: str
) -> AsyncIterator[FakeCluster]:
    """An HTTPS "API server" on loopback with the certificate of a kind of cluster."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", *sans, common_name=common_name)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)

    async def handle(request: Request) -> Response:
        if request.path == "/version":
            return Response(200, json.dumps({"gitVersion": version}).encode())
        return Response(404, b"{}")

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(
                serve_http, handle, host="127.0.0.1", port=0, limits=UNBOUNDED, ssl_context=context
            )
        )
        port = listeners[0].socket.getsockname()[1]
        server = f"https://127.0.0.1:{port}"
        info = ConnectionInfo(server=server, ca_data=ca.cert_pem.bytes())
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "c",
                    "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                    "clusters": [
                        {
                            "name": "k",
                            "cluster": {
                                "server": server,
                                "certificate-authority-data": base64.b64encode(
                                    ca.cert_pem.bytes()
                                ).decode(),
                            },
                        }
                    ],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                }
            )
        )
        yield FakeCluster(info, kubeconfig)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("common_name", "sans", "version", "host"),
    [
        ("minikube", (), "v1.31.0", "host.minikube.internal"),
        ("k3s", (), "v1.31.0+k3s1", "host.k3d.internal"),
        ("kube-apiserver", (), "v1.31.0+k3s1", "host.k3d.internal"),  # by the version only
        (None, ("docker-for-desktop",), "v1.31.0", "host.docker.internal"),
        ("kube-apiserver", ("kubernetes",), "v1.20.15", None),
    ],
)
async def test_clusters_are_recognised_by_their_certificate_or_version(
    tmp_path: Path, common_name: str | None, sans: tuple[str, ...], version: str, host: str | None
) -> None:
    async with fake_cluster(tmp_path, common_name=common_name, sans=sans, version=version) as k:
        assert await detect_cluster_host(k.info) == host


async def test_an_unreachable_cluster_is_not_recognised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    for listener in listeners:
        await listener.aclose()
    assert await detect_cluster_host(ConnectionInfo(server=f"https://127.0.0.1:{port}")) is None
    assert "Cannot detect the cluster type" in caplog.text


@pytest.fixture
def no_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection prefers a pod's service account; tests may run in a pod."""
    import trioperator._kits.cluster_detection as detection

    monkeypatch.setattr(detection, "login_with_service_account", lambda: None)


async def test_auto_server_uses_the_detected_host(
    recorder: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_service_account: None
) -> None:
    async with fake_cluster(tmp_path, common_name="minikube", version="v1.31.0") as k:
        monkeypatch.setenv("KUBECONFIG", str(k.kubeconfig))
        async with running(WebhookAutoServer(addr="127.0.0.1", path="/p"), recorder) as srv:
            assert srv.config["url"] == f"https://host.minikube.internal:{srv.port}/p"
            reply = await post(
                srv.port,
                "/p/x",
                context=srv.trusting_context(),
                server_hostname="host.minikube.internal",
            )
            assert reply.status == 200


async def test_auto_server_for_an_unknown_cluster_is_a_local_server(
    recorder: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_service_account: None
) -> None:
    async with fake_cluster(tmp_path, common_name="kube-apiserver", version="v1.20.15") as k:
        monkeypatch.setenv("KUBECONFIG", str(k.kubeconfig))
        async with running(WebhookAutoServer(addr="127.0.0.1"), recorder) as srv:
            assert srv.config["url"] == f"https://127.0.0.1:{srv.port}"


async def test_auto_tunnel_serves_locally_for_a_known_cluster(
    recorder: Recorder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_service_account: None,
    fake_ngrok: FakeNgrok,
) -> None:
    async with fake_cluster(tmp_path, common_name="k3s", version="v1.31.0+k3s1") as k:
        monkeypatch.setenv("KUBECONFIG", str(k.kubeconfig))
        async with running(WebhookAutoTunnel(addr="127.0.0.1"), recorder) as srv:
            assert srv.config["url"] == f"https://host.k3d.internal:{srv.port}"
    assert fake_ngrok.connected == []


async def test_auto_tunnel_tunnels_for_an_unknown_cluster(
    recorder: Recorder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_service_account: None,
    fake_ngrok: FakeNgrok,
) -> None:
    async with fake_cluster(tmp_path, common_name="kube-apiserver", version="v1.20.15") as k:
        monkeypatch.setenv("KUBECONFIG", str(k.kubeconfig))
        async with running(WebhookAutoTunnel(addr="127.0.0.1", path="/p"), recorder) as srv:
            assert srv.config == WebhookClientConfig(url="https://t1.ngrok.example/p")
    assert len(fake_ngrok.connected) == 1


class KopfStyleTunnel(WebhookServer):
    """A tunnel as Kopf's docs show it: a server subclass adjusting the local server's configs."""

    relayed: list[WebhookClientConfig]

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        self.relayed = []
        async for config in super().__call__(fn):
            self.relayed.append(config)
            yield {"url": config["url"].replace("127.0.0.1", "tunnel.example")}


async def test_a_kopf_style_subclass_advertises_what_its_call_yields(
    recorder: Recorder, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    certfile, pkeyfile, cafile = write_server_files(tmp_path, trustme.CA())
    server = KopfStyleTunnel(
        addr="127.0.0.1", path="/p", certfile=certfile, pkeyfile=pkeyfile, file_check_interval=5
    )
    async with running(server, recorder) as srv:
        local_port = urlsplit(server.relayed[0]["url"]).port
        assert srv.config == {"url": f"https://tunnel.example:{local_port}/p"}
        reply = await post(local_port, "/p/x", context=trusting_file(cafile))
        assert reply.status == 200
        # The local server's restart (renewed files) goes through the subclass too.
        write_server_files(tmp_path, trustme.CA())
        assert await srv.configs.receive() == srv.config
        assert len(server.relayed) == 2
    assert [call.webhook for call in recorder.calls] == ["x"]


async def test_a_server_is_not_iterable_on_its_own(recorder: Recorder) -> None:
    with pytest.raises(TypeError, match="subclass it and override __call__"):
        async for _ in WebhookServer()(recorder):
            pass  # pragma: no cover
