"""A small HTTP/1.1 server on trio and h11, for the probes, webhooks and the fake API.

It is deliberately minimal: one request handler, keep-alive, fixed or streamed (chunked)
response bodies, optional TLS. Parsing is h11's; this module only moves bytes.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
from collections.abc import AsyncIterable, Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
import trio

logger = logging.getLogger(__name__)

MAX_REQUEST_BODY = 64 * 1024 * 1024
_RECEIVE_CHUNK = 64 * 1024


class DropConnection(Exception):
    """Raised by a handler or a streamed body to cut the connection without a proper reply."""


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    peer: Any = None
    """The TLS peer certificate (a dict as ``ssl`` returns it), when there is one."""

    def param(self, name: str, default: str | None = None) -> str | None:
        """The first value of a query parameter."""
        values = self.query.get(name)
        return values[0] if values else default


@dataclasses.dataclass
class Response:
    status: int = 200
    body: bytes | AsyncIterable[bytes] = b""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    content_type: str = "application/json"


Handler = Callable[[Request], Awaitable[Response]]


async def serve_http(
    handler: Handler,
    *,
    host: str | None = "127.0.0.1",
    port: int = 0,
    ssl_context: ssl.SSLContext | None = None,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` until cancelled; ``task_status.started()`` gets the bound listeners.

    ``host=None`` listens on every interface (IPv4 and IPv6 where available). Connections run
    in ``handler_nursery`` if given (so that cancelling this function only stops accepting new
    ones), else in this function's own.

    Use ``listeners[0].socket.getsockname()`` to learn the port when ``port=0``.
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    serving: list[trio.abc.Listener[Any]]
    if ssl_context is not None:
        serving = [
            trio.SSLListener(listener, ssl_context, https_compatible=True) for listener in listeners
        ]
    else:
        serving = list(listeners)
    await trio.serve_listeners(
        partial(_serve_connection, handler),
        serving,
        handler_nursery=handler_nursery,
        task_status=_ForwardStatus(task_status, listeners),
    )


class _ForwardStatus:
    """Report the raw TCP listeners (which know their port) rather than the TLS wrappers."""

    def __init__(
        self,
        status: trio.TaskStatus[list[trio.SocketListener]],
        raw: list[trio.SocketListener],
    ) -> None:
        self._status = status
        self._raw = raw

    def started(self, value: object = None) -> None:
        self._status.started(self._raw)


async def _serve_connection(handler: Handler, stream: trio.abc.Stream) -> None:
    conn = h11.Connection(h11.SERVER)
    peer: Any = None
    if isinstance(stream, trio.SSLStream):
        try:
            await stream.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        peer = stream.getpeercert()
    try:
        while True:
            request = await _read_request(conn, stream, peer)
            if request is None:
                return
            try:
                response = await handler(request)
            except DropConnection:
                return
            except Exception:
                logger.exception("HTTP handler failed for %s %s", request.method, request.path)
                response = Response(500, b'{"message": "internal server error"}')
            keep_going = await _send_response(conn, stream, response)
            if not keep_going or conn.our_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
        return
    finally:
        with trio.move_on_after(1) as cleanup:
            cleanup.shield = True
            await trio.aclose_forcefully(stream)


async def _read_request(conn: h11.Connection, stream: trio.abc.Stream, peer: Any) -> Request | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(_RECEIVE_CHUNK)
            conn.receive_data(bytes(data))  # b"" marks EOF for h11
            continue
        if isinstance(event, h11.ConnectionClosed):
            return None
        if isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_REQUEST_BODY:
                raise h11.RemoteProtocolError("request body too large")
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            target = urlsplit(head.target.decode("latin-1"))
            return Request(
                method=head.method.decode("ascii"),
                path=target.path,
                query=parse_qs(target.query, keep_blank_values=True),
                headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers},
                body=bytes(body),
                peer=peer,
            )


async def _send_response(conn: h11.Connection, stream: trio.abc.Stream, response: Response) -> bool:
    """Send one response; return ``False`` if the connection must be dropped afterwards."""
    headers = [("content-type", response.content_type), *response.headers.items()]
    if isinstance(response.body, bytes):
        headers.append(("content-length", str(len(response.body))))
        # One write for the whole response: one TLS record and one wake-up of the client
        # instead of one per part (benchmarks/bench_admission.py: slightly less operator CPU
        # per review, within the noise of a shared machine).
        data = conn.send(h11.Response(status_code=response.status, headers=headers))
        if response.body:
            data += conn.send(h11.Data(data=response.body))
        data += conn.send(h11.EndOfMessage())
        await stream.send_all(data)
        return True
    headers.append(("transfer-encoding", "chunked"))
    await stream.send_all(conn.send(h11.Response(status_code=response.status, headers=headers)))
    try:
        async for chunk in response.body:
            if chunk:
                await stream.send_all(conn.send(h11.Data(data=chunk)))
    except DropConnection:
        return False
    await stream.send_all(conn.send(h11.EndOfMessage()))
    return True
