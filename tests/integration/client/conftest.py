"""A scripted HTTP server on loopback, and an API client pointed at it.

Each test scripts the server's answers in order (``server.script(...)``) or gives it a handler
(``server.handler = ...``); the server records every request with the trio time of its arrival,
so tests assert exact backoffs with the autojump clock. (pytest-trio takes the clock only from
the test function's own arguments: every test here asks for ``autojump_clock``.)
"""

from __future__ import annotations

import dataclasses
import json
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from functools import partial
from typing import Any

import pytest
import trio
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.settings import NetworkingSettings
from trioperator._runtime.support.httpserver import (
    UNBOUNDED,
    DropConnection,
    Request,
    Response,
    serve_http,
)

Responder = Response | Callable[[Request], Awaitable[Response]] | BaseException


@dataclasses.dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    time: float
    peer: Any = None

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status, json.dumps(data).encode(), headers=headers or {})


def status_response(
    code: int,
    message: str = "scripted failure",
    *,
    reason: str = "Scripted",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
        **extra,
    }
    return json_response(body, code, headers)


def lines(*docs: Any) -> list[bytes]:
    return [json.dumps(doc).encode() + b"\n" for doc in docs]


def stream_response(
    chunks: Iterable[bytes],
    *,
    then: str = "end",
    status: int = 200,
) -> Response:
    """A chunked response; afterwards ``then`` is ``end`` (close properly), ``drop`` (cut the
    connection mid-body) or ``hang`` (stay silent until the client goes away)."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk
        if then == "drop":
            raise DropConnection()
        if then == "hang":
            await trio.sleep_forever()

    return Response(status, body())


async def hang(request: Request) -> Response:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


class ScriptedServer:
    # Test modules cannot import from a conftest (importlib mode): the helpers ride along.
    json = staticmethod(json_response)
    status = staticmethod(status_response)
    lines = staticmethod(lines)
    stream = staticmethod(stream_response)
    hang = staticmethod(hang)

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.port = 0
        self.scheme = "http"
        self.handler: Callable[[Request], Awaitable[Response]] | None = None
        self._script: deque[Responder] = deque()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def script(self, *responders: Responder) -> None:
        """Queue the answers to the next requests, in order."""
        self._script.extend(responders)

    @property
    def unused(self) -> int:
        return len(self._script)

    async def handle(self, request: Request) -> Response:
        self.requests.append(
            Recorded(
                method=request.method,
                path=request.path,
                query=request.query,
                headers=request.headers,
                body=request.body,
                time=trio.current_time(),
                peer=request.peer,
            )
        )
        if self._script:
            responder = self._script.popleft()
        elif self.handler is not None:
            responder = self.handler
        else:
            return Response(599, b'{"message": "unscripted request"}')
        if isinstance(responder, BaseException):
            raise responder
        if isinstance(responder, Response):
            return responder
        return await responder(request)


ServerStarter = Callable[..., Awaitable[ScriptedServer]]


@pytest.fixture
def start_server(nursery: trio.Nursery) -> ServerStarter:
    """Start another scripted server, e.g. with TLS: ``await start_server(ssl_context=...)``."""

    async def start(ssl_context: ssl.SSLContext | None = None) -> ScriptedServer:
        scripted = ScriptedServer()
        serve = partial(
            serve_http,
            scripted.handle,
            host="127.0.0.1",
            port=0,
            limits=UNBOUNDED,
            ssl_context=ssl_context,
        )
        listeners = await nursery.start(serve)
        scripted.port = listeners[0].socket.getsockname()[1]
        scripted.scheme = "http" if ssl_context is None else "https"
        return scripted

    return start


@pytest.fixture
async def server(start_server: ServerStarter) -> ScriptedServer:
    return await start_server()


@pytest.fixture
def networking() -> NetworkingSettings:
    # The exact steps, without jitter, so that the tests here can assert every backoff; the
    # jitter (on by default) has tests of its own (tests/attack/test_client.py).
    return NetworkingSettings(backoff_jitter=0)


@pytest.fixture
def vault(server: ScriptedServer) -> Vault:
    return Vault({"default": ConnectionInfo(server=server.url)})


@pytest.fixture
async def api(vault: Vault, networking: NetworkingSettings) -> AsyncIterator[APIClient]:
    async with APIClient(vault, networking) as client:
        yield client
