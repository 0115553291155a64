"""A small HTTP/1.1 server on trio and h11: the webhooks, liveness and metrics endpoints, and
the fake API of the test kit.

One request handler, keep-alive, fixed or streamed (chunked) response bodies, optional TLS.
h11 parses and frames; this module moves bytes and enforces :class:`ServingSettings`, because the
operator's endpoints face peers it does not control (anything inside the cluster can connect):

* every wait on a peer has a deadline: the TLS handshake, the wait for a request (idle
  keep-alive), a request's head from its first byte, its body from the end of the head, and
  the writing of each response;
* the connections of one listener are capped: the excess is accepted and closed at once, so it
  costs no descriptor for longer than a moment and the operator's own API connections never
  starve; running out of descriptors anyway is logged once in a while, not per attempt;
* request heads are bounded by h11 (431), bodies by their declared ``Content-Length`` before a
  byte of them is read (413), and all bodies in memory at once by a budget (a request waits for
  its share within its body deadline);
* a malformed request is answered with ``400`` and one log line, never a traceback;
* a request that arrives in many tiny pieces is refused, rather than read a byte per wake-up.

Why not a general-purpose server (hypercorn's trio worker): measured on loopback, it spent
2.5-3x this server's CPU per admission-sized request, and it has no per-listener connection
cap nor deadlines for a whole head or body (its timeouts are per read), which an attacker
trickling bytes walks around. See ``docs/admission.md`` ("Limits of the servers").
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import math
import socket
import ssl
import struct
from collections.abc import AsyncIterable, Awaitable, Callable
from functools import partial
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs, urlsplit

import h11
import trio

from trioperator._engine.settings import ServingSettings

__all__ = [
    "UNBOUNDED",
    "for_queries",
    "DropConnection",
    "Handler",
    "Request",
    "Response",
    "serve_http",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

_RECEIVE_CHUNK: Final = 64 * 1024

_TINY: Final = 512
"""Bytes: a read shorter than this is a tiny piece of a request ..."""

_MAX_TINY: Final = 200
"""... and a request that arrives in more tiny pieces than this is refused (400): a peer that
sends its bytes one at a time would otherwise cost a wake-up of the event loop per byte. Real
clients write a head or a body at once (TLS records of up to 16 KiB, TCP segments of ~1.4 KiB);
a handful of tiny reads per request is already rare."""

_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""Errors of ``accept()`` that mean "no resources now", not "the listener is broken"."""

_NOTICE_INTERVAL: Final = 10.0
"""Seconds between two log lines about refused connections or exhausted descriptors."""


UNBOUNDED: Final = ServingSettings(
    handshake_timeout=None,
    idle_timeout=None,
    header_timeout=None,
    body_timeout=None,
    send_timeout=None,
    max_connections=None,
    max_header_size=1024 * 1024,
    max_body_size=64 * 1024 * 1024,
    max_buffered=None,
)
"""For servers whose peers are the tests themselves (the fake API): no deadlines, no caps."""


def for_queries(limits: ServingSettings) -> ServingSettings:
    """The limits of a server that answers queries only (liveness, metrics): bodies of at
    most :data:`_FREE_BODY` bytes."""
    return dataclasses.replace(limits, max_body_size=min(limits.max_body_size, _FREE_BODY))


class DropConnection(Exception):
    """Raised by a handler or a streamed body to cut the connection without a proper reply."""


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    peer: Any = None
    """The TLS peer certificate (a dict as ``ssl`` returns it), when there is one."""

    def param(self, name: str, default: str | None = None) -> str | None:
        """The first value of a query parameter."""
        values = self.query.get(name)
        return values[0] if values else default


@dataclasses.dataclass
class Response:
    status: int = 200
    body: bytes | AsyncIterable[bytes] = b""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    content_type: str = "application/json"


Handler = Callable[[Request], Awaitable[Response]]


async def serve_http(
    handler: Handler,
    *,
    limits: ServingSettings,
    host: str | None = "127.0.0.1",
    port: int = 0,
    ssl_context: ssl.SSLContext | None = None,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` until cancelled; ``task_status.started()`` gets the bound listeners.

    ``host=None`` listens on every interface (IPv4 and IPv6 where available). Connections run
    in ``handler_nursery`` if given (so that cancelling this function only stops accepting new
    ones), else in this function's own. The cap on connections counts per listener; the budget
    of buffered bodies is shared by all of them.

    Use ``listeners[0].socket.getsockname()`` to learn the port when ``port=0``.
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    server = _Server(handler, limits)
    try:
        async with trio.open_nursery() as nursery:
            connections = handler_nursery if handler_nursery is not None else nursery
            for listener in listeners:
                accepting: trio.abc.Listener[Any] = listener
                if ssl_context is not None:
                    accepting = trio.SSLListener(listener, ssl_context, https_compatible=True)
                name = _describe(listener)
                nursery.start_soon(
                    partial(_accept, accepting, connections, server.serve, limits, name=name),
                    name=f"accepting on {name}",
                )
            task_status.started(listeners)
    finally:
        # Closed without a checkpoint: in a cancelled scope, the first checkpoint would raise
        # and leave the other listeners open.
        for listener in listeners:
            listener.socket.close()


def _describe(listener: trio.SocketListener) -> str:
    address = listener.socket.getsockname()
    return f"[{address[0]}]:{address[1]}" if ":" in address[0] else f"{address[0]}:{address[1]}"


class _Notices:
    """Log lines about a repeated condition at most every :data:`_NOTICE_INTERVAL` seconds,
    with how often it happened meanwhile: an attack must not flood the log."""

    def __init__(self) -> None:
        self._next = -math.inf
        self._count = 0

    def note(self, message: str) -> None:
        self._count += 1
        now = trio.current_time()
        if now >= self._next:
            logger.warning(f"{message} ({self._count} time(s) in the last period).")
            self._count = 0
            self._next = now + _NOTICE_INTERVAL


async def _accept(
    listener: trio.abc.Listener[Any],
    connections: trio.Nursery,
    serve_one: Callable[[trio.abc.Stream, _Slots], Awaitable[None]],
    limits: ServingSettings,
    *,
    name: str,
) -> None:
    slots = _Slots(limits.max_connections)
    refusals = _Notices()
    evictions = _Notices()
    shortages = _Notices()

    async def serve(stream: trio.abc.Stream) -> None:
        try:
            await serve_one(stream, slots)
        finally:
            slots.active -= 1

    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            if exc.errno not in _CAPACITY_ERRNOS:
                raise
            # The process is out of descriptors (or memory): the pending connections wait in
            # the kernel's backlog until others close.
            shortages.note(f"Cannot accept connections on {name}: {exc.strerror}")
            await trio.sleep(0.1)
            continue
        room = slots.make_room()
        if room is None:
            refusals.note(
                f"Refused connections on {name}: {limits.max_connections} are served already"
            )
            await trio.aclose_forcefully(stream)
            continue
        if room == "evicted":
            evictions.note(
                f"Closed connections on {name} that had not sent a request, to serve new ones "
                f"({limits.max_connections} were open)"
            )
        slots.active += 1
        connections.start_soon(serve, stream)


class _Slots:
    """The connections of one listener: how many there are, and which of them wait for a
    request (no head yet, or only part of one).

    When the listener is full, the one that has waited longest is closed to make room for the
    newcomer: a crowd of idle or slow connections cannot lock out the kubelet's probe or the
    API server, whose requests follow their connections at once. Connections that have served a
    request (the API server's kept-alive ones, between reviews) go only after those that never
    did. Only connections that are busy with requests (bodies, handlers, answers) count as
    full; then newcomers are refused.
    """

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.active = 0
        self.evicting = 0  # closing, but still counted in ``active``
        self.waiting: dict[_Connection, trio.CancelScope] = {}  # the oldest first

    def make_room(self) -> str | None:
        """Whether a new connection may be served: ``"free"``, ``"evicted"`` (a waiting one
        was closed for it), or ``None`` (it must be refused)."""
        if self.cap is None or self.active - self.evicting < self.cap:
            return "free"
        for proven in (False, True):
            for conn, scope in self.waiting.items():
                if conn.served == proven and not scope.cancel_called:
                    scope.cancel()
                    self.evicting += 1
                    return "evicted"
        return None


class _Budget:
    """Bytes of request bodies that may be in memory at once (``None``: unbounded).

    The first :data:`_FREE_BODY` bytes of every body are not counted: connections are capped,
    so small bodies cannot add up to much, and they never wait behind large ones. A body of
    unknown length (chunked) counts as one of the largest size allowed.
    """

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.free = total if total is not None else 0
        self._freed = trio.Event()

    async def take(self, size: int) -> int:
        """Wait until ``size`` bytes (at most the whole budget) are free and take them;
        return what was taken, to give back."""
        if self.total is None:
            return 0
        size = min(size, self.total)
        while self.free < size:
            await self._freed.wait()
        self.free -= size
        return size

    def give(self, size: int) -> None:
        if size:
            self.free += size
            self._freed.set()
            self._freed = trio.Event()


_FREE_BODY: Final = 64 * 1024
"""Bytes of each body not counted in the budget (see :class:`_Budget`)."""


class _Refusal(Exception):
    """A request answered with an error status, after which the connection is closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Silence(Exception):
    """A connection closed without a word: the peer left, or stayed silent between requests."""


class _Stalled(Exception):
    """A peer that does not take its answer: the connection is reset, not closed, so that the
    kernel drops the unsent rest instead of trying to deliver it for minutes."""


class _Server:
    """What the connections of one ``serve_http`` share."""

    def __init__(self, handler: Handler, limits: ServingSettings) -> None:
        self.handler = handler
        self.limits = limits
        self.budget = _Budget(limits.max_buffered)
        self.too_slow = _Notices()

    async def serve(self, stream: trio.abc.Stream, slots: _Slots) -> None:
        conn = _Connection(stream, self, slots)
        try:
            if isinstance(stream, trio.SSLStream):
                await conn.waiting(partial(conn.handshake, stream))
                if not conn.handshaken:
                    self.too_slow.note(
                        f"Closed TLS connections that did not finish the handshake "
                        f"within {self.limits.handshake_timeout} seconds"
                    )
                    return
            while await conn.serve_request():
                try:
                    conn.h11.start_next_cycle()
                except h11.LocalProtocolError:
                    return
        except _Refusal as refusal:
            if refusal.status == 408:
                self.too_slow.note(f"Answered 408 to slow requests: {refusal.message}")
            else:
                logger.warning(
                    f"Answered {refusal.status} to {_peer_name(stream)}: {refusal.message}"
                )
            await conn.refuse(refusal)
        except _Stalled:
            _reset(stream)
        except (_Silence, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:
            # A defect of this server must cost one connection, never the operator.
            logger.exception(f"Serving a connection from {_peer_name(stream)} failed.")
        finally:
            with trio.move_on_after(1) as cleanup:
                cleanup.shield = True
                await trio.aclose_forcefully(stream)


class _Connection:
    """One accepted connection: reads requests within their deadlines, writes responses."""

    def __init__(self, stream: trio.abc.Stream, server: _Server, slots: _Slots) -> None:
        self.stream = stream
        self.server = server
        self.slots = slots
        self.limits = server.limits
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_size)
        self.peer: Any = None
        self.handshaken = False
        self.tiny_reads = 0
        self.served = False  # a request was answered on this connection

    async def serve_request(self) -> bool:
        """Read, handle and answer one request; whether the connection may serve another."""
        self.tiny_reads = 0
        head = await self.read_head()
        if head is None:
            return False
        declared = _declared_length(head)
        limit = self.limits.max_body_size
        if declared is not None and declared > limit:
            raise _Refusal(413, f"The request's body of {declared} bytes exceeds {limit} bytes.")
        # The body's share of the budget is taken whole, before its first byte is read: a
        # request never holds a part while it waits for more (two such would wait for each
        # other), and until it has its share, its body waits in the kernel's buffers.
        deadline = _deadline(self.limits.body_timeout)
        chunked = declared is None and any(name == b"transfer-encoding" for name, _ in head.headers)
        share = max(0, (limit if chunked else declared or 0) - _FREE_BODY)
        taken = 0  # unset if the deadline passes while waiting
        with trio.move_on_at(deadline):
            taken = await self.server.budget.take(share)
        if share and not taken:
            raise _Refusal(503, "Too many large requests at once; retry later.")
        body = bytearray()
        try:
            await self.read_body(body, deadline)
            target = urlsplit(head.target.decode("latin-1"))
            request = Request(
                method=head.method.decode("ascii"),
                path=target.path,
                query=parse_qs(target.query, keep_blank_values=True),
                headers={k.decode("latin-1"): v.decode("latin-1") for k, v in head.headers},
                body=bytes(body),
                peer=self.peer,
            )
            try:
                response = await self.server.handler(request)
            except DropConnection:
                return False
            except Exception:
                logger.exception("HTTP handler failed for %s %s", request.method, request.path)
                response = Response(500, b'{"message": "internal server error"}')
            # The body's share of the budget is held until the answer is sent: the handler's
            # decoded copy of it lives that long.
            keep_going = await self.respond(response)
            self.served = True
        finally:
            self.server.budget.give(taken)
        return keep_going and self.h11.our_state is not h11.MUST_CLOSE

    async def receive(self, deadline: float) -> bytes:
        with trio.move_on_at(deadline):
            data = await self.stream.receive_some(_RECEIVE_CHUNK)
            if 0 < len(data) < _TINY:
                self.tiny_reads += 1
                if self.tiny_reads > _MAX_TINY:
                    raise _Refusal(400, "the request arrives in too many tiny pieces")
            return bytes(data)
        raise TimeoutError

    async def waiting(self, wait: Callable[[], Awaitable[_T]]) -> _T:
        """Wait for the peer (a handshake, a request's head) as a connection that the listener
        may close to make room for a newcomer (see :class:`_Slots`)."""
        scope = self.slots.waiting[self] = trio.CancelScope()
        try:
            with scope:
                return await wait()
        finally:
            del self.slots.waiting[self]
            if scope.cancel_called:
                self.slots.evicting -= 1
        raise _Silence  # closed to make room

    async def handshake(self, stream: trio.SSLStream[Any]) -> None:
        with trio.move_on_at(_deadline(self.limits.handshake_timeout)):
            await stream.do_handshake()
            self.peer = stream.getpeercert()
            self.handshaken = True

    async def read_head(self) -> h11.Request | None:
        """The next request's head; ``None`` when the peer closed between requests."""
        return await self.waiting(self._read_head)

    async def _read_head(self) -> h11.Request | None:
        deadline = _deadline(self.limits.idle_timeout)
        started = False
        while True:
            event = self._next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await self.receive(deadline)
                except TimeoutError:
                    if not started:
                        raise _Silence from None
                    raise _Refusal(408, "the request's head took too long") from None
                if not started and data:
                    started = True
                    deadline = _deadline(self.limits.header_timeout)
                self.h11.receive_data(data)  # b"" marks EOF for h11
            elif isinstance(event, h11.ConnectionClosed):
                return None
            elif isinstance(event, h11.Request):
                return event
            else:  # pragma: no cover -- h11 gives a server nothing else before a Request
                raise _Refusal(400, f"Unexpected {type(event).__name__} before a request.")

    async def read_body(self, body: bytearray, deadline: float) -> None:
        """Read the body of the request whose head was read into ``body``."""
        limit = self.limits.max_body_size
        if self.h11.they_are_waiting_for_100_continue:
            await self.send(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        while True:
            event = self._next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await self.receive(deadline)
                except TimeoutError:
                    raise _Refusal(408, "the request's body took too long") from None
                self.h11.receive_data(data)
            elif isinstance(event, h11.Data):
                if len(body) + len(event.data) > limit:  # only a chunked body gets here
                    raise _Refusal(413, f"The request's body exceeds {limit} bytes.")
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return
            elif isinstance(event, h11.ConnectionClosed):
                raise _Silence
            else:  # pragma: no cover
                raise _Refusal(400, f"Unexpected {type(event).__name__} in a request's body.")

    def _next_event(self) -> Any:
        try:
            return self.h11.next_event()
        except h11.RemoteProtocolError as exc:
            raise _Refusal(exc.error_status_hint, f"Malformed request: {exc}") from None

    async def send(self, data: bytes) -> None:
        with trio.move_on_at(_deadline(self.limits.send_timeout)):
            await self.stream.send_all(data)
            return
        raise _Stalled

    async def respond(self, response: Response) -> bool:
        """Send one response; ``False`` if the connection must be dropped afterwards."""
        headers = [("content-type", response.content_type), *response.headers.items()]
        if isinstance(response.body, bytes):
            headers.append(("content-length", str(len(response.body))))
            # One write for the whole response: one TLS record and one wake-up of the client
            # instead of one per part.
            data = self.h11.send(h11.Response(status_code=response.status, headers=headers))
            if response.body:
                data += self.h11.send(h11.Data(data=response.body))
            data += self.h11.send(h11.EndOfMessage())
            await self.send(data)
            return True
        headers.append(("transfer-encoding", "chunked"))
        await self.send(self.h11.send(h11.Response(status_code=response.status, headers=headers)))
        try:
            async for chunk in response.body:
                if chunk:
                    await self.send(self.h11.send(h11.Data(data=chunk)))
        except DropConnection:
            return False
        await self.send(self.h11.send(h11.EndOfMessage()))
        return True

    async def refuse(self, refusal: _Refusal) -> None:
        """Answer with an error before closing; written by hand, since h11 is in an error
        state after a malformed request."""
        body = refusal.message.encode("utf-8", "replace")
        reason = _REASONS.get(refusal.status, b"Error")
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n"
        ) % (refusal.status, reason, len(body))
        # A courtesy to a peer that is about to be dropped: brief, and it may be gone.
        with trio.move_on_after(1.0):
            try:
                await self.stream.send_all(head + body)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass


_REASONS: Final = {
    400: b"Bad Request",
    408: b"Request Timeout",
    413: b"Content Too Large",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def _deadline(timeout: float | None) -> float:
    return math.inf if timeout is None else trio.current_time() + timeout


def _declared_length(head: h11.Request) -> int | None:
    for name, value in head.headers:
        if name == b"content-length":
            return int(value)  # h11 has checked that it is a number
    return None


def _reset(stream: trio.abc.Stream) -> None:
    transport = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    if isinstance(transport, trio.SocketStream):
        try:
            transport.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already closed by the peer: nothing to drop


def _peer_name(stream: trio.abc.Stream) -> str:
    transport = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    socket = getattr(transport, "socket", None)
    try:
        address = socket.getpeername() if socket is not None else None
    except OSError:
        address = None
    return f"{address[0]}:{address[1]}" if address else "a peer"
