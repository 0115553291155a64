"""httpx under the API client for operator code: the one module of the package importing it.

Imported only when a client sends its first request, so an operator whose handlers never
call the API never loads httpx. One httpx client per set of credentials (its connections
carry that identity); httpx's own errors never leave this module: they become the package's
(``APIConnectionError``, ``APITimeoutError``, ``APIProtocolError``), and bodies are read
under a size limit, decompressed size included. Redirects are never followed (the
credentials would go with them): they come back as ``APIRedirectError``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, NamedTuple

import anyio
import httpx

from trioperator._client.apiclient.calls import Call
from trioperator._client.apiclient.settings import ClientSettings
from trioperator._client.credentials import ConnectionInfo
from trioperator._client.errors import (
    APIConnectionError,
    APIProtocolError,
    APIResponseTooLargeError,
    APITimeoutError,
)
from trioperator._client.tls import build_ssl_context
from trioperator._version import __version__
from trioperator._wire.watch import LineSplitter, LineTooLongError

__all__ = ["AsyncSession", "Received", "SyncSession"]

USER_AGENT = f"trioperator/{__version__} (api client; httpx/{httpx.__version__})"


class Received(NamedTuple):
    """A whole response: its status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


def _client_options(info: ConnectionInfo, settings: ClientSettings) -> dict[str, Any]:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    headers.update(info.as_http_headers())
    https = info.server.lower().startswith("https:")
    return {
        "base_url": info.server.rstrip("/"),
        "headers": headers,
        # The same TLS context as the operator's own connections: CA, client certificate,
        # `insecure`. Plain-HTTP servers (tests, local proxies) need none.
        "verify": build_ssl_context(info) if https else False,
        "timeout": httpx.Timeout(
            settings.request_timeout,
            connect=settings.connect_timeout,
            pool=settings.request_timeout,
        ),
        "follow_redirects": False,
        "trust_env": info.trust_env,
        "proxy": info.proxy_url,
    }


def _request(
    client: httpx.AsyncClient | httpx.Client, call: Call, sni: str | None
) -> httpx.Request:
    headers = {"Content-Type": call.content_type} if call.content_type else None
    return client.build_request(
        call.method,
        call.path,
        params=call.params or None,
        content=call.content,
        headers=headers,
        extensions={"sni_hostname": sni} if sni else None,
    )


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """httpx's errors (and a total deadline's ``TimeoutError``) as the package's."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise APITimeoutError(f"{what}: timed out ({exc.__class__.__name__})") from exc
    except (httpx.DecodingError, httpx.LocalProtocolError, httpx.UnsupportedProtocol) as exc:
        raise APIProtocolError(f"{what}: {exc.__class__.__name__}: {exc}") from exc
    except httpx.TransportError as exc:
        raise APIConnectionError(f"{what}: {exc.__class__.__name__}: {exc}") from exc
    except httpx.InvalidURL as exc:
        raise APIProtocolError(f"{what}: cannot connect: {exc}") from exc


def _stream_timeout(settings: ClientSettings) -> dict[str, float | None]:
    """A watch waits for data up to its idle limit, not the regular requests' timeout."""
    timeout = httpx.Timeout(
        settings.request_timeout,
        connect=settings.connect_timeout,
        read=settings.watch_idle_timeout,
    )
    return timeout.as_dict()


def _too_large(what: str, limit: int) -> APIResponseTooLargeError:
    return APIResponseTooLargeError(
        f"{what}: the response is larger than {limit} bytes (ClientSettings.max_response_size)",
        limit=limit,
    )


def _lines_too_long(what: str, exc: LineTooLongError) -> APIResponseTooLargeError:
    return APIResponseTooLargeError(
        f"{what}: {exc}, over the limit of one watch event (ClientSettings.max_line_size)",
        limit=exc.limit,
    )


async def _unwind(response: httpx.Response, chunks: AsyncIterator[bytes]) -> None:
    """Close a response whose body is abandoned midway, and end its chain of generators.

    httpx reads bodies through nested async generators; one left suspended is finalized
    later by the garbage collector, outside of any task (and trio warns of it). Iterating
    again after the connection is closed makes the innermost one fail, which ends them all,
    now; only what was already received can come before that.
    """
    with anyio.CancelScope(shield=True):
        await response.aclose()
        with contextlib.suppress(Exception):
            async for _ in chunks:
                pass


class AsyncStream:
    """A watch response being received: its status, and its body as lines."""

    def __init__(self, response: httpx.Response, what: str, settings: ClientSettings) -> None:
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers
        self._response = response
        self._chunks = response.aiter_bytes()
        self._splitter = LineSplitter(settings.max_line_size)
        self._what = what
        self._idle = settings.watch_idle_timeout
        self._done = False

    async def read(self, limit: int) -> bytes:
        """The whole body (of an error answer), at most ``limit`` bytes."""
        body = bytearray()
        with _translated(self._what):
            async for chunk in self._chunks:
                body += chunk
                if len(body) > limit:
                    self._done = True
                    await _unwind(self._response, self._chunks)
                    raise _too_large(self._what, limit)
        self._done = True
        return bytes(body)

    async def next_line(self) -> bytes | None:
        """The next non-blank line, or ``None`` when the server has ended the stream."""
        while (line := self._splitter.pop()) is None:
            if self._done:
                return None
            try:
                with _translated(self._what):
                    with anyio.fail_after(self._idle):
                        chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self._done = True
                self._splitter.finish()
                continue
            except TimeoutError as exc:
                raise APITimeoutError(f"{self._what}: no data for {self._idle} s") from exc
            try:
                self._splitter.feed(chunk)
            except LineTooLongError as exc:
                self._done = True
                await _unwind(self._response, self._chunks)
                raise _lines_too_long(self._what, exc) from exc
        return line

    async def aclose(self) -> None:
        if self._done:
            await self._response.aclose()
        else:
            self._done = True
            await _unwind(self._response, self._chunks)


class AsyncSession:
    """An ``httpx.AsyncClient`` for one set of credentials (works on trio and asyncio)."""

    def __init__(self, info: ConnectionInfo, settings: ClientSettings) -> None:
        self._settings = settings
        self._sni = info.tls_server_name
        self._client = httpx.AsyncClient(**_client_options(info, settings))

    async def send(self, call: Call) -> Received:
        settings = self._settings
        limit = settings.max_response_size
        request = _request(self._client, call, self._sni)
        try:
            with _translated(call.what), anyio.fail_after(settings.request_timeout):
                response = await self._client.send(request, stream=True)
                chunks = response.aiter_bytes()
                complete = False
                try:
                    body = bytearray()
                    async for chunk in chunks:
                        body += chunk
                        if len(body) > limit:
                            raise _too_large(call.what, limit)
                    complete = True
                finally:
                    if complete:
                        await response.aclose()
                    else:
                        await _unwind(response, chunks)
        except TimeoutError as exc:
            if isinstance(exc, APITimeoutError):
                raise
            raise APITimeoutError(
                f"{call.what}: no complete response in {settings.request_timeout} s"
            ) from exc
        return Received(response.status_code, response.headers, bytes(body))

    @contextlib.asynccontextmanager
    async def stream(self, call: Call) -> AsyncIterator[AsyncStream]:
        """The response of a watch, its body unread; closed when the block ends."""
        request = _request(self._client, call, self._sni)
        request.extensions["timeout"] = _stream_timeout(self._settings)
        with _translated(call.what):
            with anyio.fail_after(self._settings.request_timeout):
                response = await self._client.send(request, stream=True)
        stream = AsyncStream(response, call.what, self._settings)
        try:
            yield stream
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()


class SyncStream:
    """A watch response being received in a thread: its status, and its body as lines."""

    def __init__(self, response: httpx.Response, what: str, settings: ClientSettings) -> None:
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers
        self._response = response
        self._chunks = response.iter_bytes()
        self._splitter = LineSplitter(settings.max_line_size)
        self._what = what
        self._done = False

    def read(self, limit: int) -> bytes:
        body = bytearray()
        with _translated(self._what):
            for chunk in self._chunks:
                body += chunk
                if len(body) > limit:
                    raise _too_large(self._what, limit)
        return bytes(body)

    def next_line(self) -> bytes | None:
        while (line := self._splitter.pop()) is None:
            if self._done:
                return None
            # The idle limit is the read timeout of the stream's client (see SyncSession).
            with _translated(self._what):
                chunk = next(self._chunks, None)
            if chunk is None:
                self._done = True
                self._splitter.finish()
                continue
            try:
                self._splitter.feed(chunk)
            except LineTooLongError as exc:
                self._done = True
                raise _lines_too_long(self._what, exc) from exc
        return line

    def close(self) -> None:
        self._response.close()


class SyncSession:
    """An ``httpx.Client`` for one set of credentials, for code in threads."""

    def __init__(self, info: ConnectionInfo, settings: ClientSettings) -> None:
        self._settings = settings
        self._sni = info.tls_server_name
        self._client = httpx.Client(**_client_options(info, settings))

    def send(self, call: Call) -> Received:
        settings = self._settings
        limit = settings.max_response_size
        request = _request(self._client, call, self._sni)
        # No cancel scopes in threads: the total time is checked between the chunks, each of
        # which is bounded by the read timeout.
        deadline = time.monotonic() + settings.request_timeout
        with _translated(call.what):
            response = self._client.send(request, stream=True)
            try:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise _too_large(call.what, limit)
                    if time.monotonic() > deadline:
                        raise APITimeoutError(
                            f"{call.what}: no complete response in {settings.request_timeout} s"
                        )
            finally:
                response.close()
        return Received(response.status_code, response.headers, bytes(body))

    @contextlib.contextmanager
    def stream(self, call: Call) -> Iterator[SyncStream]:
        request = _request(self._client, call, self._sni)
        request.extensions["timeout"] = _stream_timeout(self._settings)
        with _translated(call.what):
            response = self._client.send(request, stream=True)
        stream = SyncStream(response, call.what, self._settings)
        try:
            yield stream
        finally:
            stream.close()

    def close(self) -> None:
        self._client.close()
