"""The HTTP/1.1 client on trio streams and h11: the one transport behind :class:`HTTPSession`.

Why not a general-purpose HTTP library: under trio, httpx2 spends about three times the CPU
per small request (pool bookkeeping, layers of async generators, TLS wrappers), more than the
operator's own logic; ``benchmarks/bench_http.py`` measures both. This module does only what
talking to one API server needs: one origin (directly, or through an HTTP(S) proxy), keep-alive
connections in a LIFO list, requests with a fully known body, responses read whole or streamed.
The protocol is h11's alone: it writes every request (head and framing) and parses every
response; nothing here writes or reads HTTP by hand. TLS is :mod:`.tls_stream`'s.

Design rules (each one a lesson of the library it replaces):

- A connection goes back to the pool only after a complete request/response cycle. Anything
  else (an error, a cancellation, a body abandoned half-read) closes it: the next request
  must never read the leftovers of a previous one.
- A kept-alive connection that the server has closed (or that is readable at all while idle,
  which for HTTP/1.1 can only mean EOF or a TLS close alert) is dropped *before* the request
  is written to it, and another one is taken. A request that was written is never repeated
  here: it may have reached the server; retrying is the API client's decision.
- Failures without an HTTP response come out as ``APIConnectionError`` or ``APITimeoutError``
  whose message starts with the request (method and URL); a response that breaks the protocol
  (or a request h11 refuses to send) as ``APIProtocolError``, which is not retried.
"""

from __future__ import annotations

import base64
import contextlib
import select
import ssl
import zlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Final, TypeVar
from urllib.parse import unquote, urlsplit

import h11
import trio

from trioperator._client.errors import APIConnectionError, APIProtocolError, APITimeoutError
from trioperator._client.tls_stream import TLSStream

__all__ = ["Origin", "Proxy", "TransportPool", "TransportResponse"]

_READ_SIZE: Final = 65536
_NO_TIMEOUT: Final = float("inf")
_T = TypeVar("_T")
# Headers that frame a request: set by the transport only.
_FRAMING: Final = frozenset({"host", "content-length", "transfer-encoding"})


class Proxy:
    """An HTTP(S) proxy on the way to the origin.

    ``https`` origins are reached through a tunnel (``CONNECT``), with TLS to the origin inside
    it; ``http`` origins get their requests in absolute form, as HTTP proxies expect. The
    credentials of the proxy URL are sent as ``Proxy-Authorization`` (Basic) and never shown:
    ``url`` holds the proxy's address only.
    """

    __slots__ = ("authorization", "host", "port", "ssl_context", "tls", "url")

    def __init__(self, url: str, *, ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(
                f"unsupported proxy URL scheme {scheme!r}: only http:// and https:// proxies"
            )
        self.tls = scheme == "https"
        host = parts.hostname
        if not host:
            raise ValueError("the proxy URL has no host")
        self.host = host
        self.port = parts.port or (443 if self.tls else 80)  # a bad port raises ValueError
        self.ssl_context = ssl_context if ssl_context is not None else _default_context(self.tls)
        bracketed = f"[{host}]" if ":" in host else host
        self.url = f"{scheme}://{bracketed}:{self.port}"
        self.authorization: str | None = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self.authorization = "Basic " + base64.b64encode(pair).decode("ascii")


def _default_context(tls: bool) -> ssl.SSLContext | None:
    # A TLS proxy is verified against the system's trust store, as any HTTPS server is.
    return ssl.create_default_context() if tls else None


class Origin:
    """Where the connections go: scheme, host, port, TLS settings and a path prefix.

    ``server_name`` is the TLS name to send (SNI) and to verify; by default the host.
    ``proxy``, if any, is where the connections go instead, to reach the origin through it.
    """

    __slots__ = (
        "authority",
        "host",
        "host_header",
        "port",
        "prefix",
        "proxy",
        "server_name",
        "ssl_context",
        "target_base",
        "tls",
    )

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int | None,
        *,
        prefix: str = "",
        ssl_context: ssl.SSLContext | None = None,
        server_name: str | None = None,
        proxy: Proxy | None = None,
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
        self.authority = f"{bracketed}:{self.port}"  # for CONNECT: always with the port
        self.server_name = server_name or host
        self.prefix = prefix.rstrip("/")
        self.proxy = proxy
        # What goes before the path in the request line: an HTTP proxy needs the whole URL.
        forwarded = proxy is not None and not self.tls
        self.target_base = f"http://{self.host_header}{self.prefix}" if forwarded else self.prefix


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
        conn.close()
        raise APIProtocolError(f"{conn.what}: malformed compressed body: {exc}") from exc


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
                    self.close()
                    raise APIProtocolError(f"{self.what}: malformed HTTP response: {exc}") from exc
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
        if isinstance(stream, trio.SSLStream):
            # TLS through a TLS proxy: what arrived shows on the outer stream (trio's stream
            # holds nothing between calls but what OpenSSL buffered, which is not checked).
            stream = stream.transport_stream
        try:
            if isinstance(stream, TLSStream):
                if stream.pending():
                    return True
                fd = stream.socket.fileno()
            elif isinstance(stream, trio.SocketStream):
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
    if isinstance(stream, TLSStream):
        stream.close()
    elif isinstance(stream, trio.SocketStream):
        stream.socket.close()
    elif isinstance(stream, trio.SSLStream):
        _close_quietly(stream.transport_stream)  # TLS through a TLS proxy: the outer stream


async def _open_tunnel(stream: trio.abc.Stream, origin: Origin, proxy: Proxy, what: str) -> None:
    """Ask the proxy for a tunnel to the origin (``CONNECT``); raise unless it is open."""
    conn = _Connection(stream)
    conn.what = what
    headers = [("Host", origin.authority)]
    if proxy.authorization:
        headers.append(("Proxy-Authorization", proxy.authorization))
    h = conn.h11
    request = h.send(h11.Request(method="CONNECT", target=origin.authority, headers=headers))
    end = h.send(h11.EndOfMessage())
    await conn.send((request or b"") + (end or b""))
    while True:
        event = await conn.next_event()
        if type(event) is not h11.InformationalResponse:
            break
    if type(event) is not h11.Response:
        raise conn.error(f"the proxy {proxy.url} closed the connection instead of a tunnel")
    if not 200 <= event.status_code < 300:
        reason = event.reason.decode("latin-1")
        raise conn.error(
            f"the proxy {proxy.url} refused the tunnel: HTTP {event.status_code} {reason}".rstrip()
        )
    if h.trailing_data[0]:
        # The origin speaks only after the client's TLS hello: these bytes are the proxy's.
        conn.close()
        raise APIProtocolError(f"{what}: the proxy {proxy.url} sent data into the new tunnel")


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
                raise APIProtocolError(f"{what}: cannot send the request: {exc}") from exc
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
        """The request's bytes as h11 writes them, with ``h`` moved to waiting for the response.

        The framing is the transport's alone: the body (always fully known) goes with its
        ``Content-Length``, and a caller's own ``Content-Length``, ``Transfer-Encoding`` or
        ``Host`` is refused, since h11 would send it next to ours (e.g. both a length and
        chunking, which servers and proxies may read differently). h11 validates the rest.
        """
        items: list[tuple[str, str]] = [("Host", self.origin.host_header)]
        for name, value in headers.items():
            if name.lower() in _FRAMING:
                raise h11.LocalProtocolError(f"the {name} header is the transport's to set")
            items.append((name, value))
        origin = self.origin
        if origin.proxy is not None and not origin.tls and origin.proxy.authorization:
            items.append(("Proxy-Authorization", origin.proxy.authorization))
        if content is not None:
            items.append(("Content-Length", str(len(content))))
        request = h11.Request(method=method, target=origin.target_base + target, headers=items)
        parts = [h.send(request)]
        if content:
            parts.append(h.send(h11.Data(data=content)))
        parts.append(h.send(h11.EndOfMessage()))
        return b"".join(part for part in parts if part)

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
        proxy = origin.proxy
        # The outermost stream open so far: what to close if anything fails on the way.
        stream: trio.abc.Stream | None = None
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
                    await _open_tunnel(stream, origin, proxy, what)
                if origin.tls:
                    assert origin.ssl_context is not None
                    if isinstance(stream, trio.SocketStream):
                        stream = None
                        stream = await TLSStream.wrap(tcp, origin.ssl_context, origin.server_name)
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
                    _close_quietly(stream)
                if isinstance(exc, h11.LocalProtocolError):  # e.g. a host h11 cannot send
                    raise APIProtocolError(f"{what}: cannot ask for a tunnel: {exc}") from exc
                if isinstance(exc, (OSError, trio.BrokenResourceError, ssl.SSLError)):
                    via = "" if proxy is None else f" (through the proxy {proxy.url})"
                    raise APIConnectionError(
                        f"{what}: cannot connect{via}: {_describe(exc)}"
                    ) from exc
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
