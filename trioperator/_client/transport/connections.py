"""One HTTP/1.1 connection: its stream, reading responses into a reader, staleness, closing."""

from __future__ import annotations

import contextlib
import select
from typing import Final

import trio

from trioperator._client.errors import (
    APIConnectionError,
    APIProtocolError,
    APIResponseTooLargeError,
)
from trioperator._client.transport.responses import (
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    PARSE_ERRORS,
    ResponseReader,
)
from trioperator._client.transport.tls_stream import TLSStream

__all__ = ["READ_SIZE", "Connection", "close_quietly", "describe"]

READ_SIZE: Final = 65536


class Connection:
    """One HTTP/1.1 connection: a trio stream, and the request in flight (for error messages)."""

    __slots__ = ("_poller", "idle_since", "opened", "stream", "ticket_due", "what")

    def __init__(self, stream: trio.abc.Stream, *, ticket_due: bool = False) -> None:
        self.stream = stream
        self._poller: select.poll | None = None  # for stale()
        self.idle_since = 0.0
        self.opened = trio.current_time()
        self.what = ""  # the request in flight, for error messages
        # A new TLS connection to the origin itself (a TLSStream), whose session ticket is
        # still to be kept for the next ones (see Origin.tls_session).
        self.ticket_due = ticket_due

    def error(self, text: str) -> APIConnectionError:
        self.close()
        return APIConnectionError(f"{self.what}: {text}")

    async def receive_into(self, reader: ResponseReader) -> None:
        """Read what the server sent (at least one byte, or its end) into the response."""
        try:
            data = await self.stream.receive_some(READ_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise self.error(describe(exc)) from exc
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
        except PARSE_ERRORS as exc:
            self.close()
            text = str(exc) or type(exc).__name__
            raise APIProtocolError(f"{self.what}: malformed HTTP response: {text}") from exc
        # The limits of what comes without a body are checked once per read: a read is at
        # most READ_SIZE bytes, so nothing grows by more than that past a limit.
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

    async def receive_head(self, reader: ResponseReader) -> None:
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
            raise self.error(describe(exc)) from exc

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
            close_quietly(self.stream)


def close_quietly(stream: trio.abc.Stream) -> None:
    if isinstance(stream, TLSStream):
        stream.close()
    elif isinstance(stream, trio.SocketStream):
        stream.socket.close()
    elif isinstance(stream, trio.SSLStream):
        close_quietly(stream.transport_stream)  # TLS through a TLS proxy: the outer stream


def describe(exc: BaseException) -> str:
    if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc) or "the connection was closed"
    return f"{type(exc).__name__}: {text}"
