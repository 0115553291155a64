"""A lean HTTP/1.1 client on trio streams and h11: the transport behind :class:`HTTPSession`.

Why not the general-purpose HTTP library: under trio it spent ~4.5 ms of CPU for two small
requests (pool bookkeeping, layers of async generators, TLS wrappers), more than the operator's
own logic. This module does only what talking to one API server needs: one origin, keep-alive
connections in a LIFO list, requests with a fully known body, responses read whole or streamed.
``benchmarks/bench_http.py`` measures both.

Design rules (each one a lesson of the library it replaces):

- A connection goes back to the pool only after a complete request/response cycle. Anything
  else (an error, a cancellation, a body abandoned half-read) closes it: the next request
  must never read the leftovers of a previous one.
- A kept-alive connection that the server has closed (or that is readable at all while idle,
  which for HTTP/1.1 can only mean EOF or a TLS close alert) is dropped *before* the request
  is written to it, and another one is taken. A request that was written is never repeated
  here: it may have reached the server; retrying is the API client's decision.
- Failures without an HTTP response come out as ``APIConnectionError`` or ``APITimeoutError``
  whose message starts with the request (method and URL).
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import socket as stdlib_socket
import ssl
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Final, TypeVar

import h11
import trio

from trioperator._client.errors import APIConnectionError, APITimeoutError

__all__ = ["Origin", "TransportPool", "TransportResponse"]

_READ_SIZE: Final = 65536
_NO_TIMEOUT: Final = float("inf")
_T = TypeVar("_T")
# Headers that h11 must see to frame the request (or that it rewrites when normalising).
_FRAMING: Final = frozenset({"host", "content-length", "transfer-encoding"})
_UNCACHEABLE: Final = b"\0"  # a marker: these headers go through h11 on every request
_MAX_HEADER_BLOCKS: Final = 32


class Origin:
    """Where the connections go: scheme, host, port, TLS settings and a path prefix.

    ``server_name`` is the TLS name to send (SNI) and to verify; by default the host.
    """

    __slots__ = ("host", "host_header", "port", "prefix", "server_name", "ssl_context", "tls")

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int | None,
        *,
        prefix: str = "",
        ssl_context: ssl.SSLContext | None = None,
        server_name: str | None = None,
    ) -> None:
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {scheme!r}: only http and https")
        if not host:
            raise ValueError("the server URL has no host")
        self.tls = scheme == "https"
        if self.tls and ssl_context is None:
            raise ValueError("an https origin needs a TLS context")
        self.ssl_context = ssl_context
        self.host = host
        default_port = 443 if self.tls else 80
        self.port = default_port if port is None else port
        bracketed = f"[{host}]" if ":" in host else host
        self.host_header = bracketed if self.port == default_port else f"{bracketed}:{self.port}"
        self.server_name = server_name or host
        self.prefix = prefix.rstrip("/")


class TransportResponse:
    """A response whose head is read; its body is read by :meth:`read` or :meth:`receive_some`."""

    __slots__ = ("_conn", "_decoder", "_pool", "headers", "status")

    def __init__(
        self, pool: TransportPool, conn: _Connection, status: int, headers: dict[str, str]
    ) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self.status = status
        self.headers = headers
        self._decoder = _decoder_for(headers.get("content-encoding"))

    async def read(self) -> bytes:
        """The whole (remaining) body."""
        parts: list[bytes] = []
        while (chunk := await self.receive_some()) is not None:
            parts.append(chunk)
        return b"".join(parts)

    async def receive_some(self) -> bytes | None:
        """The next bytes of the body (decompressed if the server compressed it); None at its end.

        A method, not an async generator: an abandoned generator would be finalised later by the
        garbage collector, outside of the task and the cancel scopes that own the connection.
        Never returns an empty chunk before the end.
        """
        conn = self._conn
        if conn is None:
            return None
        decoder = self._decoder
        while True:
            event = await conn.next_event()
            if type(event) is h11.Data:
                data = bytes(event.data)
                if decoder is not None:
                    data = _decompress(decoder, data, conn)
                if data:
                    return data
            elif type(event) is h11.EndOfMessage:
                self._conn = None
                tail = decoder.flush() if decoder is not None else b""
                self._pool._release(conn)
                return tail or None
            else:  # ConnectionClosed before the end, or anything unexpected.
                self._conn = None
                raise conn.error(f"the body ended prematurely ({type(event).__name__})")

    async def unwind(self) -> None:
        """Abandon the rest of the body: the connection is closed, never reused half-read."""
        self._discard()

    def _discard(self) -> None:
        """Close the connection unless the body was read to its end (and the connection reused)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _decompress(decoder: zlib._Decompress, data: bytes, conn: _Connection) -> bytes:
    try:
        return decoder.decompress(data)
    except zlib.error as exc:
        raise conn.error(f"malformed compressed body: {exc}") from exc


def _decoder_for(encoding: str | None) -> zlib._Decompress | None:
    if not encoding or encoding == "identity":
        return None
    if encoding == "gzip":
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return zlib.decompressobj()
    # We only ever ask for gzip; anything else is passed through as the server sent it.
    return None


class _Connection:
    """One HTTP/1.1 connection: a trio stream and its h11 state machine."""

    __slots__ = ("eof", "h11", "idle_since", "stream", "what")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0
        self.eof = False  # the server closed its side
        self.what = ""  # the request in flight, for error messages

    def error(self, text: str) -> APIConnectionError:
        self.close()
        return APIConnectionError(f"{self.what}: {text}")

    async def next_event(self) -> object:
        conn = self.h11
        while True:
            state = conn.their_state  # h11 moves to ERROR on errors: which phase failed?
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if state is h11.SEND_RESPONSE and self.eof:
                    text = "the server closed the connection without sending a response"
                elif state is h11.SEND_BODY and self.eof:
                    text = "the server closed the connection: the body ended prematurely"
                else:
                    text = f"malformed HTTP response: {exc}"
                raise self.error(text) from exc
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.stream.receive_some(_READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise self.error(_describe(exc)) from exc
            self.eof = not data
            conn.receive_data(data)  # type: ignore[arg-type]  # bytearray works as well

    async def send(self, data: bytes) -> None:
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise self.error(_describe(exc)) from exc

    def stale(self) -> bool:
        """Whether the idle connection may not be used: the server closed it, or said something.

        An idle HTTP/1.1 connection has nothing to read, ever; readable means EOF, a TLS alert
        or garbage, all the same: not reusable. One ``poll`` with no wait, no read.
        """
        stream = self.stream
        try:
            if isinstance(stream, (_TLSStream, trio.SocketStream)):
                fd = stream.socket.fileno()
            else:
                return True
        except OSError:
            return True
        if fd < 0:
            return True
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))

    def close(self) -> None:
        """Close now, without waiting for anything (no TLS close_notify: the peer does not care)."""
        with contextlib.suppress(Exception):
            _close_quietly(self.stream)


def _close_quietly(stream: trio.abc.Stream) -> None:
    if isinstance(stream, _TLSStream):
        stream.close()
    elif isinstance(stream, trio.SocketStream):
        stream.socket.close()


class _EndOfStream(Exception):
    """Held by :class:`_TLSStream` to give the end of the stream at the next read."""


class _TLSStream(trio.abc.Stream):
    """TLS on a non-blocking ``ssl.SSLSocket``, waiting for the socket with trio.

    Why not ``trio.SSLStream``: it runs TLS in memory buffers and moves every byte through a
    second stream, with a lock and a retry loop per call, so each read or write took several
    trips through the scheduler; here a read or write is one attempt on the socket, and a
    wait for it only if OpenSSL needs the network (either way round: TLS may need to write
    to read, or read to write). As ``trio.SSLStream(https_compatible=True)``, a TCP close
    without TLS close_notify reads as an end of stream (``suppress_ragged_eofs``).
    """

    __slots__ = ("_held", "socket")

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.socket = sock
        # What ended a read after some data was read already: given at the next read.
        self._held: BaseException | None = None

    @classmethod
    async def wrap(
        cls, tcp: trio.SocketStream, context: ssl.SSLContext, server_name: str
    ) -> _TLSStream:
        """Take over the socket of ``tcp`` (connected) and do the TLS handshake on it."""
        trio_socket = tcp.socket
        family, kind, proto = trio_socket.family, trio_socket.type, trio_socket.proto
        fd = trio_socket.detach()
        try:
            raw = stdlib_socket.socket(family, kind, proto, fileno=fd)
        except BaseException:
            os.close(fd)
            raise
        try:
            raw.setblocking(False)
            sock = context.wrap_socket(
                raw,
                server_hostname=server_name,
                do_handshake_on_connect=False,
                suppress_ragged_eofs=True,
            )
        except BaseException:
            raw.close()
            raise
        stream = cls(sock)
        try:
            await stream._retry(sock.do_handshake)
        except BaseException:
            stream.close()
            raise
        return stream

    async def _retry(self, operation: Callable[[], _T]) -> _T:
        """Run a non-blocking TLS operation until it is done: one scheduler trip if no wait."""
        await trio.lowlevel.checkpoint_if_cancelled()
        sock = self.socket
        waited = False
        while True:
            try:
                result = operation()
            except ssl.SSLWantReadError:
                await trio.lowlevel.wait_readable(sock)
            except ssl.SSLWantWriteError:
                await trio.lowlevel.wait_writable(sock)
            else:
                break
            waited = True
        if not waited:  # a wait is a schedule point already; else, be one as trio's streams are
            await trio.lowlevel.cancel_shielded_checkpoint()
        return result

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        size = _READ_SIZE if max_bytes is None else max_bytes
        held, self._held = self._held, None
        if held is not None:
            await trio.lowlevel.checkpoint()
            if isinstance(held, _EndOfStream):
                return b""
            raise held
        sock = self.socket
        data = await self._retry(functools.partial(sock.recv, size))
        if not data or len(data) >= size:
            return data
        # One read gives one TLS record, and the server sends every watch event (or a piece
        # of a long body) as a record of its own: the records already received are read now,
        # together, rather than each one with a trip through the scheduler and the parsers.
        parts = [data]
        room = size - len(data)
        while room > 0:
            try:
                more = sock.recv(room)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break  # nothing more for now
            except OSError as exc:
                self._held = exc  # after the data read before it, as it happened
                break
            if not more:
                self._held = _EndOfStream()  # the end comes after the data, as it did
                break
            parts.append(more)
            room -= len(more)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            # Without partial writes (OpenSSL's default), a send is all or a "want": a
            # retry after the wait sends the same bytes again, as OpenSSL requires.
            sent = await self._retry(functools.partial(self.socket.send, view))
            view = view[sent:]

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.wait_writable(self.socket)

    def close(self) -> None:
        """Close the socket now: no TLS close_notify (nobody reads it), no waiting."""
        sock = self.socket
        try:
            if sock.fileno() >= 0:
                # Tasks waiting on the socket (none, normally) must be woken before it closes.
                trio.lowlevel.notify_closing(sock)
        except RuntimeError:
            pass  # not in trio (e.g. at interpreter exit): nobody can be waiting then
        finally:
            sock.close()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc) or "the connection was closed"
    return f"{type(exc).__name__}: {text}"


class TransportPool:
    """Keep-alive connections to one origin.

    ``max_idle`` bounds the connections kept for reuse; how many are in use at once is the
    caller's business (``HTTPSession`` puts a semaphore in front of regular requests; watch
    streams are deliberately unbounded). Idle connections older than ``keepalive_expiry``
    seconds are closed instead of reused: servers close idle connections on their own timers.
    """

    def __init__(self, origin: Origin, *, max_idle: int, keepalive_expiry: float = 30.0) -> None:
        self.origin = origin
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._idle: list[_Connection] = []
        self._closed = False
        # Serialised header lines by the headers of the requests (see _serialize).
        self._header_blocks: dict[tuple[tuple[str, str], ...], bytes] = {}

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def request(
        self,
        method: str,
        target: str,
        what: str,
        *,
        headers: Mapping[str, str],
        content: bytes | None = None,
        connect_timeout: float | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """Send a request and read its whole response: status, headers, body."""
        response = await self._send(method, target, what, headers, content, connect_timeout)
        try:
            body = await response.read()
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
        conn = self._take()
        if conn is None:
            conn = await self._connect(what, connect_timeout)
        conn.what = what
        try:
            try:
                data = self._serialize(conn.h11, method, target, headers, content)
            except h11.LocalProtocolError as exc:
                raise APIConnectionError(f"{what}: cannot send the request: {exc}") from exc
            # One write: the whole request in one TCP segment (or TLS record) when it fits.
            await conn.send(data)
            while True:
                event = await conn.next_event()
                if type(event) is h11.Response:
                    head = event
                    break
                if type(event) is h11.InformationalResponse:
                    continue  # 100 Continue & co: the real answer follows.
                raise conn.error(
                    "the server closed the connection without sending a response"
                    if type(event) is h11.ConnectionClosed
                    else f"unexpected {type(event).__name__} instead of a response"
                )
        except BaseException:
            # Errors, timeouts and cancellations alike: a half-used connection is never reused.
            conn.close()
            raise
        return TransportResponse(self, conn, head.status_code, _headers(head.headers))

    def _serialize(
        self,
        h: h11.Connection,
        method: str,
        target: str,
        headers: Mapping[str, str],
        content: bytes | None,
    ) -> bytes:
        """The request's bytes, with ``h`` moved to waiting for the response.

        h11 validates and serialises every header of every request, which cost more than a
        third of a small request's client-side CPU; but the headers are nearly always the
        session's own, the same from request to request. So the header lines (all but the
        framing) are validated and serialised once per distinct set, in h11's own format, and
        h11 gets a request with only the framing headers: it still checks the method and
        target, and knows how the body and the response are framed.
        """
        items = tuple(headers.items())
        block = self._header_blocks.get(items)
        if block is None:
            block = self._header_block(items)
        full_target = self.origin.prefix + target
        framing = [("Host", self.origin.host_header)]
        if block is _UNCACHEABLE:
            # Framing headers of the caller's own: h11 sees (and judges) all of them.
            framing.extend(items)
            block = b""
        if content is not None:
            framing.append(("Content-Length", str(len(content))))
        request = h11.Request(method=method, target=full_target, headers=framing)
        h.send(request)  # For its state only: the bytes below are h11's plus the header block.
        lines = [b"%s %s HTTP/1.1\r\n" % (request.method, request.target)]
        for name, value in request.headers.raw_items():
            lines.append(b"%s: %s\r\n" % (name, value))
            if name == b"Host":
                lines.append(block)  # h11 writes Host first, then the rest in order.
        lines.append(b"\r\n")
        if content:
            h.send(h11.Data(data=content))
            lines.append(content)
        h.send(h11.EndOfMessage())
        return b"".join(lines)

    def _header_block(self, items: tuple[tuple[str, str], ...]) -> bytes:
        """Validate the header lines (h11's rules) and serialise them as h11 does; cache them."""
        if any(name.lower() in _FRAMING for name, _ in items):
            return _UNCACHEABLE
        # The Host is in for h11 to reject a second one, as it would in the full request.
        validated = h11.Request(
            method="GET", target="/", headers=[("Host", self.origin.host_header), *items]
        ).headers.raw_items()
        block = b"".join(b"%s: %s\r\n" % (name, value) for name, value in validated[1:])
        if len(self._header_blocks) >= _MAX_HEADER_BLOCKS:
            self._header_blocks.clear()  # e.g. many rotated tokens: never grow without bound
        self._header_blocks[items] = block
        return block

    def _take(self) -> _Connection | None:
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

    def _release(self, conn: _Connection) -> None:
        h = conn.h11
        if (
            self._closed
            or len(self._idle) >= self.max_idle
            or h.our_state is not h11.DONE
            or h.their_state is not h11.DONE
            # Bytes after the response: the server is confused; they must not become the start
            # of the next response.
            or h.trailing_data[0]
        ):
            conn.close()
            return
        h.start_next_cycle()
        conn.idle_since = trio.current_time()
        conn.what = ""
        self._idle.append(conn)

    async def _connect(self, what: str, connect_timeout: float | None) -> _Connection:
        origin = self.origin
        stream: trio.abc.Stream | None = None
        with trio.move_on_after(_NO_TIMEOUT if connect_timeout is None else connect_timeout):
            try:
                tcp = await trio.open_tcp_stream(origin.host, origin.port)
                stream = tcp
                if origin.tls:
                    assert origin.ssl_context is not None
                    # The TLS stream takes the socket over; on failure it closes it itself.
                    stream = None
                    stream = await _TLSStream.wrap(tcp, origin.ssl_context, origin.server_name)
            except BaseException as exc:
                if stream is not None:
                    _close_quietly(stream)
                if isinstance(exc, (OSError, trio.BrokenResourceError, ssl.SSLError)):
                    raise APIConnectionError(f"{what}: cannot connect: {_describe(exc)}") from exc
                raise
            return _Connection(stream)
        if stream is not None:
            _close_quietly(stream)
        raise APITimeoutError(f"{what}: cannot connect: no connection in {connect_timeout} seconds")

    def aclose(self) -> None:
        """Close the idle connections; those in use close when their request ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    # h11 gives lower-cased names. Repeated headers are joined, as HTTP allows for lists.
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers
