"""One CA for the webhook servers of several replicas (``WebhookServiceServer``): kept in a
Secret of the (fake) API and shared, or taken from mounted files; each server verified by a TLS
handshake for the Service's DNS name with the advertised bundle."""

from __future__ import annotations

import base64
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import trioperator as kopf
import trustme
from tests.integration.conftest import wait_until
from trioperator._client.api import APIClient, Logger
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.errors import APINotFoundError
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._engine.webhooks import WebhookClientConfig
from trioperator._kits.errors import WebhookCAError
from trioperator._kits.webhooks import WebhookServiceServer
from trioperator._runtime.admission.webhook_serving import ServerSupport, providing
from trioperator._runtime.program.operator import Operator
from trioperator.testing import FakeAPI

from .conftest import Recorder, free_port, post

SERVICE_NAMES = ["hooks.ops.svc", "hooks.ops.svc.cluster.local", "hooks.ops", "hooks"]


@pytest.fixture
def fake_api(fake_api: FakeAPI) -> FakeAPI:
    """The fake API with the namespaces of the Service and of a CA of the user's own."""
    fake_api.create_namespace("ops")
    fake_api.create_namespace("certs")
    return fake_api


def secret_requests(api: FakeAPI) -> list[str]:
    return [f"{r.method} {r.path}" for r in api.requests if "/secrets" in r.path]


def bundle_of(config: WebhookClientConfig) -> bytes:
    return base64.b64decode(config["caBundle"])


def trusting(bundle: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=bundle.decode("ascii"))


def stored_bundle(api: FakeAPI, name: str = "hooks-ca") -> bytes:
    return base64.b64decode(api.get_object("secrets", name, "ops")["data"]["ca.crt"])


class Replica:
    """A webhook server as one replica runs it: with an API client of its own."""

    def __init__(self, server: WebhookServiceServer, api: APIClient) -> None:
        self.server = server
        self.api = api
        self.configs_in, self.configs = trio.open_memory_channel[WebhookClientConfig](10)

    async def run(self, fn: Recorder) -> None:
        with providing(ServerSupport(api=self.api)):
            await self.server.serve(fn, configs=self.configs_in)


class GatedClient(APIClient):
    """A client whose first GET of the Secret answers only once all replicas have asked.

    So every replica has found no Secret before any of them creates one: the worst case of
    replicas starting at once, made certain instead of left to timing.
    """

    def __init__(self, url: str, gate: Callable[[], trio.Event], arrived: list[str]) -> None:
        super().__init__(
            Vault({"fake": ConnectionInfo(server=url, token="fake")}),
            NetworkingSettings(error_backoffs=(1, 2)),
        )
        self._gate = gate
        self._arrived = arrived
        self._gated = False

    async def get(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        name: str,
        subresource: str | None = None,
        logger: Logger | None = None,
    ) -> dict[str, Any]:
        try:
            return await super().get(
                resource, namespace=namespace, name=name, subresource=subresource, logger=logger
            )
        except APINotFoundError:
            if not self._gated:
                self._gated = True
                self._arrived.append(name)
                await self._gate().wait()
            raise


@asynccontextmanager
async def replicas(
    fake_api: FakeAPI, count: int, make: Callable[[], WebhookServiceServer], fn: Recorder
) -> AsyncIterator[list[Replica]]:
    """``count`` replicas started at once, each with its own client; yields once all serve."""
    everybody_asked = trio.Event()
    arrived: list[str] = []
    clients = [GatedClient(fake_api.url, lambda: everybody_asked, arrived) for _ in range(count)]
    started = [Replica(make(), client) for client in clients]
    async with trio.open_nursery() as nursery:
        for replica in started:
            nursery.start_soon(replica.run, fn)
        with trio.fail_after(30):
            while len(arrived) < count:  # noqa: ASYNC110 -- the replicas' requests are real I/O
                await trio.sleep(0.01)
        everybody_asked.set()
        yield started
        nursery.cancel_scope.cancel()
    for client in clients:
        await client.aclose()


async def test_replicas_starting_at_once_end_with_one_secret_and_one_bundle(
    fake_api: FakeAPI, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trioperator.webhooks")
    ports = [await free_port() for _ in range(3)]

    def make(port: int) -> WebhookServiceServer:
        return WebhookServiceServer(name="hooks", namespace="ops", addr="127.0.0.1", port=port)

    makers = iter(ports)
    async with replicas(fake_api, 3, lambda: make(next(makers)), recorder) as started:
        configs = [await replica.configs.receive() for replica in started]
        # All three found no Secret and tried to create one; one creation won.
        assert secret_requests(fake_api).count("POST /api/v1/namespaces/ops/secrets") == 3
        assert [s["metadata"]["name"] for s in fake_api.objects("secrets", "ops")] == ["hooks-ca"]
        assert caplog.text.count("Another replica created the Secret ops/hooks-ca first") == 2
        # The same bundle everywhere: the configurations' caBundle no longer depends on which
        # replica wrote it last.
        bundles = {config["caBundle"] for config in configs}
        assert len(bundles) == 1
        assert bundle_of(configs[0]) == stored_bundle(fake_api)
        for config in configs:
            assert config["service"] == {"namespace": "ops", "name": "hooks", "port": 443}
        # Each replica presents its own certificate from that CA, for every name of the Service.
        for port in ports:
            for hostname in SERVICE_NAMES:
                reply = await post(
                    port,
                    "/check",
                    context=trusting(bundle_of(configs[0])),
                    server_hostname=hostname,
                )
                assert reply.status == 200
    assert len(recorder.calls) == 3 * len(SERVICE_NAMES)


async def test_a_later_replica_reads_the_ca_of_an_earlier_one(
    fake_api: FakeAPI, api_client: APIClient, recorder: Recorder
) -> None:
    first, second = (
        Replica(
            WebhookServiceServer(name="hooks", namespace="ops", addr="127.0.0.1", port=None),
            api_client,
        )
        for _ in range(2)
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first.run, recorder)
        first_config = await first.configs.receive()
        nursery.start_soon(second.run, recorder)
        second_config = await second.configs.receive()
        nursery.cancel_scope.cancel()
    assert first_config["caBundle"] == second_config["caBundle"]
    assert secret_requests(fake_api) == [
        "GET /api/v1/namespaces/ops/secrets/hooks-ca",
        "POST /api/v1/namespaces/ops/secrets",
        "GET /api/v1/namespaces/ops/secrets/hooks-ca",
    ]
    secret = fake_api.get_object("secrets", "hooks-ca", "ops")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}


async def test_a_ca_put_into_the_secret_beforehand_is_used_as_it_is(
    fake_api: FakeAPI, api_client: APIClient, recorder: Recorder
) -> None:
    ca = trustme.CA()

    def encoded(blob: bytes) -> str:
        return base64.b64encode(blob).decode("ascii")

    fake_api.create_object(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "own-ca", "namespace": "certs"},
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": encoded(ca.cert_pem.bytes()),
                "tls.key": encoded(ca.private_key_pem.bytes()),
            },
        },
        namespace="certs",
    )
    port = await free_port()
    server = WebhookServiceServer(
        name="hooks",
        namespace="ops",
        addr="127.0.0.1",
        port=port,
        ca_secret="own-ca",
        ca_secret_namespace="certs",
    )
    replica = Replica(server, api_client)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(replica.run, recorder)
        config = await replica.configs.receive()
        context = ssl.create_default_context()
        ca.configure_trust(context)
        assert (await post(port, "/x", context=context, server_hostname="hooks.ops.svc")).status
        nursery.cancel_scope.cancel()
    assert bundle_of(config) == ca.cert_pem.bytes()
    assert secret_requests(fake_api) == ["GET /api/v1/namespaces/certs/secrets/own-ca"]


async def serve_failing(server: WebhookServiceServer, api: APIClient | None) -> BaseException:
    """The error that ends ``server`` at its start."""
    send, _ = trio.open_memory_channel[WebhookClientConfig](1)
    with contextlib.ExitStack() as stack:
        if api is not None:
            stack.enter_context(providing(ServerSupport(api=api)))
        with pytest.raises(WebhookCAError) as err:
            await server.serve(Recorder(), configs=send)
    return err.value


async def test_a_secret_without_a_usable_ca_stops_the_server_with_the_reason(
    fake_api: FakeAPI, api_client: APIClient
) -> None:
    fake_api.create_object(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hooks-ca", "namespace": "ops"},
            "data": {"tls.crt": base64.b64encode(b"not a certificate").decode()},
        },
        namespace="ops",
    )
    server = WebhookServiceServer(name="hooks", namespace="ops", addr="127.0.0.1", port=None)
    error = await serve_failing(server, api_client)
    assert "ops/hooks-ca holds no usable CA" in str(error)
    assert "delete it" in str(error)
    assert not any(r.method == "POST" for r in fake_api.requests)  # never overwritten


async def test_a_forbidden_secret_says_which_rbac_is_missing(
    fake_api: FakeAPI, api_client: APIClient
) -> None:
    fake_api.inject("GET", "*/secrets/*", status=403)
    server = WebhookServiceServer(name="hooks", namespace="ops", addr="127.0.0.1", port=None)
    error = await serve_failing(server, api_client)
    assert "Not allowed to get the Secret ops/hooks-ca" in str(error)
    assert "trioperator rbac --webhook-ca-secret hooks-ca --webhook-ca-namespace ops" in str(error)


async def test_outside_an_operator_the_shared_ca_cannot_be_read() -> None:
    server = WebhookServiceServer(name="hooks", namespace="ops", addr="127.0.0.1", port=None)
    error = await serve_failing(server, None)
    assert "settings.admission.server" in str(error)
    assert "shared_ca=False" in str(error)


async def test_without_a_shared_ca_each_server_makes_its_own(
    fake_api: FakeAPI, api_client: APIClient, recorder: Recorder
) -> None:
    configs = []
    for _ in range(2):
        server = WebhookServiceServer(
            name="hooks", namespace="ops", addr="127.0.0.1", port=None, shared_ca=False
        )
        replica = Replica(server, api_client)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(replica.run, recorder)
            configs.append(await replica.configs.receive())
            nursery.cancel_scope.cancel()
    assert configs[0]["caBundle"] != configs[1]["caBundle"]  # one replica only, then
    assert secret_requests(fake_api) == []


def write_mounted_secret(directory: Path, ca: trustme.CA) -> tuple[Path, Path, Path]:
    """A TLS Secret for the Service as cert-manager mounts it: tls.crt, tls.key, ca.crt."""
    cert = ca.issue_cert(*SERVICE_NAMES, "127.0.0.1")
    certfile, pkeyfile, cafile = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    certfile.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    pkeyfile.write_bytes(cert.private_key_pem.bytes())
    cafile.write_bytes(ca.cert_pem.bytes())
    return certfile, pkeyfile, cafile


async def test_mounted_files_are_used_as_they_are_and_reread_when_renewed(
    fake_api: FakeAPI,
    api_client: APIClient,
    recorder: Recorder,
    tmp_path: Path,
    mock_clock: trio.testing.MockClock,
) -> None:
    old_ca, new_ca = trustme.CA(), trustme.CA()
    certfile, pkeyfile, cafile = write_mounted_secret(tmp_path, old_ca)
    port = await free_port()
    server = WebhookServiceServer(
        name="hooks",
        namespace="ops",
        addr="127.0.0.1",
        port=port,
        certfile=certfile,
        pkeyfile=pkeyfile,
        cafile=cafile,
        file_check_interval=5,
    )
    replica = Replica(server, api_client)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(replica.run, recorder)
        config = await replica.configs.receive()
        assert bundle_of(config) == old_ca.cert_pem.bytes()
        old = ssl.create_default_context()
        old_ca.configure_trust(old)
        assert (await post(port, "/x", context=old, server_hostname="hooks.ops.svc")).status == 200

        write_mounted_secret(tmp_path, new_ca)  # cert-manager renewed the Secret
        mock_clock.jump(4.9)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.WouldBlock):
            replica.configs.receive_nowait()  # not checked yet
        mock_clock.jump(0.1)
        renewed = await replica.configs.receive()
        assert bundle_of(renewed) == new_ca.cert_pem.bytes()
        new = ssl.create_default_context()
        new_ca.configure_trust(new)
        assert (await post(port, "/x", context=new, server_hostname="hooks.ops.svc")).status == 200
        nursery.cancel_scope.cancel()
    assert secret_requests(fake_api) == []  # no Secret of its own with files


async def test_operator_replicas_write_one_bundle_into_the_shared_configurations(
    fake_api: FakeAPI,
) -> None:
    # Whole operators this time: the runtime hands its API client to the server it runs. On
    # the real clock (only as a guard): a mock clock would jump to the guard's deadline while
    # the servers make their keys in worker threads.
    operators = []
    for _ in range(3):
        registry = OperatorRegistry()
        kopf.on.validate("configmaps", id="check", registry=registry)(lambda **_: None)
        settings = OperatorSettings()
        settings.admission.server = WebhookServiceServer(
            name="hooks", namespace="ops", addr="127.0.0.1", port=None
        )
        settings.admission.managed = "hooks.example.com"
        settings.peering.standalone = True
        vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})
        operators.append(Operator(registry=registry, settings=settings, vault=vault))
    async with trio.open_nursery() as nursery:
        for operator in operators:
            nursery.start_soon(operator.main)
        with trio.fail_after(60):
            for operator in operators:
                await operator.ready_flag.wait()
        await wait_until(lambda: len(configuration_patches(fake_api)) >= 3)
        for operator in operators:
            operator.stop()
    # Every replica wrote the same caBundle: the Secret's CA, not one of its own.
    bundles = {bundle for patch in configuration_patches(fake_api) for bundle in patch}
    assert bundles == {base64.b64encode(stored_bundle(fake_api)).decode("ascii")}
    assert [s["metadata"]["name"] for s in fake_api.objects("secrets", "ops")] == ["hooks-ca"]


def configuration_patches(api: FakeAPI) -> list[set[str]]:
    """The caBundles in each PATCH of the validating configuration (cleanups have none)."""
    patches = []
    for request in api.requests:
        if request.method == "PATCH" and "validatingwebhookconfigurations" in request.path:
            webhooks = request.body.get("webhooks") or []
            bundles = {webhook["clientConfig"]["caBundle"] for webhook in webhooks}
            if bundles:
                patches.append(bundles)
    return patches
