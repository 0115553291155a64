"""A running webhook server on loopback, a recording ``WebhookFn``, and a small HTTP(S) client.

The client is h11 over a trio (TLS) stream, so that tests control exactly what the server sees:
which CA is trusted, which client certificate is presented, which host name is verified.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import h11
import pytest
import trio
import trustme
from trioperator._engine.webhooks import TrioWebhookServer, WebhookClientConfig, WebhookFn


@dataclasses.dataclass
class Call:
    body: bytes | Mapping[str, Any]
    webhook: str | None
    headers: Mapping[str, str] | None
    sslpeer: Mapping[str, Any] | None


@dataclasses.dataclass
class Recorder:
    """The operator's side of reviews: records each call, answers or raises as told."""

    calls: list[Call] = dataclasses.field(default_factory=list)
    error: BaseException | None = None

    async def __call__(
        self,
        request: bytes | Mapping[str, Any],
        *,
        webhook: str | None = None,
        headers: Mapping[str, str] | None = None,
        sslpeer: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        self.calls.append(Call(request, webhook, headers, sslpeer))
        if self.error is not None:
            raise self.error
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "uid-1", "allowed": True, "warnings": [f"seen by {webhook}"]},
        }


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@dataclasses.dataclass
class Running:
    configs: trio.MemoryReceiveChannel[WebhookClientConfig]
    config: WebhookClientConfig
    """The first client config the server sent."""

    @property
    def port(self) -> int:
        port = urlsplit(self.config["url"]).port
        assert port is not None, self.config
        return port

    def trusting_context(self, config: WebhookClientConfig | None = None) -> ssl.SSLContext:
        """A client context that trusts the CA bundle of a config (the first by default)."""
        bundle = base64.b64decode((config or self.config)["caBundle"]).decode("ascii")
        return ssl.create_default_context(cadata=bundle)


@asynccontextmanager
async def running(server: TrioWebhookServer, fn: WebhookFn) -> AsyncIterator[Running]:
    """The server serving ``fn`` in the background for the duration of the block."""
    send, receive = trio.open_memory_channel[WebhookClientConfig](10)
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(server.serve, fn, configs=send))
        config = await receive.receive()
        yield Running(configs=receive, config=config)
        nursery.cancel_scope.cancel()


@dataclasses.dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def post(
    port: int,
    path: str,
    body: bytes = b"{}",
    *,
    context: ssl.SSLContext | None = None,
    server_hostname: str = "localhost",
    method: str = "POST",
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """One request to ``127.0.0.1:port``; TLS with ``context`` when given."""
    stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", port)
    if context is not None:
        stream = trio.SSLStream(stream, context, server_hostname=server_hostname)
    try:
        conn = h11.Connection(h11.CLIENT)
        request_headers = [
            ("host", f"{server_hostname}:{port}"),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            *(headers or {}).items(),
        ]
        await stream.send_all(
            conn.send(h11.Request(method=method, target=path, headers=request_headers))
        )
        await stream.send_all(conn.send(h11.Data(data=body)))
        await stream.send_all(conn.send(h11.EndOfMessage()))
        status = 0
        reply_headers: dict[str, str] = {}
        data = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                reply_headers = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                data += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return Reply(status, reply_headers, bytes(data))
    finally:
        await trio.aclose_forcefully(stream)


@pytest.fixture
def client_ca() -> trustme.CA:
    """A CA that issues client certificates (as an API server's client CA would)."""
    return trustme.CA()


def write_server_files(directory: Path, ca: trustme.CA) -> tuple[Path, Path, Path]:
    cert = ca.issue_cert("localhost", "127.0.0.1")
    certfile, pkeyfile, cafile = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    certfile.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    pkeyfile.write_bytes(cert.private_key_pem.bytes())
    cafile.write_bytes(ca.cert_pem.bytes())
    return certfile, pkeyfile, cafile


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def free_port() -> int:
    """A port free on the loopback right now (for servers that do not advertise their URL)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port: int = listeners[0].socket.getsockname()[1]
    for listener in listeners:
        await listener.aclose()
    return port
