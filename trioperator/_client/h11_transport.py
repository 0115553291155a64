"""The HTTP/1.1 client on trio streams and h11: the one transport behind :class:`HTTPSession`.

Why not a general-purpose HTTP library: under trio, httpx2 spends about three times the CPU
per small request (pool bookkeeping, layers of async generators, TLS wrappers), more than the
operator's own logic; ``benchmarks/bench_http.py`` measures both. This module does only what
talking to one API server needs: one origin (directly, or through an HTTP(S) proxy), keep-alive
connections in a LIFO list, requests with a fully known body, responses read whole or streamed.
Nothing here writes or reads HTTP by hand: h11 writes every request (head and framing), and
httptools (llhttp, in C) parses every response: for the few headers and small JSON bodies of
an API server's answers it costs a tenth of h11's parsing in pure Python, which was about a
fifth of the CPU of a request (``benchmarks/bench_http.py``). TLS is :mod:`.tls_stream`'s.

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
- Every response is untrusted input (the server, or any proxy on the way, may be hostile or
  broken), and nothing it sends may grow the operator's memory or CPU without bound: a head
  (status line and headers, 1xx heads included) or trailers of more than ``MAX_HEAD_BYTES``,
  more than ``MAX_HEADERS`` headers, a body over the caller's ``max_size`` (as sent, or once
  decompressed) all end the exchange with ``APIResponseTooLargeError`` as soon as they are
  seen, without reading the rest. The bytes are counted per read, never per byte.
"""

from __future__ import annotations

import base64
import contextlib
import select
import ssl
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Final, TypeVar
from urllib.parse import unquote, urlsplit

import h11
import httptools
import trio

from trioperator._client.errors import (
    APIConnectionError,
    APIProtocolError,
    APIResponseTooLargeError,
    APITimeoutError,
)
from trioperator._client.tls_stream import TLSStream

__all__ = ["MAX_HEADERS", "MAX_HEAD_BYTES", "Origin", "Proxy", "TransportPool", "TransportResponse"]

MAX_HEAD_BYTES: Final = 64 * 1024
"""The most bytes of a response that may come without any of its body: its head (with any 1xx
heads before it) and its trailers. An API server's head is well under 1 KiB, and proxies add
little; 64 KiB is what common HTTP stacks accept, and it bounds what httptools accumulates of
a header arriving in many pieces."""

MAX_HEADERS: Final = 256
"""The most header lines of a response (its trailers included); an API server sends about ten."""

_READ_SIZE: Final = 65536
# The most decompressed bytes one read of a streamed body hands on at once: a small compressed
# read may inflate a thousandfold, so the rest is kept compressed for the next call.
_INFLATE_PIECE: Final = 1024 * 1024
_NO_TIMEOUT: Final = float("inf")
_T = TypeVar("_T")
# Headers that frame a request: set by the transport only.
_FRAMING: Final = frozenset({"host", "content-length", "transfer-encoding"})
# Sets of validated request headers kept per pool (see TransportPool._serialize).
_VALIDATED_HEADERS: Final = 256
# How much of a reason phrase (or a refusing proxy's Location) is kept for messages.
_REASON_LENGTH: Final = 256


def _header_block(request: h11.Request) -> bytes:
    """The header lines of a request validated by h11, as h11 writes them: Host first.

    Made once per set of headers (see ``TransportPool._serialize``) from public names only:
    the headers h11 has validated and normalized, in their raw spelling.
    """
    items = request.headers.raw_items()
    hosts = [item for item in items if item[0].lower() == b"host"]
    others = [item for item in items if item[0].lower() != b"host"]
    return b"".join(b"%s: %s\r\n" % item for item in (*hosts, *others)) + b"\r\n"


def _write(request: h11.Request, content: bytes | None, header_block: bytes) -> bytes:
    """A whole request: its line, its header lines (h11's, see above), and the body as it is.

    What an h11 connection writes for a request with a ``Content-Length`` (the only framing this
    transport uses), without its state machine, which costs two thirds of writing a request (three
    events, the framing looked up in the headers, the states checked) and decides nothing here.
    ``tests/integration/client/test_h11_transport.py`` holds it to the connection's bytes.
    """
    line = b"%s %s HTTP/1.1\r\n" % (request.method, request.target)
    return line + header_block + content if content else line + header_block


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
        "tls_session",
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
        # The server's latest TLS session ticket, offered by every new direct connection (both
        # pools share the origin): a resumed handshake skips the certificates and their
        # signatures. It is the server that saves most (its CPU per new connection drops to
        # about a third; figures: benchmarks/README.md). A pool grows by dozens of
        # connections in a burst, and each watch reconnects now and then. A ticket the server
        # no longer takes only costs the full handshake it would have been anyway.
        self.tls_session: ssl.SSLSession | None = None


class TransportResponse:
    """A response whose head is read; its body is read by :meth:`read` or :meth:`receive_some`."""

    __slots__ = ("_conn", "_decoder", "_pool", "_reader", "headers", "status")

    def __init__(self, pool: TransportPool, conn: _Connection, reader: _ResponseReader) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self._reader = reader
        self.status = reader.status
        self.headers = reader.headers
        self._decoder = _decoder_for(reader.headers.get("content-encoding"))

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
            announced = _announced_length(reader.headers)
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
                    data = _decompress(decoder, data, conn, room)
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

    def _too_large(self, conn: _Connection, how: str, limit: int) -> APIResponseTooLargeError:
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
            data = _decompress(decoder, decoder.unconsumed_tail, conn, _INFLATE_PIECE)
            if data:
                return data
        while True:
            if parts:
                # All that one read brought (e.g. several watch events), at once.
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                parts.clear()
                if decoder is not None:
                    data = _decompress(decoder, data, conn, _INFLATE_PIECE)
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


class _ResponseReader:
    """One response as httptools parses it: status, headers, the body's bytes not yet taken.

    The parser calls the ``on_*`` methods as the bytes are fed. Whatever follows a complete
    response (the server is confused) is never parsed into another one: it only makes the
    connection unusable for the next request.
    """

    __slots__ = (
        "_informational",
        "_parser",
        "_repeated",
        "body",
        "body_size",
        "close_delimited",
        "complete",
        "head_done",
        "head_only",
        "header_count",
        "headers",
        "reason",
        "reusable",
        "status",
        "trailing",
        "unbodied",
    )

    def __init__(self, *, head_only: bool = False) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._informational = False
        self.head_only = head_only  # the answer to a HEAD request: no body, whatever it says
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.complete = False
        self.close_delimited = False  # the body ends where the connection does
        self.reusable = True
        self.trailing = False  # bytes came after the complete response
        self.body: list[bytes] = []
        self.body_size = 0  # bytes of body parsed so far (taken from ``body`` or not)
        self.header_count = 0  # header lines of this head, then of its trailers
        # Headers seen more than once, by name: all their values, joined once at the end of the
        # head (joining as they come would copy the value so far for each repetition).
        self._repeated: dict[str, list[str]] | None = None
        # Bytes fed in a row that brought no body: a head, 1xx heads, trailers (see _Connection).
        self.unbodied = 0

    def feed(self, data: bytes | bytearray) -> None:
        """Parse the bytes; ``httptools.HttpParserError`` for a response that breaks HTTP."""
        if self.complete:
            self.trailing = True
            self.reusable = False
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            if not self.complete:
                raise
            self.trailing = True  # garbage after a complete response
            self.reusable = False

    def end(self) -> bool:
        """The connection ended: whether that completed the response (a close-delimited body)."""
        if self.head_done and not self.complete and self.close_delimited:
            self.complete = True
            self.reusable = False
        return self.complete

    def on_message_begin(self) -> None:
        if self.complete:
            self.trailing = True  # another response after the one asked for
            self.reusable = False

    def on_status(self, reason: bytes) -> None:
        # Called for each piece of the reason phrase as it arrives: only its beginning is kept
        # (it is only ever shown), so a long one that trickles in costs no copying.
        if not self.complete and len(self.reason) < _REASON_LENGTH:
            self.reason = (self.reason + reason.decode("latin-1"))[:_REASON_LENGTH]

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            return
        self.header_count += 1
        if self.header_count > MAX_HEADERS:
            return  # the response is refused after this read (see _Connection.receive_into)
        # Names lower-cased; repeated headers are joined, as HTTP allows for lists.
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self.headers
        if key in headers:
            repeated = self._repeated
            if repeated is None:
                repeated = self._repeated = {}
            values = repeated.get(key)
            if values is None:
                repeated[key] = [headers[key], text]
            else:
                values.append(text)
        else:
            headers[key] = text

    def _join_repeated(self) -> None:
        repeated = self._repeated
        if repeated is not None:
            self._repeated = None
            headers = self.headers
            for key, values in repeated.items():
                headers[key] = ", ".join(values)

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            # 100 Continue, 103 Early Hints & co: the real answer follows, with its own head.
            self._informational = True
            self.headers = {}
            self._repeated = None
            self.header_count = 0
            self.reason = ""
            return
        self._join_repeated()
        self.status = status
        self.head_done = True
        headers = self.headers
        coding = headers.get("transfer-encoding")
        if coding is not None:
            self.close_delimited = not coding.rstrip().lower().endswith("chunked")
        else:
            self.close_delimited = "content-length" not in headers and status not in (204, 304)
        if self.head_only:
            # No body, whatever the head announces (llhttp does not know the request's method:
            # it would wait for that body). Each response has a parser of its own, so the
            # connection is reusable; bytes coming after this head are not.
            self.complete = True
            self.reusable = self._parser.should_keep_alive()

    def on_body(self, data: bytes) -> None:
        if self.complete:
            self.trailing = True  # after the head of a HEAD response
            self.reusable = False
        else:
            self.body.append(data)
            self.body_size += len(data)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self.complete:
            return
        self._join_repeated()  # of the trailers
        self.complete = True
        if self.close_delimited or not self._parser.should_keep_alive():
            self.reusable = False


def _announced_length(headers: Mapping[str, str]) -> int | None:
    """The ``Content-Length`` of a response, if it has one that is a plain number."""
    value = headers.get("content-length")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:  # e.g. the same length repeated: llhttp judged it already
        return None


def _decompress(
    decoder: zlib._Decompress, data: bytes, conn: _Connection, max_length: int = 0
) -> bytes:
    """Inflate ``data``: at most ``max_length`` bytes (0: all), the rest of the input kept in
    ``decoder.unconsumed_tail``."""
    try:
        return decoder.decompress(data, max_length)
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
    """One HTTP/1.1 connection: a trio stream, and the request in flight (for error messages)."""

    __slots__ = ("_poller", "idle_since", "stream", "ticket_due", "what")

    def __init__(self, stream: trio.abc.Stream, *, ticket_due: bool = False) -> None:
        self.stream = stream
        self._poller: select.poll | None = None  # for stale()
        self.idle_since = 0.0
        self.what = ""  # the request in flight, for error messages
        # A new TLS connection to the origin itself (a TLSStream), whose session ticket is
        # still to be kept for the next ones (see Origin.tls_session).
        self.ticket_due = ticket_due

    def error(self, text: str) -> APIConnectionError:
        self.close()
        return APIConnectionError(f"{self.what}: {text}")

    async def receive_into(self, reader: _ResponseReader) -> None:
        """Read what the server sent (at least one byte, or its end) into the response."""
        try:
            data = await self.stream.receive_some(_READ_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise self.error(_describe(exc)) from exc
        if not data:
            if reader.end():
                return
            raise self.error(
                "the server closed the connection: the body ended prematurely"
                if reader.head_done
                else "the server closed the connection without sending a response"
            )
        body_size = reader.body_size
        try:
            reader.feed(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.close()
            text = str(exc) or type(exc).__name__
            raise APIProtocolError(f"{self.what}: malformed HTTP response: {text}") from exc
        # The limits of what comes without a body are checked once per read: a read is at
        # most _READ_SIZE bytes, so nothing grows by more than that past a limit.
        if reader.body_size != body_size:
            reader.unbodied = 0
        elif not reader.complete:
            reader.unbodied += len(data)
            if reader.unbodied > MAX_HEAD_BYTES:
                self.close()
                part = "trailers are" if reader.head_done else "head (status line and headers) is"
                raise APIResponseTooLargeError(
                    f"{self.what}: the response's {part} over {MAX_HEAD_BYTES} bytes",
                    limit=MAX_HEAD_BYTES,
                )
        if reader.header_count > MAX_HEADERS:
            self.close()
            raise APIResponseTooLargeError(
                f"{self.what}: the response has more than {MAX_HEADERS} headers",
                limit=MAX_HEADERS,
            )

    async def receive_head(self, reader: _ResponseReader) -> None:
        while not reader.head_done:
            await self.receive_into(reader)

    async def send(self, data: bytes) -> None:
        """Send a request (or a tunnel's): an answer is awaited right after."""
        stream = self.stream
        try:
            if type(stream) is TLSStream:
                await stream.send_request(data)  # the wait for the answer is the schedule point
            else:
                await stream.send_all(data)
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
        poller = self._poller
        if poller is None:  # made at the first reuse, kept: the socket stays the same
            poller = self._poller = select.poll()
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
    h = h11.Connection(h11.CLIENT)
    request = h.send(h11.Request(method="CONNECT", target=origin.authority, headers=headers))
    end = h.send(h11.EndOfMessage())
    await conn.send((request or b"") + (end or b""))
    # A 2xx answer to CONNECT has no body: llhttp reads one until the end of the connection,
    # so whatever comes after the head shows as body bytes.
    reader = _ResponseReader()
    try:
        await conn.receive_head(reader)
    except APIProtocolError:
        raise
    except APIConnectionError:
        raise conn.error(
            f"the proxy {proxy.url} closed the connection instead of a tunnel"
        ) from None
    if not 200 <= reader.status < 300:
        refusal = f"HTTP {reader.status} {reader.reason}".rstrip()
        location = reader.headers.get("location")
        if location is not None and 300 <= reader.status < 400:
            refusal += f" (to {location[:_REASON_LENGTH]!r}, not followed)"
        raise conn.error(f"the proxy {proxy.url} refused the tunnel: {refusal}")
    if reader.body or reader.trailing:
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
        self._idle: list[_Connection] = []
        self._closed = False
        # Validated request headers by (headers, body length): see _serialize.
        self._validated: dict[
            tuple[tuple[tuple[str, str], ...], int | None], tuple[h11.Request, bytes]
        ] = {}

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
            data = self._serialize(method, target, headers, content)
        except h11.LocalProtocolError as exc:
            raise APIProtocolError(f"{what}: cannot send the request: {exc}") from exc
        conn = self._take()
        if conn is None:
            conn = await self._connect(what, connect_timeout)
        conn.what = what
        reader = _ResponseReader(head_only=method == "HEAD")
        try:
            # One write: the whole request in one TCP segment (or TLS record) when it fits.
            await conn.send(data)
            await conn.receive_head(reader)
        except BaseException:
            # Errors, timeouts and cancellations alike: a half-used connection is never reused.
            conn.close()
            raise
        return TransportResponse(self, conn, reader)

    def _serialize(
        self, method: str, target: str, headers: Mapping[str, str], content: bytes | None
    ) -> bytes:
        """The request's bytes as h11 writes them.

        The framing is the transport's alone: the body (always fully known) goes with its
        ``Content-Length``, and a caller's own ``Content-Length``, ``Transfer-Encoding`` or
        ``Host`` is refused, since h11 would send it next to ours (e.g. both a length and
        chunking, which servers and proxies may read differently). h11 validates the rest.

        h11 validates each request; :func:`_write` writes it. Its validation of the header
        lines, a third of its cost, is done once per set of headers (and body length), and so
        is the writing of those lines: the next requests with the same headers reuse both; the
        method and the target are validated each time.
        """
        key = (tuple(headers.items()), None if content is None else len(content))
        origin = self.origin
        full_target = origin.target_base + target
        cached = self._validated.get(key)
        if cached is not None:
            first, header_block = cached
            request = h11.Request(method=method, target=full_target, headers=first.headers)
        else:
            items: list[tuple[str, str]] = [("Host", origin.host_header)]
            for name, value in headers.items():
                if name.lower() in _FRAMING:
                    raise h11.LocalProtocolError(f"the {name} header is the transport's to set")
                items.append((name, value))
            if origin.proxy is not None and not origin.tls and origin.proxy.authorization:
                items.append(("Proxy-Authorization", origin.proxy.authorization))
            if content is not None:
                items.append(("Content-Length", str(len(content))))
            request = h11.Request(method=method, target=full_target, headers=items)
            header_block = _header_block(request)
            if len(self._validated) >= _VALIDATED_HEADERS:
                self._validated.clear()  # e.g. bodies of many lengths: start over, stay small
            self._validated[key] = (request, header_block)
        return _write(request, content, header_block)

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

    def _release(self, conn: _Connection, reader: _ResponseReader) -> None:
        if conn.ticket_due:
            # After a whole answer, a TLS 1.3 server's tickets (sent after the handshake) have
            # been read: keep the newest for the next connections, even if this one closes.
            conn.ticket_due = False
            stream = conn.stream
            session = stream.resumable_session() if isinstance(stream, TLSStream) else None
            if session is not None:
                self.origin.tls_session = session
        # Not reusable: the server will close it, the body's end was the connection's, or
        # bytes came after the response (the server is confused; they must not become the
        # start of the next response).
        if self._closed or len(self._idle) >= self.max_idle or not reader.reusable:
            conn.close()
            return
        conn.idle_since = trio.current_time()
        conn.what = ""
        self._idle.append(conn)

    async def _connect(self, what: str, connect_timeout: float | None) -> _Connection:
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
                    await _open_tunnel(stream, origin, proxy, what)
                if origin.tls:
                    assert origin.ssl_context is not None
                    if isinstance(stream, trio.SocketStream):
                        stream = None
                        stream = await TLSStream.wrap(
                            tcp, origin.ssl_context, origin.server_name, session=origin.tls_session
                        )
                        stream.read_ahead = self.read_ahead
                        ticket_due = True
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
                if isinstance(exc, ssl.SSLError):
                    origin.tls_session = None  # the next attempt without a ticket, in case
                if isinstance(exc, h11.LocalProtocolError):  # e.g. a host h11 cannot send
                    raise APIProtocolError(f"{what}: cannot ask for a tunnel: {exc}") from exc
                if isinstance(exc, (OSError, trio.BrokenResourceError, ssl.SSLError)):
                    via = "" if proxy is None else f" (through the proxy {proxy.url})"
                    raise APIConnectionError(
                        f"{what}: cannot connect{via}: {_describe(exc)}"
                    ) from exc
                raise
            return _Connection(stream, ticket_due=ticket_due)
        if stream is not None:
            _close_quietly(stream)
        raise APITimeoutError(f"{what}: cannot connect: no connection in {connect_timeout} seconds")

    def aclose(self) -> None:
        """Close the idle connections; those in use close when their request ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
