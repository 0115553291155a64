"""Login via the client libraries (kubernetes, kubernetes_asyncio, pykube-ng) from kubeconfigs."""

from __future__ import annotations

import asyncio
import base64
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trioperator as kopf
import yaml
from trioperator._client import piggybacking
from trioperator._engine.settings import OperatorSettings

CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
LOGIN_FUNCTIONS = ["login_via_client", "login_via_async_client", "login_via_pykube"]


def kubeconfig(
    path: Path,
    *,
    user: dict[str, Any],
    cluster: dict[str, Any] | None = None,
    namespace: str | None = None,
) -> Path:
    context: dict[str, Any] = {"cluster": "c1", "user": "u1"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "ctx",
                "clusters": [
                    {"name": "c1", "cluster": cluster or {"server": "https://10.1.2.3:6443"}}
                ],
                "users": [{"name": "u1", "user": user}],
                "contexts": [{"name": "ctx", "context": context}],
            }
        )
    )
    return path


def read(path: str) -> bytes:
    return Path(path).read_bytes()


@pytest.fixture(autouse=True)
def outside_of_a_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config of the machine
    monkeypatch.delenv("KUBECONFIG", raising=False)


async def login(name: str, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """Call a login function as the operator would: sync ones in a thread, async awaited."""
    fn = getattr(kopf, name)
    kwargs = {"logger": logging.getLogger("test"), "settings": OperatorSettings(), **kwargs}
    if name == "login_via_async_client":
        result: kopf.ConnectionInfo | None = await fn(**kwargs)
        return result
    return await trio.to_thread.run_sync(lambda: fn(**kwargs))


@pytest.mark.parametrize("name", LOGIN_FUNCTIONS)
async def test_token_and_ca_data(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = {
        "server": "https://10.1.2.3:6443",
        "certificate-authority-data": base64.b64encode(CA_PEM).decode(),
    }
    path = kubeconfig(tmp_path / "config", user={"token": "t0k3n"}, cluster=cluster)
    monkeypatch.setenv("KUBECONFIG", str(path))

    info = await login(name)

    assert info is not None
    assert info.server == "https://10.1.2.3:6443"
    assert info.token == "t0k3n"
    assert info.scheme in (None, "Bearer")
    assert info.as_http_headers() == {"Authorization": "Bearer t0k3n"}
    assert not info.insecure
    assert info.ca_path is not None
    assert read(info.ca_path).strip() == CA_PEM.strip()  # the library's temp file
    assert (
        info.priority
        == {
            "login_via_client": 10,
            "login_via_async_client": 15,
            "login_via_pykube": 20,
        }[name]
    )


@pytest.mark.parametrize("name", LOGIN_FUNCTIONS)
async def test_client_certificates_and_insecure(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert = tmp_path / "client.crt"
    key = tmp_path / "client.key"
    cert.write_text("cert")
    key.write_text("key")
    cluster = {"server": "https://api.example:443", "insecure-skip-tls-verify": True}
    user = {"client-certificate": str(cert), "client-key": str(key)}
    monkeypatch.setenv(
        "KUBECONFIG", str(kubeconfig(tmp_path / "config", user=user, cluster=cluster))
    )

    info = await login(name)

    assert info is not None
    assert info.server == "https://api.example:443"
    assert info.insecure is True
    assert info.token is None
    assert info.certificate_path is not None
    assert info.private_key_path is not None
    assert read(info.certificate_path) == b"cert"
    assert read(info.private_key_path) == b"key"


@pytest.mark.parametrize("name", LOGIN_FUNCTIONS)
async def test_trust_env_follows_the_settings(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", user={"token": "t"})))
    settings = OperatorSettings()
    settings.networking.trust_env = True
    info = await login(name, settings=settings)
    assert info is not None
    assert info.trust_env is True
    info = await login(name)
    assert info is not None
    assert info.trust_env is False


async def test_pykube_gives_the_default_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kubeconfig(tmp_path / "config", user={"token": "t"}, namespace="team-a")
    monkeypatch.setenv("KUBECONFIG", str(path))
    info = await login("login_via_pykube")
    assert info is not None
    assert info.default_namespace == "team-a"


@pytest.mark.parametrize("name", LOGIN_FUNCTIONS)
async def test_no_configuration_is_a_login_error(name: str, tmp_path: Path) -> None:
    with pytest.raises(
        kopf.LoginError, match=r"Cannot authenticate .* neither in-cluster .*, nor via kubeconfig"
    ):
        await login(name)


@pytest.mark.parametrize("name", LOGIN_FUNCTIONS)
async def test_a_missing_library_gives_nothing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", user={"token": "t"})))
    library = {
        "login_via_client": "kubernetes",
        "login_via_async_client": "kubernetes_asyncio",
        "login_via_pykube": "pykube",
    }[name]
    for module in list(sys.modules):
        if module == library or module.startswith(f"{library}."):
            monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, library, None)  # makes `import <library>` fail
    assert await login(name) is None


# ------------------------------------------------------------------------------ asyncio


def test_async_client_login_awaited_from_asyncio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", user={"token": "t"})))
    info = asyncio.run(kopf.login_via_async_client(logger=logging.getLogger("test")))
    assert info is not None
    assert info.token == "t"


async def test_async_client_login_on_a_trio_asyncio_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trio_asyncio

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", user={"token": "t"})))
    loops: list[object] = []
    original = piggybacking._run_asyncio

    async def spy(fn: Any) -> Any:
        async def recording() -> Any:
            loops.append(asyncio.get_running_loop())
            return await fn()

        return await original(recording)

    monkeypatch.setattr(piggybacking, "_run_asyncio", spy)
    async with trio_asyncio.open_loop() as loop:
        info = await kopf.login_via_async_client()
    assert info is not None
    assert info.token == "t"
    assert loops == [loop]  # the operator's loop, not a private one in a thread


# ------------------------------------------------------------------------------ fallbacks


def test_fallbacks_with_every_library_installed() -> None:
    assert piggybacking.fallback_login_functions() == [
        kopf.login_via_pykube,
        kopf.login_via_client,
    ]


def test_fallbacks_by_installed_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    installed: set[str] = set()
    monkeypatch.setattr(piggybacking, "_installed", lambda name: name in installed)
    assert piggybacking.fallback_login_functions() == [
        kopf.login_with_service_account,
        kopf.login_with_kubeconfig,
    ]
    installed.add("kubernetes_asyncio")
    assert piggybacking.fallback_login_functions() == [kopf.login_via_async_client]
    installed.add("kubernetes")
    assert piggybacking.fallback_login_functions() == [kopf.login_via_client]
    installed.add("pykube")
    assert piggybacking.fallback_login_functions() == [
        kopf.login_via_pykube,
        kopf.login_via_client,
    ]
