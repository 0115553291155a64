"""A small HTTP CONNECT proxy on loopback, for the tests of proxies (integration and e2e).

It reads requests with h11, opens the tunnels it is asked for (or refuses them: wrong
credentials, not a CONNECT), and records what it was asked. ``stream_wrapper`` makes it an
``https://`` proxy.
"""

from __future__ import annotations

import base64
import contextlib
import ssl
from dataclasses import dataclass, field
from functools import partial

import h11
import trio


@dataclass
class TunnelProxy:
    """An HTTP proxy that only tunnels; ``password`` makes it demand Basic credentials."""

    stream_wrapper: ssl.SSLContext | None = None
    password: str | None = None
    port: int = 0
    asked: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # target, headers
    tunnels: int = 0

    @property
    def url(self) -> str:
        scheme = "http" if self.stream_wrapper is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}"

    async def serve(self, tcp: trio.SocketStream) -> None:
        stream: trio.abc.Stream = tcp
        if self.stream_wrapper is not None:
            stream = trio.SSLStream(tcp, self.stream_wrapper, server_side=True)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            async with stream:
                await self._tunnel(stream)

    async def _tunnel(self, stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER)
        while (event := conn.next_event()) is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        if not isinstance(event, h11.Request):
            return  # the client hung up without asking anything
        headers = {k.decode().lower(): v.decode() for k, v in event.headers}
        target = event.target.decode()
        self.asked.append((event.method.decode() + " " + target, headers))
        expected = f"Basic {base64.b64encode(f'me:{self.password}'.encode()).decode()}"
        if self.password is not None and headers.get("proxy-authorization") != expected:
            await stream.send_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
            return
        if event.method != b"CONNECT":
            await stream.send_all(b"HTTP/1.1 405 Tunnels Only\r\nContent-Length: 0\r\n\r\n")
            return
        host, _, port = target.rpartition(":")
        upstream = await trio.open_tcp_stream(host, int(port))
        self.tunnels += 1
        await stream.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        async with upstream, trio.open_nursery() as nursery:
            nursery.start_soon(pipe, stream, upstream, nursery.cancel_scope)
            nursery.start_soon(pipe, upstream, stream, nursery.cancel_scope)


async def pipe(source: trio.abc.Stream, sink: trio.abc.Stream, scope: trio.CancelScope) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    scope.cancel()  # one side ended: the tunnel ends


async def start_proxy(nursery: trio.Nursery, proxy: TunnelProxy) -> TunnelProxy:
    listeners = await nursery.start(partial(trio.serve_tcp, proxy.serve, 0, host="127.0.0.1"))
    proxy.port = listeners[0].socket.getsockname()[1]
    return proxy
