"""Keep-alive connections to one origin: opened, reused, and the responses handed out.

The design rules of the package (``__init__.py``) are kept here: a connection goes back to the
pool only after a whole request/response cycle, a stale one is dropped before a request is
written to it, and every response is read under the limits of untrusted input.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Final

import trio

from trioperator._client.errors import (
    APIConnectionError,
    APIProtocolError,
    APIResponseTooLargeError,
    APITimeoutError,
)
from trioperator._client.transport.connections import Connection, close_quietly, describe
from trioperator._client.transport.decoding import INFLATE_PIECE, decoder_for, decompress
from trioperator._client.transport.origins import Origin
from trioperator._client.transport.requests import RequestRefused, Validated, serialize_request
from trioperator._client.transport.responses import ResponseReader, announced_length
from trioperator._client.transport.tls_stream import TLSStream
from trioperator._client.transport.tunnels import open_tunnel

__all__ = ["TransportPool", "TransportResponse"]

_NO_TIMEOUT: Final = float("inf")


class TransportResponse:
    """A response whose head is read; its body is read by :meth:`read` or :meth:`receive_some`."""

    __slots__ = ("_conn", "_decoder", "_pool", "_reader", "headers", "status")

    def __init__(self, pool: TransportPool, conn: Connection, reader: ResponseReader) -> None:
        self._pool = pool
        self._conn: Connection | None = conn
        self._reader = reader
        self.status = reader.status
        self.headers = reader.headers
        self._decoder = decoder_for(reader.headers.get("content-encoding"))

    async def read(self, max_size: int | None = None) -> bytes:
        """The whole (remaining) body; ``APIResponseTooLargeError`` if over ``max_size`` bytes.

        The limit holds for the body as sent and once decompressed (inflated as it comes, so a
        compression bomb costs at most the limit). A body announced larger (``Content-Length``)
        is refused at once; another one as soon as it has grown past the limit: the rest is
        never read, and the connection is closed.
        """
        conn = self._conn
        if conn is None:
            return b""
        reader = self._reader
        parts = reader.body
        if max_size is not None and not reader.complete:
            announced = announced_length(reader.headers)
            if announced is not None and announced > max_size:
                raise self._too_large(conn, f"announces {announced} bytes, over", max_size)
        decoder = self._decoder
        if decoder is None:
            if max_size is None:
                while not reader.complete:
                    await conn.receive_into(reader)
            else:
                while not reader.complete:
                    await conn.receive_into(reader)
                    if reader.body_size > max_size:
                        raise self._too_large(conn, "exceeds", max_size)
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            parts.clear()
        else:
            inflated: list[bytes] = []
            size = 0
            while True:
                if parts:
                    data = parts[0] if len(parts) == 1 else b"".join(parts)
                    parts.clear()
                    # At most one byte past the limit is inflated: that byte tells it is over.
                    room = 0 if max_size is None else max_size + 1 - size
                    data = decompress(decoder, data, conn, room)
                    size += len(data)
                    inflated.append(data)
                    if max_size is not None and size > max_size:
                        raise self._too_large(conn, "once decompressed exceeds", max_size)
                if reader.complete:
                    break
                await conn.receive_into(reader)
                if max_size is not None and reader.body_size > max_size:
                    raise self._too_large(conn, "exceeds", max_size)
            # All the input was taken with room to spare: nothing is left to inflate here.
            inflated.append(decoder.flush())
            data = b"".join(inflated)
        self._conn = None
        self._pool._release(conn, reader)
        return data

    def _too_large(self, conn: Connection, how: str, limit: int) -> APIResponseTooLargeError:
        # The rest of the body is never read: the connection cannot be reused.
        self._conn = None
        conn.close()
        return APIResponseTooLargeError(
            f"{conn.what}: the response body (HTTP {self.status}) {how} the limit of {limit}"
            " bytes (settings.networking.max_response_size)",
            limit=limit,
        )

    async def receive_some(self) -> bytes | None:
        """The next bytes of the body (decompressed if the server compressed it); None at its end.

        A method, not an async generator: an abandoned generator would be finalised later by the
        garbage collector, outside of the task and the cancel scopes that own the connection.
        Never returns an empty chunk before the end.
        """
        conn = self._conn
        if conn is None:
            return None
        reader = self._reader
        parts = reader.body
        decoder = self._decoder
        if decoder is not None and decoder.unconsumed_tail:
            # What an earlier read inflated beyond one piece: no network wait comes before it,
            # so a checkpoint here keeps a long run of it (a compression bomb) from holding
            # the trio loop.
            await trio.lowlevel.checkpoint()
            data = decompress(decoder, decoder.unconsumed_tail, conn, INFLATE_PIECE)
            if data:
                return data
        while True:
            if parts:
                # All that one read brought (e.g. several watch events), at once.
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                parts.clear()
                if decoder is not None:
                    data = decompress(decoder, data, conn, INFLATE_PIECE)
                if data:
                    return data
            elif reader.complete:
                self._conn = None
                tail = decoder.flush() if decoder is not None else b""
                self._pool._release(conn, reader)
                return tail or None
            else:
                await conn.receive_into(reader)

    async def unwind(self) -> None:
        """Abandon the rest of the body: the connection is closed, never reused half-read."""
        self._discard()

    def _discard(self) -> None:
        """Close the connection unless the body was read to its end (and the connection reused)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class TransportPool:
    """Keep-alive connections to one origin.

    ``max_idle`` bounds the connections kept for reuse; how many are in use at once is the
    caller's business (``HTTPSession`` puts a semaphore in front of regular requests; watch
    streams are deliberately unbounded). Idle connections older than ``keepalive_expiry``
    seconds are closed instead of reused: servers close idle connections on their own timers.
    """

    def __init__(
        self,
        origin: Origin,
        *,
        max_idle: int,
        keepalive_expiry: float = 30.0,
        read_ahead: bool = True,
    ) -> None:
        self.origin = origin
        # For TLS: whether reads take every record received (streams of many small ones, as
        # watch events) or stop after a short one (single answers: nothing more comes then).
        self.read_ahead = read_ahead
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._idle: list[Connection] = []
        self._closed = False
        # Validated request headers by (headers, body length): see serialize_request.
        self._validated: Validated = {}

    async def request(
        self,
        method: str,
        target: str,
        what: str,
        *,
        headers: Mapping[str, str],
        content: bytes | None = None,
        connect_timeout: float | None = None,
        max_size: int | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """Send a request and read its whole response: status, headers, body.

        ``max_size`` bounds the body (see :meth:`TransportResponse.read`).
        """
        response = await self._send(method, target, what, headers, content, connect_timeout)
        try:
            body = await response.read(max_size)
        finally:
            response._discard()
        return response.status, response.headers, body

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        what: str,
        *,
        headers: Mapping[str, str],
        connect_timeout: float | None = None,
    ) -> AsyncIterator[TransportResponse]:
        """Send a request and give its response with the body unread.

        The connection is reused only if the body was read to its end inside the block.
        """
        response = await self._send(method, target, what, headers, None, connect_timeout)
        try:
            yield response
        finally:
            response._discard()

    async def _send(
        self,
        method: str,
        target: str,
        what: str,
        headers: Mapping[str, str],
        content: bytes | None,
        connect_timeout: float | None,
    ) -> TransportResponse:
        if self._closed:
            raise APIConnectionError(f"{what}: the connection pool is closed")
        try:
            data = serialize_request(self.origin, self._validated, method, target, headers, content)
        except RequestRefused as exc:
            raise APIProtocolError(f"{what}: cannot send the request: {exc}") from exc
        conn = self._take()
        if conn is None:
            conn = await self._connect(what, connect_timeout)
        conn.what = what
        reader = ResponseReader(head_only=method == "HEAD")
        try:
            # One write: the whole request in one TCP segment (or TLS record) when it fits.
            await conn.send(data)
            await conn.receive_head(reader)
        except BaseException:
            # Errors, timeouts and cancellations alike: a half-used connection is never reused.
            conn.close()
            raise
        return TransportResponse(self, conn, reader)

    def _take(self) -> Connection | None:
        idle = self._idle
        if not idle:
            return None
        deadline = trio.current_time() - self.keepalive_expiry
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be timed out
            if conn.idle_since >= deadline and not conn.stale():
                return conn
            conn.close()
        return None

    def _release(self, conn: Connection, reader: ResponseReader) -> None:
        if conn.ticket_due:
            # After a whole answer, a TLS 1.3 server's tickets (sent after the handshake) have
            # been read: keep the newest for the next connections, even if this one closes --
            # unless one opened at the same time (a burst) has done so since.
            conn.ticket_due = False
            stream = conn.stream
            origin = self.origin
            now = trio.current_time()
            if (
                isinstance(stream, TLSStream)
                and origin.tls_session_since <= conn.opened
                and origin.ticket_wanted(stream.resumed, now)
            ):
                session = stream.resumable_session()
                if session is not None:
                    origin.keep_session(session, now)
        # Not reusable: the server will close it, the body's end was the connection's, or
        # bytes came after the response (the server is confused; they must not become the
        # start of the next response).
        if self._closed or len(self._idle) >= self.max_idle or not reader.reusable:
            conn.close()
            return
        conn.idle_since = trio.current_time()
        conn.what = ""
        self._idle.append(conn)

    async def _connect(self, what: str, connect_timeout: float | None) -> Connection:
        origin = self.origin
        proxy = origin.proxy
        # The outermost stream open so far: what to close if anything fails on the way.
        stream: trio.abc.Stream | None = None
        ticket_due = False
        with trio.move_on_after(_NO_TIMEOUT if connect_timeout is None else connect_timeout):
            try:
                host, port = (
                    (origin.host, origin.port) if proxy is None else (proxy.host, proxy.port)
                )
                tcp = await trio.open_tcp_stream(host, port)
                stream = tcp
                if proxy is not None and proxy.tls:
                    assert proxy.ssl_context is not None
                    # The TLS stream takes the socket over; on failure it closes it itself.
                    stream = None
                    stream = await TLSStream.wrap(tcp, proxy.ssl_context, proxy.host)
                if proxy is not None and origin.tls:
                    await open_tunnel(stream, origin, proxy, what)
                if origin.tls:
                    assert origin.ssl_context is not None
                    if isinstance(stream, trio.SocketStream):
                        stream = None
                        stream = await TLSStream.wrap(
                            tcp, origin.ssl_context, origin.server_name, session=origin.tls_session
                        )
                        stream.read_ahead = self.read_ahead
                        ticket_due = origin.ticket_wanted(stream.resumed, trio.current_time())
                    else:
                        # TLS inside the TLS to a proxy: no socket of its own, so trio's stream.
                        inner = trio.SSLStream(
                            stream,
                            origin.ssl_context,
                            server_hostname=origin.server_name,
                            https_compatible=True,
                        )
                        await inner.do_handshake()
                        stream = inner
            except BaseException as exc:
                if stream is not None:
                    close_quietly(stream)
                if isinstance(exc, ssl.SSLError):
                    origin.tls_session = None  # the next attempt without a ticket, in case
                if isinstance(exc, RequestRefused):  # e.g. a host h11 cannot send
                    raise APIProtocolError(f"{what}: cannot ask for a tunnel: {exc}") from exc
                if isinstance(exc, (OSError, trio.BrokenResourceError, ssl.SSLError)):
                    via = "" if proxy is None else f" (through the proxy {proxy.url})"
                    raise APIConnectionError(
                        f"{what}: cannot connect{via}: {describe(exc)}"
                    ) from exc
                raise
            return Connection(stream, ticket_due=ticket_due)
        if stream is not None:
            close_quietly(stream)
        raise APITimeoutError(f"{what}: cannot connect: no connection in {connect_timeout} seconds")

    def aclose(self) -> None:
        """Close the idle connections; those in use close when their request ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
