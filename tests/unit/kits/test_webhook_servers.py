"""Webhook servers as configuration: advertised URLs, certificate names, refused settings,
recognised clusters, and the errors that name a missing extra."""

from __future__ import annotations

import ssl
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trioperator as kopf
from trioperator._client.api import APIClient
from trioperator._engine.webhooks import WebhookClientConfig
from trioperator._kits import webhooks
from trioperator._kits.cluster_detection import ServerIdentity, recognise_cluster
from trioperator._kits.errors import MissingDependencyError
from trioperator._kits.webhooks import (
    WebhookServer,
    accessible_addr,
    certificate_hostnames,
)
from trioperator._runtime.admission.webhook_serving import ServerSupport, providing


@pytest.mark.parametrize(
    ("server", "url"),
    [
        (kopf.WebhookServer(), "https://localhost:9443"),
        (kopf.WebhookServer(addr="0.0.0.0", path="/hooks/"), "https://127.0.0.1:9443/hooks"),
        (kopf.WebhookServer(addr="::", path="a/b"), "https://[::1]:9443/a/b"),
        (kopf.WebhookServer(addr="10.0.0.5", insecure=True), "http://10.0.0.5:9443"),
        (kopf.WebhookServer(addr="0.0.0.0", host="example.org"), "https://example.org:9443"),
        (kopf.WebhookServer(host="fe80::1"), "https://[fe80::1]:9443"),
        (kopf.WebhookK3dServer(addr="0.0.0.0"), "https://host.k3d.internal:9443"),
        (kopf.WebhookMinikubeServer(), "https://host.minikube.internal:9443"),
        (kopf.WebhookDockerDesktopServer(), "https://host.docker.internal:9443"),
        (kopf.WebhookK3dServer(host="mine.example"), "https://mine.example:9443"),
    ],
)
def test_advertised_url(server: WebhookServer, url: str) -> None:
    assert server.url(9443) == url


def test_default_ports_are_omitted_from_urls() -> None:
    assert WebhookServer(addr="1.2.3.4").url(443) == "https://1.2.3.4"
    assert WebhookServer(addr="1.2.3.4", insecure=True).url(80) == "http://1.2.3.4"
    assert WebhookServer(addr="1.2.3.4", insecure=True).url(443) == "http://1.2.3.4:443"


@pytest.mark.parametrize(
    ("addr", "accessible"),
    [
        (None, "localhost"),
        ("0.0.0.0", "127.0.0.1"),
        ("::", "::1"),
        ("192.168.1.2", "192.168.1.2"),
        ("myhost", "myhost"),
    ],
)
def test_wildcard_addresses_are_reached_by_the_loopback(addr: str | None, accessible: str) -> None:
    assert accessible_addr(addr) == accessible


def test_certificate_names_cover_host_addr_extras_and_loopback_with_a_name_first() -> None:
    names = certificate_hostnames("hooks.example", "10.0.0.5", ["alt.example", "10.0.0.6"])
    assert names == [
        "hooks.example",
        "10.0.0.5",
        "alt.example",
        "10.0.0.6",
        "localhost",
        "127.0.0.1",
    ]


def test_certificate_names_drop_wildcards_and_duplicates_and_normalise_ips() -> None:
    names = certificate_hostnames(None, "0.0.0.0", ["::", "0:0::1", "localhost", "127.0.0.1"])
    assert names == ["localhost", "127.0.0.1", "::1"]


def test_the_first_non_ip_name_leads() -> None:
    assert certificate_hostnames("10.1.1.1", None, [])[0] == "localhost"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"insecure": True, "context": ssl.create_default_context()}, "cannot have an SSL"),
        ({"pkeyfile": "key.pem"}, "needs its certfile"),
        ({"port": 70000}, "0..65535"),
        ({"file_check_interval": 0}, "must be positive"),
    ],
)
def test_contradicting_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WebhookServer(**kwargs)  # type: ignore[arg-type]


def test_missing_trustme_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trustme", None)
    with pytest.raises(MissingDependencyError, match=r"trioperator\[webhooks\]"):
        WebhookServer().build_setup()


def test_without_trustme_provided_or_no_certificates_still_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "trustme", None)
    setup = WebhookServer(insecure=True, cadata=b"PEM").build_setup()
    assert (setup.context, setup.cadata) == (None, b"PEM")


async def test_missing_pyngrok_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyngrok", None)
    send, _ = trio.open_memory_channel[WebhookClientConfig](1)
    with pytest.raises(MissingDependencyError, match=r"trioperator\[ngrok\]"):
        await kopf.WebhookNgrokTunnel().serve(None, configs=send)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("identity", "host"),
    [
        (ServerIdentity(subject_cn="k3s"), "host.k3d.internal"),
        (ServerIdentity(subject_org="k3s"), "host.k3d.internal"),
        (ServerIdentity(issuer_cn="k3s-server-ca@1700000000"), "host.k3d.internal"),
        (ServerIdentity(git_version="v1.30.4+k3s1"), "host.k3d.internal"),
        (ServerIdentity(subject_cn="minikube"), "host.minikube.internal"),
        (ServerIdentity(issuer_cn="minikubeCA"), "host.minikube.internal"),
        (ServerIdentity(sans={"docker-for-desktop"}), "host.docker.internal"),
        (ServerIdentity(sans={"kubernetes.docker.internal"}), "host.docker.internal"),
        (ServerIdentity(subject_cn="kube-apiserver", git_version="v1.20.15"), None),
        (ServerIdentity(), None),
    ],
)
def test_recognised_clusters(identity: ServerIdentity, host: str | None) -> None:
    assert recognise_cluster(identity) == host


def test_build_certificate_refuses_only_wildcards() -> None:
    with pytest.raises(ValueError, match="No usable host names"):
        WebhookServer.build_certificate(["0.0.0.0", "::"])


def test_service_server_advertises_the_service_and_names_it_in_the_certificate() -> None:
    server = kopf.WebhookServiceServer(name="hooks", namespace="ops", path="/admission/")
    assert server.port == 9443
    assert server.service == {
        "namespace": "ops",
        "name": "hooks",
        "port": 443,
        "path": "/admission",
    }
    assert server.certificate_names[:4] == [
        "hooks.ops.svc",
        "hooks",
        "hooks.ops",
        "hooks.ops.svc.cluster.local",
    ]
    assert {"localhost", "127.0.0.1"} <= set(server.certificate_names)


def test_service_server_without_a_path_sends_none() -> None:
    server = kopf.WebhookServiceServer(name="hooks", namespace="ops", service_port=8443)
    assert server.service == {"namespace": "ops", "name": "hooks", "port": 8443}


def test_service_server_takes_the_pods_namespace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "namespace").write_text("from-the-pod\n")
    monkeypatch.setattr(webhooks, "SERVICE_ACCOUNT_NAMESPACE", str(tmp_path / "namespace"))
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert kopf.WebhookServiceServer(name="hooks").namespace == "from-the-pod"
    # As the manifests set it for the replicas (the same namespace in a pod).
    monkeypatch.setenv("POD_NAMESPACE", "from-the-env")
    assert kopf.WebhookServiceServer(name="hooks").namespace == "from-the-env"


def test_service_server_outside_of_a_pod_needs_a_namespace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(webhooks, "SERVICE_ACCOUNT_NAMESPACE", str(tmp_path / "absent"))
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with pytest.raises(ValueError, match="pass namespace="):
        kopf.WebhookServiceServer(name="hooks")


def test_service_server_keeps_its_ca_in_a_secret_of_its_namespace_by_default() -> None:
    server = kopf.WebhookServiceServer(name="hooks", namespace="ops")
    assert (server.shared_ca, server.uses_shared_ca) == (True, True)
    assert (server.ca_secret, server.ca_secret_namespace) == ("hooks-ca", "ops")
    server = kopf.WebhookServiceServer(
        name="hooks", namespace="ops", ca_secret="ca", ca_secret_namespace="certs"
    )
    assert (server.ca_secret, server.ca_secret_namespace) == ("ca", "certs")
    # Certificate files are the certificate: no CA of ours then.
    assert not kopf.WebhookServiceServer(name="h", namespace="o", certfile="c").uses_shared_ca
    assert not kopf.WebhookServiceServer(name="h", namespace="o", shared_ca=False).uses_shared_ca
    assert not kopf.WebhookServiceServer(name="h", namespace="o", insecure=True).uses_shared_ca


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ca_secret": "ca", "certfile": "tls.crt"},
        {"ca_secret_namespace": "certs", "certfile": "tls.crt"},
        {"ca_secret": "ca", "shared_ca": False},
    ],
)
def test_a_ca_secret_with_files_or_without_sharing_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="ca_secret="):
        kopf.WebhookServiceServer(name="hooks", namespace="ops", **kwargs)


def test_the_shared_ca_is_read_when_serving_not_before() -> None:
    with pytest.raises(RuntimeError, match=r"serve\(\)"):
        kopf.WebhookServiceServer(name="hooks", namespace="ops").build_setup()


def test_missing_cryptography_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if not installed: the kit that imports it is loaded afresh, and fails to.
    monkeypatch.setitem(sys.modules, "cryptography", None)
    monkeypatch.delitem(sys.modules, "trioperator._kits.certificates", raising=False)
    with pytest.raises(MissingDependencyError, match=r"trioperator\[webhooks\]"):
        WebhookServer.build_certificate(["localhost"], password="s3cret")


def test_the_given_certificate_files_are_watched() -> None:
    server = WebhookServer(certfile="c", pkeyfile="k", cafile="ca", verify_cafile="clients")
    assert server.watched_files == ["c", "k", "ca", "clients"]
    assert WebhookServer().watched_files == []


async def test_missing_cryptography_for_the_shared_ca_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)
    for module in ("trioperator._kits.certificates", "trioperator._kits.webhook_ca"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    send, _ = trio.open_memory_channel[WebhookClientConfig](1)
    server = kopf.WebhookServiceServer(name="hooks", namespace="ops")
    api = cast(APIClient, object())  # never reached: the import fails first
    with (
        providing(ServerSupport(api=api)),
        pytest.raises(MissingDependencyError, match=r"\[webhooks\]"),
    ):
        await server.serve(None, configs=send)  # type: ignore[arg-type]
