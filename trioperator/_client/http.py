"""HTTP sessions to the API server: the interface the rest of the package talks HTTP through.

Everything above this module sees a small interface that names no HTTP library:
:class:`HTTPSession` with :meth:`~HTTPSession.request` (a fully read :class:`HTTPResponse`) and
:meth:`~HTTPSession.stream` (an :class:`HTTPStream` whose body is read as lines). Failures without
an HTTP response come out as :class:`~trioperator._client.errors.APIConnectionError` (or
:class:`~trioperator._client.errors.APITimeoutError`); no type of the transport leaks out.

Below it, the HTTP/1.1 client of :mod:`~trioperator._client.transport` does the work (trio
streams, h11 writing requests, httptools parsing responses, its own TLS stream), for direct
connections and through HTTP(S) proxies alike; this module chooses the proxy, the credentials'
headers and the limits, and is the transport's only user. Which modules may import h11 and
httptools is an import-linter contract (pyproject.toml).

Proxies: the kubeconfig's ``proxy-url``, or with ``trust_env`` the environment's
``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` and ``NO_PROXY`` (read as Python's ``urllib`` does).

Timeouts: the transport enforces only the connect timeout (it knows when a TCP/TLS handshake is
happening); the total deadline of a regular request is a trio cancel scope, so it follows the
trio clock (MockClock in tests) and cancels cleanly. Streams get no library read timeout at all:
the watcher bounds them with its own scopes (inactivity, client timeout).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import math
import netrc
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Protocol
from urllib.parse import quote, urlencode, urlsplit

import trio

from trioperator._client.credentials import ConnectionInfo
from trioperator._client.errors import (
    APIConnectionError,
    APIProtocolError,
    APIResponseTooLargeError,
    APITimeoutError,
)
from trioperator._client.tls import build_proxy_ssl_context, build_ssl_context
from trioperator._client.transport.origins import Origin, Proxy
from trioperator._client.transport.pool import TransportPool
from trioperator._util.ordering import OrderedSlots, current_ticket
from trioperator._version import __version__
from trioperator._wire.watch import MAX_LINE_BYTES, LineSplitter, LineTooLongError

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

MAX_CONCURRENT_REQUESTS = 16
"""Regular requests in flight at once per credentials; the rest wait, oldest work first.

Bounded, so a burst of workers cannot open thousands of sockets; the idle connections kept
for reuse match it, so a busy operator reuses connections instead of churning handshakes.
More in flight does not make a busy API server answer sooner: the queue moves into it (and
each extra connection is one more TLS handshake on both sides). Against the local API server
(benchmarks/README.md), 16 handled bursts faster than 32, with less of the server's CPU per
object, and as fast as 8 or 12; 16 leaves room for a server with longer round trips.
Watch streams hold their connection for minutes: they have their own, unbounded pool, so the
101st watcher (or every patch behind 100 watchers) never waits for a free connection."""

_KEEPALIVE_EXPIRY = 30.0
_STREAM_KEEPALIVE = 10

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

    async def read(self, max_size: int | None = None) -> bytes:
        """All the remaining bytes; APIResponseTooLargeError if more than ``max_size``."""
        ...

    async def unwind(self) -> None:
        """Stop receiving: the body is abandoned before its end."""
        ...


class HTTPStream:
    """A response whose body is being streamed; valid only inside :meth:`HTTPSession.stream`.

    ``max_line`` bounds every line of the body, and the whole body when it is :meth:`read`.
    """

    def __init__(
        self,
        status: int,
        headers: Mapping[str, str],
        body: _Body,
        *,
        what: str = "",
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        self._body = body
        self._lines: _LineIterator | None = None
        self._what = what
        self._max_line = max_line
        self.status = status
        self.headers = headers

    async def read(self) -> bytes:
        """Read the whole (remaining) body: used for error responses, which are small."""
        return await self._body.read(self._max_line)

    def lines(self) -> AsyncIterator[bytes]:
        """The body split on ``\\n``: complete lines up to ``max_line`` bytes, blank ones skipped.

        An unterminated last line is delivered when the server ends the body normally. If the
        connection breaks, :class:`APIConnectionError` is raised and the partial line is lost;
        a longer line raises :class:`APIResponseTooLargeError` (the stream cannot go on).
        """
        if self._lines is None:
            self._lines = _LineIterator(self._body, self._what, self._max_line)
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

    __slots__ = ("_body", "_done", "_splitter", "_what")

    def __init__(self, body: _Body, what: str, max_line: int) -> None:
        self._body = body
        self._what = what
        self._splitter = LineSplitter(max_line)
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
                try:
                    splitter.feed(chunk)
                except LineTooLongError as exc:
                    # Nothing after it can be trusted to start a line: the stream ends here.
                    self._done = True
                    await self._body.unwind()
                    raise APIResponseTooLargeError(
                        f"{self._what}: {exc}, over the limit of one watch event"
                        " (settings.networking.max_response_size)",
                        limit=exc.limit,
                    ) from exc
        return line

    async def unwind(self) -> None:
        if not self._done:
            self._done = True
            await self._body.unwind()


def _target(path: str, params: Params) -> str:
    """The path and the query of a request."""
    if params:
        return f"{path}?{urlencode(params)}"
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


def _proxy_url(server: str, info: ConnectionInfo, trust_env: bool) -> str | None:
    """The proxy to the server: the configured one, or else the environment's if trusted."""
    if info.proxy_url:
        return info.proxy_url
    if not trust_env:
        return None
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        # What urllib would find: no proxy. Checked first, so that an operator without proxies
        # never imports urllib.request (with email and http.client: ~40 modules).
        return None
    import urllib.request

    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(server)
    # The host with its port, if any: NO_PROXY entries may name either.
    # (stdlib, but missing from the type stubs)
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if bypass(parts.netloc.rpartition("@")[2], proxies):
        return None
    proxy = proxies.get(parts.scheme) or proxies.get("all") or None
    return None if proxy is None else _with_netrc_credentials(proxy)


def _with_netrc_credentials(url: str) -> str:
    """The proxy URL with the user and password of its host in ``~/.netrc`` (or ``$NETRC``),
    unless it names its own: as HTTP clients with ``trust_env`` do."""
    parts = urlsplit(url)
    if parts.username is not None or not parts.hostname:
        return url
    try:
        found = netrc.netrc(os.environ.get("NETRC") or None).authenticators(parts.hostname)
    except FileNotFoundError:
        return url
    except (OSError, netrc.NetrcParseError) as exc:
        logger.warning(f"Proxy credentials from netrc are ignored: {exc}")
        return url
    if found is None:
        return url
    login, _, password = found
    userinfo = f"{quote(login, safe='')}:{quote(password or '', safe='')}@"
    return parts._replace(netloc=userinfo + parts.netloc).geturl()


def _origin(
    url: str, info: ConnectionInfo, verify: ssl.SSLContext | None, proxy_url: str | None
) -> Origin:
    """Where the connections go; ValueError for a URL that cannot be used."""
    parts = urlsplit(url)
    return Origin(
        parts.scheme,
        parts.hostname or "",
        parts.port,
        prefix=parts.path,
        ssl_context=verify,
        server_name=info.tls_server_name,
        proxy=None if proxy_url is None else _proxy(proxy_url, info),
    )


def _proxy(url: str, info: ConnectionInfo) -> Proxy:
    tls = urlsplit(url).scheme.lower() == "https"
    return Proxy(url, ssl_context=build_proxy_ssl_context(info) if tls else None)


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
        # Compressed responses: the API server gzips large lists only (>128 KiB), where the
        # bytes saved are worth the CPU.
        headers["Accept-Encoding"] = "gzip"
        self._headers = headers
        self._header_names = {name.lower() for name in headers}
        # Building a TLS context loads CA certificates, which is slow; for plain-HTTP servers
        # (tests, local proxies) there is none.
        verify = build_ssl_context(info) if self.base_url.startswith("https:") else None
        # Both pools share one origin. A URL that cannot be used fails every request with
        # the reason (not retried: it stays unusable), rather than the session's creation.
        self._pools: tuple[TransportPool, TransportPool] | None = None
        self._unusable: str | None = None
        try:
            proxy_url = _proxy_url(self.base_url, info, trust_env)
            origin = _origin(self.base_url, info, verify, proxy_url)
        except ValueError as exc:
            self._unusable = str(exc)
        else:
            self._pools = (
                TransportPool(
                    origin,
                    max_idle=MAX_CONCURRENT_REQUESTS,
                    keepalive_expiry=_KEEPALIVE_EXPIRY,
                    read_ahead=False,
                ),
                TransportPool(
                    origin, max_idle=_STREAM_KEEPALIVE, keepalive_expiry=_KEEPALIVE_EXPIRY
                ),
            )
        self._slots = OrderedSlots(MAX_CONCURRENT_REQUESTS)
        self._active = 0
        self._retired = False
        self._closed = False

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
        max_size: int | None = None,
    ) -> HTTPResponse:
        """Send a request and read the whole response (whatever its status).

        ``timeout`` bounds everything (connecting, sending, waiting, reading) by trio's clock;
        ``max_size`` the body, as sent and decompressed (:class:`APIResponseTooLargeError`).
        """
        target = _target(path, params)
        what = f"{method} {self.base_url}{target}"
        self._enter(what)
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
                # The oldest work first (see _util/ordering.py). Its ticket is spent on its
                # first request: a handler's result (the first patch) is written in the order
                # the objects came, and the follow-up writes of a cycle queue as they come, so
                # that they do not hold back the results of the objects waiting behind.
                ticket = current_ticket.get()
                if ticket is not None:
                    current_ticket.set(None)
                # A free slot is taken without a trip through the scheduler: the request is
                # checked for cancellation before it is sent, and waits for the network next
                # (a schedule point).
                if not self._slots.try_acquire():
                    await self._slots.acquire(ticket)
                try:
                    status, response_headers, body = await self._pools_for(what)[0].request(
                        method,
                        target,
                        what,
                        headers=self._merged_headers(headers),
                        content=content,
                        connect_timeout=connect_timeout,
                        max_size=max_size,
                    )
                finally:
                    self._slots.release()
                return HTTPResponse(status, response_headers, body)
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
        max_line: int = MAX_LINE_BYTES,
    ) -> AsyncIterator[HTTPStream]:
        """Send a request and give the response with its body unread, to be read as lines.

        There is no total or read timeout here: the caller wraps this in its own cancel scopes.
        ``max_line`` bounds each line (and the body, if read whole: e.g. an error's).
        """
        target = _target(path, params)
        what = f"{method} {self.base_url}{target}"
        self._enter(what)
        try:
            async with self._pools_for(what)[1].stream(
                method,
                target,
                what,
                headers=self._merged_headers(headers),
                connect_timeout=connect_timeout,
            ) as response:
                # An abandoned body needs no unwinding here: leaving this block closes the
                # connection unless the body was read to its end.
                stream = HTTPStream(
                    response.status, response.headers, response, what=what, max_line=max_line
                )
                try:
                    yield stream
                finally:
                    await stream._close()
        finally:
            await self._leave()

    def _pools_for(self, what: str) -> tuple[TransportPool, TransportPool]:
        if self._pools is None:
            raise APIProtocolError(f"{what}: cannot connect: {self._unusable}")
        return self._pools

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
        # Closing needs no waiting: nothing to skip when the caller is being cancelled.
        if self._pools is not None:
            for pool in self._pools:
                pool.aclose()


class SessionPool:
    """One :class:`HTTPSession` per set of credentials, created on first use."""

    def __init__(self) -> None:
        self._sessions: dict[tuple[ConnectionInfo, bool], HTTPSession] = {}
        self._retired_sessions: list[HTTPSession] = []
        # The last one given, by the identity of its credentials: asked for before every
        # request, almost always with the same object, whose hash covers all of its fields.
        self._last: tuple[ConnectionInfo, bool, HTTPSession] | None = None

    def get(self, info: ConnectionInfo, *, trust_env: bool = False) -> HTTPSession:
        last = self._last
        if last is not None and last[0] is info and last[1] == trust_env:
            return last[2]
        key = (info, trust_env)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = HTTPSession(info, trust_env=trust_env)
        self._last = (info, trust_env, session)
        return session

    async def discard(self, info: ConnectionInfo) -> None:
        """Forget the sessions of these credentials; they close once their requests are done."""
        self._last = None
        for key in [key for key in self._sessions if key[0] == info]:
            session = self._sessions.pop(key)
            self._retired_sessions.append(session)
            await session.retire()

    async def aclose(self) -> None:
        self._last = None
        sessions = [*self._sessions.values(), *self._retired_sessions]
        self._sessions.clear()
        self._retired_sessions.clear()
        for session in sessions:
            await session.aclose()
