"""HTTP sessions to the API server: the one module that knows the HTTP library.

Everything above this module sees a small, library-independent interface:
:class:`HTTPSession` with :meth:`~HTTPSession.request` (a fully read :class:`HTTPResponse`) and
:meth:`~HTTPSession.stream` (an :class:`HTTPStream` whose body is read as lines). Failures without
an HTTP response come out as :class:`~trioperator._client.errors.APIConnectionError` (or
:class:`~trioperator._client.errors.APITimeoutError`); no type of the HTTP library leaks out.

"httpx" in this project means the httpx API, served by the httpx2 fork (DESIGN.md §7 measured
it clearly faster under trio). Swapping the implementation touches this file only.

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
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx2 as httpx
import trio

from trioperator._client.credentials import ConnectionInfo
from trioperator._client.errors import APIConnectionError, APITimeoutError
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

_REQUEST_LIMITS = httpx.Limits(
    max_connections=MAX_CONCURRENT_REQUESTS,
    max_keepalive_connections=MAX_CONCURRENT_REQUESTS,
    keepalive_expiry=30.0,
)
# Watch streams hold their connection for minutes. They get their own, unbounded pool: in a
# shared bounded pool, the 101st watcher (or every patch behind 100 watchers) would wait for a
# free connection forever -- the silent "operator stopped reacting" failure.
_STREAM_LIMITS = httpx.Limits(
    max_connections=None,
    max_keepalive_connections=10,
    keepalive_expiry=30.0,
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


class HTTPStream:
    """A response whose body is being streamed; valid only inside :meth:`HTTPSession.stream`."""

    def __init__(self, response: httpx.Response, what: str) -> None:
        self._response = response
        self._what = what
        self._lines: _LineIterator | None = None
        self.status: int = response.status_code
        self.headers: Mapping[str, str] = dict(response.headers.items())

    async def read(self) -> bytes:
        """Read the whole (remaining) body: used for error responses, which are small."""
        try:
            return await self._response.aread()
        except httpx.RequestError as exc:
            raise _connection_error(exc, self._what) from exc

    def lines(self) -> AsyncIterator[bytes]:
        """The body split on ``\\n``: complete lines of any length, blank lines skipped.

        An unterminated last line is delivered when the server ends the body normally. If the
        connection breaks, :class:`APIConnectionError` is raised and the partial line is lost.
        """
        if self._lines is None:
            self._lines = _LineIterator(self._response.aiter_bytes(), self._what)
        return self._lines

    async def _close(self) -> None:
        lines, self._lines = self._lines, None
        if lines is not None:
            await lines.unwind()


class _LineIterator:
    """An async iterator of lines over the library's byte chunks.

    A plain class, not an async generator: an abandoned generator would be finalised later by
    the garbage collector, outside of the task and the cancel scopes that own the stream.
    """

    __slots__ = ("_chunks", "_done", "_splitter", "_what")

    def __init__(self, chunks: AsyncIterator[bytes], what: str) -> None:
        self._chunks = chunks
        self._what = what
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
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._done = True
                splitter.finish()
                continue
            except httpx.RequestError as exc:
                self._done = True
                raise _connection_error(exc, self._what) from exc
            splitter.feed(chunk)
        return line

    async def unwind(self) -> None:
        """Finish the library's byte iterator, when the body is abandoned before its end.

        The library reads a body through several nested async generators; closing only the
        outermost leaves the inner ones suspended, to be finalised later (with a warning) by
        the garbage collector. One more pull under a cancelled scope makes the innermost read
        raise ``Cancelled``, which finishes every generator of the chain, here and now. Only
        data that is already buffered is consumed on the way.
        """
        if self._done:
            return
        self._done = True
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                while True:
                    await anext(self._chunks)
            except (StopAsyncIteration, httpx.RequestError):
                pass


def _connection_error(exc: Exception, what: str) -> APIConnectionError:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"{what}: {type(exc).__name__}: {text}")
    return APIConnectionError(f"{what}: {type(exc).__name__}: {text}")


@contextlib.contextmanager
def _temporary_file(data: bytes) -> Iterator[str]:
    """A private (0600) file holding ``data``, removed as soon as the block ends."""
    fd, path = tempfile.mkstemp(prefix="trioperator-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def build_ssl_context(info: ConnectionInfo) -> ssl.SSLContext:
    """The TLS context for a connection: cluster CA, client certificate, verification mode.

    With a cluster CA given, only that CA is trusted (as kubectl does); without one, the
    system's trust store is used.
    """
    cadata: str | bytes | None = None
    if info.ca_data:
        # PEM is text; anything else is taken as DER, which ``cadata`` accepts as bytes.
        cadata = info.ca_data.decode("ascii") if b"-----BEGIN" in info.ca_data else info.ca_data
    context = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH,
        cafile=info.ca_path or None,
        cadata=cadata,
    )
    if info.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE

    with contextlib.ExitStack() as stack:
        cert_path = info.certificate_path
        key_path = info.private_key_path
        if info.certificate_data:
            cert_path = stack.enter_context(_temporary_file(info.certificate_data))
        if info.private_key_data:
            key_path = stack.enter_context(_temporary_file(info.private_key_data))
        if cert_path:
            context.load_cert_chain(cert_path, key_path or None)
    return context


def _auth_header(info: ConnectionInfo) -> str | None:
    if info.token:
        return f"{info.scheme or 'Bearer'} {info.token}"
    if info.username is not None and info.password is not None:
        pair = f"{info.username}:{info.password}".encode()
        return f"Basic {base64.b64encode(pair).decode('ascii')}"
    if info.scheme:
        return info.scheme
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
        self._requests = self._make_client(verify, headers, _REQUEST_LIMITS, trust_env)
        self._streams = self._make_client(verify, headers, _STREAM_LIMITS, trust_env)
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
        url = self.base_url + path
        if params:
            url += "?" + str(httpx.QueryParams(dict(params)))
        return url

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
        what = f"{method} {self.url(path, params)}"
        self._enter(what)
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
                async with self._slots:
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
        what = f"{method} {self.url(path, params)}"
        self._enter(what)
        try:
            async with self._streams.stream(
                method,
                path,
                params=params,
                headers=headers,
                timeout=httpx.Timeout(None, connect=connect_timeout),
                extensions=self._extensions,
            ) as response:
                stream = HTTPStream(response, what)
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
