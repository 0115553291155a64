"""HTTP sessions to the API server: the one module that knows the HTTP library.

Everything above this module sees a small, library-independent interface:
:class:`HTTPSession` with :meth:`~HTTPSession.request` (a fully read :class:`HTTPResponse`) and
:meth:`~HTTPSession.stream` (an :class:`HTTPStream` whose body is read as lines). Failures without
an HTTP response come out as :class:`~trioperator._client.errors.APIConnectionError` (or
:class:`~trioperator._client.errors.APITimeoutError`); no type of the HTTP library leaks out.

Two implementations sit behind it. The default is the lean HTTP/1.1 client of
:mod:`~trioperator._client.h11_transport` (trio streams + h11): for the small JSON requests of an
operator it costs less than half the CPU of the general-purpose library (issue #6,
``benchmarks/bench_http.py``). The httpx API (served by the httpx2 fork, DESIGN.md §7) remains
for what the lean client does not do: proxies, and ``trust_env`` (proxy and CA settings taken
from the environment). Only this module imports httpx2.

Timeouts: the library enforces only the connect timeout (it knows when a TCP/TLS handshake is
happening); the total deadline of a regular request is a trio cancel scope, so it follows the
trio clock (MockClock in tests) and cancels cleanly. Streams get no library read timeout at all:
the watcher bounds them with its own scopes (inactivity, client timeout).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import math
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx2 as httpx
import trio

from trioperator._client.credentials import ConnectionInfo
from trioperator._client.errors import APIConnectionError, APITimeoutError
from trioperator._client.h11_transport import Origin, TransportPool
from trioperator._client.tls import build_ssl_context
from trioperator._version import __version__
from trioperator._wire.watch import LineSplitter

__all__ = [
    "USER_AGENT",
    "HTTPResponse",
    "HTTPSession",
    "HTTPStream",
    "SessionPool",
    "build_ssl_context",
]

logger = logging.getLogger(__name__)

USER_AGENT = f"trioperator/{__version__}"

# Regular requests: bounded, so a burst of workers cannot open thousands of sockets; the
# keep-alive allowance equals the limit, so a busy operator does not churn TLS handshakes.
MAX_CONCURRENT_REQUESTS = 32
"""Regular requests in flight at once per credentials; the rest wait in a trio semaphore.

The HTTP library's pool rescans its whole queue of waiting requests on every state change,
so letting hundreds of workers' requests queue inside it costs quadratic CPU in a burst
(benchmarks/: ~60% of the operator's CPU). A trio semaphore in front keeps that queue short
and is O(1) per request; the connection pool then matches it, so connections are reused."""

_KEEPALIVE_EXPIRY = 30.0
_STREAM_KEEPALIVE = 10

_REQUEST_LIMITS = httpx.Limits(
    max_connections=MAX_CONCURRENT_REQUESTS,
    max_keepalive_connections=MAX_CONCURRENT_REQUESTS,
    keepalive_expiry=_KEEPALIVE_EXPIRY,
)
# Watch streams hold their connection for minutes. They get their own, unbounded pool: in a
# shared bounded pool, the 101st watcher (or every patch behind 100 watchers) would wait for a
# free connection forever -- the silent "operator stopped reacting" failure.
_STREAM_LIMITS = httpx.Limits(
    max_connections=None,
    max_keepalive_connections=_STREAM_KEEPALIVE,
    keepalive_expiry=_KEEPALIVE_EXPIRY,
)

Params = Mapping[str, str] | None
Headers = Mapping[str, str] | None


class HTTPResponse:
    """A completed response: status, headers (lower-cased names) and the whole body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"HTTPResponse({self.status}, {len(self.body)} bytes)"


class _Body(Protocol):
    """A response body being received, whichever client receives it."""

    async def receive_some(self) -> bytes | None:
        """The next bytes, or None at the end. Errors come out as APIConnectionError."""
        ...

    async def read(self) -> bytes:
        """All the remaining bytes."""
        ...

    async def unwind(self) -> None:
        """Stop receiving: the body is abandoned before its end."""
        ...


class HTTPStream:
    """A response whose body is being streamed; valid only inside :meth:`HTTPSession.stream`."""

    def __init__(self, status: int, headers: Mapping[str, str], body: _Body) -> None:
        self._body = body
        self._lines: _LineIterator | None = None
        self.status = status
        self.headers = headers

    async def read(self) -> bytes:
        """Read the whole (remaining) body: used for error responses, which are small."""
        return await self._body.read()

    def lines(self) -> AsyncIterator[bytes]:
        """The body split on ``\\n``: complete lines of any length, blank lines skipped.

        An unterminated last line is delivered when the server ends the body normally. If the
        connection breaks, :class:`APIConnectionError` is raised and the partial line is lost.
        """
        if self._lines is None:
            self._lines = _LineIterator(self._body)
        return self._lines

    async def _close(self) -> None:
        lines, self._lines = self._lines, None
        if lines is not None:
            await lines.unwind()


class _LineIterator:
    """An async iterator of lines over a body's byte chunks.

    A plain class, not an async generator: an abandoned generator would be finalised later by
    the garbage collector, outside of the task and the cancel scopes that own the stream.
    """

    __slots__ = ("_body", "_done", "_splitter")

    def __init__(self, body: _Body) -> None:
        self._body = body
        self._splitter = LineSplitter()
        self._done = False

    def __aiter__(self) -> _LineIterator:
        return self

    async def __anext__(self) -> bytes:
        splitter = self._splitter
        while (line := splitter.pop()) is None:
            if self._done:
                raise StopAsyncIteration
            try:
                chunk = await self._body.receive_some()
            except APIConnectionError:
                self._done = True
                raise
            if chunk is None:
                self._done = True
                splitter.finish()
            else:
                splitter.feed(chunk)
        return line

    async def unwind(self) -> None:
        if not self._done:
            self._done = True
            await self._body.unwind()


class _HttpxBody:
    """The body of an httpx response, as a :class:`_Body`."""

    __slots__ = ("_chunks", "_response", "_what")

    def __init__(self, response: httpx.Response, what: str) -> None:
        self._response = response
        self._what = what
        self._chunks: AsyncIterator[bytes] | None = None

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.RequestError as exc:
            raise _connection_error(exc, self._what) from exc

    async def receive_some(self) -> bytes | None:
        if self._chunks is None:
            self._chunks = self._response.aiter_bytes()
        try:
            return await anext(self._chunks)
        except StopAsyncIteration:
            return None
        except httpx.RequestError as exc:
            raise _connection_error(exc, self._what) from exc

    async def unwind(self) -> None:
        """Finish the library's byte iterator, when the body is abandoned before its end.

        The library reads a body through several nested async generators; closing only the
        outermost leaves the inner ones suspended, to be finalised later (with a warning) by
        the garbage collector. One more pull under a cancelled scope makes the innermost read
        raise ``Cancelled``, which finishes every generator of the chain, here and now. Only
        data that is already buffered is consumed on the way.
        """
        chunks = self._chunks
        if chunks is None:
            return
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                while True:
                    await anext(chunks)
            except (StopAsyncIteration, httpx.RequestError):
                pass


def _connection_error(exc: Exception, what: str) -> APIConnectionError:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"{what}: {type(exc).__name__}: {text}")
    return APIConnectionError(f"{what}: {type(exc).__name__}: {text}")


def _target(path: str, params: Params) -> str:
    """The path and the query of a request."""
    if params:
        return f"{path}?{httpx.QueryParams(dict(params))}"
    return path


def _auth_header(info: ConnectionInfo) -> str | None:
    if info.token:
        return f"{info.scheme or 'Bearer'} {info.token}"
    if info.username is not None and info.password is not None:
        pair = f"{info.username}:{info.password}".encode()
        return f"Basic {base64.b64encode(pair).decode('ascii')}"
    if info.scheme:
        return info.scheme
    return None


def _lean_origin(url: str, info: ConnectionInfo, verify: ssl.SSLContext) -> Origin | None:
    """Where the lean client connects, or None if this server needs the HTTP library."""
    if info.proxy_url:
        return None  # the lean client does not speak to proxies (CONNECT, SOCKS).
    try:
        parts = urlsplit(url)
        return Origin(
            parts.scheme,
            parts.hostname or "",
            parts.port,
            prefix=parts.path,
            ssl_context=verify if parts.scheme == "https" else None,
            server_name=info.tls_server_name,
        )
    except ValueError:
        # An odd URL: the HTTP library reports it (or copes with it) as it always did.
        return None


class HTTPSession:
    """Everything needed to talk to one API server with one set of credentials.

    Holds two connection pools (regular requests and watch streams, see the limits above).
    Create it outside of any particular task; close it with :meth:`aclose`.
    """

    def __init__(self, info: ConnectionInfo, *, trust_env: bool = False) -> None:
        self.info = info
        self.base_url = info.server.rstrip("/")
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        authorization = _auth_header(info)
        if authorization is not None:
            headers["Authorization"] = authorization
        # The TLS name to send and verify, when it differs from the host in the URL (e.g. a
        # server reached by IP address through a tunnel); httpcore reads this per request.
        self._extensions: dict[str, Any] = {}
        if info.tls_server_name:
            self._extensions["sni_hostname"] = info.tls_server_name
        # One TLS context shared by both pools. Building it loads CA certificates, which is
        # slow; for plain-HTTP servers (tests, local proxies) a bare context is enough: it
        # trusts nothing, so it can never verify anything by mistake.
        tls_needed = trust_env or any(
            url.startswith("https:") for url in (self.base_url, info.proxy_url or "")
        )
        if tls_needed:
            verify = build_ssl_context(info)
        else:
            verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        # The lean client unless the environment may configure proxies or CAs (trust_env),
        # which only the HTTP library knows how to read.
        origin = None if trust_env else _lean_origin(self.base_url, info, verify)
        self._lean: tuple[TransportPool, TransportPool] | None = None
        self._requests: httpx.AsyncClient | None = None
        self._streams: httpx.AsyncClient | None = None
        if origin is not None:
            self._lean = (
                TransportPool(
                    origin, max_idle=MAX_CONCURRENT_REQUESTS, keepalive_expiry=_KEEPALIVE_EXPIRY
                ),
                TransportPool(
                    origin, max_idle=_STREAM_KEEPALIVE, keepalive_expiry=_KEEPALIVE_EXPIRY
                ),
            )
            # Compressed responses, as the HTTP library asks for: the API server gzips large
            # lists only (>128 KiB), where the bytes saved are worth the CPU.
            headers["Accept-Encoding"] = "gzip"
        else:
            self._requests = self._make_client(verify, headers, _REQUEST_LIMITS, trust_env)
            self._streams = self._make_client(verify, headers, _STREAM_LIMITS, trust_env)
        self._headers = headers
        self._header_names = {name.lower() for name in headers}
        self._slots = trio.Semaphore(MAX_CONCURRENT_REQUESTS)
        self._active = 0
        self._retired = False
        self._closed = False

    def _make_client(
        self,
        verify: ssl.SSLContext,
        headers: dict[str, str],
        limits: httpx.Limits,
        trust_env: bool,
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base_url,
            verify=verify,
            headers=headers,
            limits=limits,
            proxy=self.info.proxy_url or None,
            trust_env=trust_env,
            timeout=httpx.Timeout(None),
            follow_redirects=False,
        )

    def url(self, path: str, params: Params = None) -> str:
        """The full URL of a request, for logs and error messages."""
        return self.base_url + _target(path, params)

    def _merged_headers(self, headers: Headers) -> Mapping[str, str]:
        """The session's headers with the request's own, which win (names are case-insensitive)."""
        if not headers:
            return self._headers
        merged = self._headers
        if any(name.lower() in self._header_names for name in headers):
            overridden = {name.lower() for name in headers}
            merged = {k: v for k, v in merged.items() if k.lower() not in overridden}
        return {**merged, **headers}

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params = None,
        content: bytes | None = None,
        headers: Headers = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- a cancel scope inside
        connect_timeout: float | None = None,
    ) -> HTTPResponse:
        """Send a request and read the whole response (whatever its status).

        ``timeout`` bounds everything (connecting, sending, waiting, reading) by trio's clock.
        """
        target = _target(path, params)
        what = f"{method} {self.base_url}{target}"
        self._enter(what)
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
                async with self._slots:
                    if self._lean is not None:
                        status, response_headers, body = await self._lean[0].request(
                            method,
                            target,
                            what,
                            headers=self._merged_headers(headers),
                            content=content,
                            connect_timeout=connect_timeout,
                        )
                        return HTTPResponse(status, response_headers, body)
                    assert self._requests is not None
                    try:
                        response = await self._requests.request(
                            method,
                            path,
                            params=params,
                            content=content,
                            headers=headers,
                            timeout=httpx.Timeout(None, connect=connect_timeout),
                            extensions=self._extensions,
                        )
                    except httpx.RequestError as exc:
                        raise _connection_error(exc, what) from exc
                return HTTPResponse(
                    status=response.status_code,
                    headers=dict(response.headers.items()),
                    body=response.content,
                )
            assert scope.cancelled_caught
            raise APITimeoutError(f"{what}: no complete response in {timeout} seconds")
        finally:
            await self._leave()

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Params = None,
        headers: Headers = None,
        connect_timeout: float | None = None,
    ) -> AsyncIterator[HTTPStream]:
        """Send a request and give the response with its body unread, to be read as lines.

        There is no total or read timeout here: the caller wraps this in its own cancel scopes.
        """
        target = _target(path, params)
        what = f"{method} {self.base_url}{target}"
        self._enter(what)
        try:
            if self._lean is not None:
                async with self._lean[1].stream(
                    method,
                    target,
                    what,
                    headers=self._merged_headers(headers),
                    connect_timeout=connect_timeout,
                ) as lean:
                    # An abandoned body needs no unwinding here: leaving this block closes the
                    # connection unless the body was read to its end.
                    stream = HTTPStream(lean.status, lean.headers, lean)
                    try:
                        yield stream
                    finally:
                        await stream._close()
                return
            assert self._streams is not None
            async with self._streams.stream(
                method,
                path,
                params=params,
                headers=headers,
                timeout=httpx.Timeout(None, connect=connect_timeout),
                extensions=self._extensions,
            ) as response:
                stream = HTTPStream(
                    response.status_code,
                    dict(response.headers.items()),
                    _HttpxBody(response, what),
                )
                try:
                    yield stream
                finally:
                    await stream._close()
        except httpx.RequestError as exc:
            # Raised while connecting, or while closing. Errors of reading the body are
            # converted where it is read, so nothing of the library leaks from the caller's block.
            raise _connection_error(exc, what) from exc
        finally:
            await self._leave()

    def _enter(self, what: str) -> None:
        if self._closed:
            # Only possible for a caller that kept a session past its retirement; the error
            # is retriable, and the retry picks the current credentials.
            raise APIConnectionError(f"{what}: the HTTP session is already closed")
        self._active += 1

    async def _leave(self) -> None:
        self._active -= 1
        if self._retired and self._active == 0:
            await self.aclose()

    async def retire(self) -> None:
        """Close now if idle, or else when the last request in flight finishes."""
        self._retired = True
        if self._active == 0:
            await self.aclose()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Closing sockets must not be skipped because the caller is being cancelled.
        if self._lean is not None:
            for pool in self._lean:
                pool.aclose()
            return
        assert self._requests is not None
        assert self._streams is not None
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await self._requests.aclose()
            await self._streams.aclose()


class SessionPool:
    """One :class:`HTTPSession` per set of credentials, created on first use."""

    def __init__(self) -> None:
        self._sessions: dict[tuple[ConnectionInfo, bool], HTTPSession] = {}
        self._retired: list[HTTPSession] = []

    def get(self, info: ConnectionInfo, *, trust_env: bool = False) -> HTTPSession:
        key = (info, trust_env)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = HTTPSession(info, trust_env=trust_env)
        return session

    async def discard(self, info: ConnectionInfo) -> None:
        """Forget the sessions of these credentials; they close once their requests are done."""
        for key in [key for key in self._sessions if key[0] == info]:
            session = self._sessions.pop(key)
            self._retired.append(session)
            await session.retire()

    async def aclose(self) -> None:
        sessions = [*self._sessions.values(), *self._retired]
        self._sessions.clear()
        self._retired.clear()
        for session in sessions:
            await session.aclose()
