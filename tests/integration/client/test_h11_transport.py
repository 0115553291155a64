"""The lean HTTP/1.1 transport behind HTTPSession, against raw trio servers on loopback.

Each server here speaks bytes, not HTTP objects: it reads a request head (and body) and writes
whatever the test scripts, so the tests can cut connections at exact points, send chunked or
broken responses, and count the TCP connections the client opened.
"""

from __future__ import annotations

import contextlib
import gzip
import ssl
from collections.abc import Awaitable, Callable
from functools import partial

import h11
import pytest
import trio
import trustme
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.errors import APIConnectionError, APIProtocolError, APITimeoutError
from trioperator._client.http import HTTPSession
from trioperator._client.settings import NetworkingSettings
from trioperator._client.transport import requests
from trioperator._client.transport.origins import TLS_SESSION_REFRESH, Origin
from trioperator._client.transport.tls_stream import TLSStream

# A handler gets the connection's number and a request reader; it answers and returns True to
# keep the connection for the next request, or False to close it.
Reader = Callable[[], Awaitable[bytes | None]]
Handler = Callable[[int, trio.SocketStream, Reader], Awaitable[bool]]


class RawServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.port = 0
        self.connections = 0
        self.requests: list[bytes] = []  # request heads (and bodies), in arrival order

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        number = self.connections
        buffer = bytearray()

        async def read_request() -> bytes | None:
            while b"\r\n\r\n" not in buffer:
                data = await stream.receive_some(65536)
                if not data:
                    return None
                buffer.extend(data)
            end = buffer.index(b"\r\n\r\n") + 4
            head = bytes(buffer[:end])
            length = 0
            for line in head.lower().split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            while len(buffer) < end + length:
                buffer.extend(await stream.receive_some(65536))
            request = bytes(buffer[: end + length])
            del buffer[: end + length]
            self.requests.append(request)
            return request

        # A client that hangs up mid-answer (as tests of cancellation do) ends this connection
        # only; an exception out of here would stop the whole server.
        with contextlib.suppress(trio.BrokenResourceError):
            async with stream:
                while await self.handler(number, stream, read_request):
                    pass


async def start_raw(nursery: trio.Nursery, handler: Handler) -> RawServer:
    server = RawServer(handler)
    listeners = await nursery.start(partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1"))
    server.port = listeners[0].socket.getsockname()[1]
    return server


def ok(body: bytes, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"Content-Length: %d" % len(body), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


async def answer_ok(number: int, stream: trio.SocketStream, read: Reader) -> bool:
    if await read() is None:
        return False
    await stream.send_all(ok(b'{"connection": %d}' % number))
    return True


def session(server: RawServer) -> HTTPSession:
    return HTTPSession(ConnectionInfo(server=server.url))


async def test_keep_alive_reuses_one_connection(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    server = await start_raw(nursery, answer_ok)
    http = session(server)
    try:
        bodies = [(await http.request("GET", f"/r{i}")).body for i in range(5)]
    finally:
        await http.aclose()
    assert bodies == [b'{"connection": 1}'] * 5
    assert server.connections == 1
    assert [r.split(b" ")[1] for r in server.requests] == [b"/r0", b"/r1", b"/r2", b"/r3", b"/r4"]


async def test_request_head_and_body_as_sent(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    server = await start_raw(nursery, answer_ok)
    info = ConnectionInfo(server=server.url + "/prefix", token="secret")
    http = HTTPSession(info)
    try:
        response = await http.request(
            "PATCH",
            "/apis/x",
            params={"fieldManager": "me"},
            content=b'{"a": 1}',
            headers={"content-type": "application/merge-patch+json", "accept": "text/plain"},
        )
    finally:
        await http.aclose()
    assert response.status == 200
    head, body = server.requests[0].split(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "PATCH /prefix/apis/x?fieldManager=me HTTP/1.1"
    fields = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines[1:])}
    assert fields["host"] == f"127.0.0.1:{server.port}"
    assert fields["authorization"] == "Bearer secret"
    assert fields["content-type"] == "application/merge-patch+json"
    assert fields["accept"] == "text/plain"  # the request's own header wins, and only it is sent
    assert sum(1 for line in lines if line.lower().startswith("accept:")) == 1
    assert fields["content-length"] == "8"
    assert body == b'{"a": 1}'


async def test_kept_alive_connection_closed_by_the_server_is_replaced(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    async def one_per_connection(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        await read()
        await stream.send_all(ok(b"%d" % number))
        return False  # keep-alive was promised, but the server closes right after

    server = await start_raw(nursery, one_per_connection)
    http = session(server)
    try:
        first = await http.request("POST", "/a", content=b"1")
        await trio.sleep(0.1)  # the server's close arrives while the connection is idle
        second = await http.request("POST", "/b", content=b"2")
    finally:
        await http.aclose()
    assert (first.body, second.body) == (b"1", b"2")
    # Each request reached the server exactly once: the stale connection was dropped unused.
    assert [r.split(b" ")[1] for r in server.requests] == [b"/a", b"/b"]
    assert server.connections == 2


async def test_a_sent_request_is_not_repeated_when_the_server_closes(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    async def read_and_close(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        await read()
        return False

    server = await start_raw(nursery, read_and_close)
    http = session(server)
    try:
        with pytest.raises(APIConnectionError, match=r"^POST http://127\.0\.0\.1:\d+/x: .*closed"):
            await http.request("POST", "/x", content=b"{}")
    finally:
        await http.aclose()
    assert len(server.requests) == 1


async def test_cancelled_mid_response_the_connection_is_not_reused(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    async def slow_first(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        if await read() is None:
            return False
        if number == 1:
            # Half of the body, then silence: the rest would confuse the next request.
            await stream.send_all(ok(b"0123456789")[:-5])
            await trio.sleep(10)
            await stream.send_all(b"56789")
        else:
            await stream.send_all(ok(b"fresh"))
        return True

    server = await start_raw(nursery, slow_first)
    http = session(server)
    try:
        with pytest.raises(APITimeoutError, match=r"^GET http://127\.0\.0\.1:\d+/slow: "):
            await http.request("GET", "/slow", timeout=1)
        response = await http.request("GET", "/next")
    finally:
        await http.aclose()
    assert response.body == b"fresh"
    assert server.connections == 2


async def test_chunked_and_compressed_bodies(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    payload = b'{"items": [' + b",".join(b'"item-%d"' % i for i in range(2000)) + b"]}"
    packed = gzip.compress(payload)

    async def chunked(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        request = await read()
        if request is None:
            return False
        body = packed if b" /gzip " in request else payload
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
        if body is packed:
            head += b"Content-Encoding: gzip\r\n"
        await stream.send_all(head + b"\r\n")
        for start in range(0, len(body), 1000):
            piece = body[start : start + 1000]
            await stream.send_all(b"%x\r\n%s\r\n" % (len(piece), piece))
            await trio.sleep(0.01)
        await stream.send_all(b"0\r\n\r\n")
        return True

    server = await start_raw(nursery, chunked)
    http = session(server)
    try:
        plain = await http.request("GET", "/plain")
        unpacked = await http.request("GET", "/gzip")
    finally:
        await http.aclose()
    assert plain.body == payload
    assert unpacked.body == payload
    assert unpacked.headers["content-encoding"] == "gzip"
    assert server.connections == 1  # chunked bodies read to their end keep the connection


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (b"HTTP/1.1 OK\r\n\r\n", "malformed HTTP response"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: nine\r\n\r\n", "malformed HTTP response"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "ended prematurely"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed HTTP"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
            "compressed",
        ),
        (b"", "without sending a response"),
    ],
)
async def test_malformed_responses_are_clear_connection_errors(
    autojump_clock: MockClock, nursery: trio.Nursery, response: bytes, error: str
) -> None:
    async def broken(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        await read()
        await stream.send_all(response)
        return False

    server = await start_raw(nursery, broken)
    http = session(server)
    try:
        with pytest.raises(APIConnectionError, match=rf"^GET http://127\.0\.0\.1:\d+/x: .*{error}"):
            await http.request("GET", "/x")
    finally:
        await http.aclose()


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 OK\r\n\r\n",
        b"SMTP ready\r\n",
        b"HTTP/1.1 200 OK\r\nBad Header: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcdefgh\r\n",
        # Broken only after a first piece that parsed well (the head, read apart).
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"-1\r\n",
    ],
)
async def test_malformed_response_is_a_protocol_error_and_not_retried(
    autojump_clock: MockClock,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
    response: bytes,
) -> None:
    async def garbage(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        await read()
        head, sep, rest = response.partition(b"\r\n\r\n")
        await stream.send_all(head + sep)
        if rest:
            await trio.sleep(0.1)  # the body in a read of its own
            await stream.send_all(rest)
        await trio.sleep(1)  # still open: the error is the parser's, not the connection's end
        return False

    server = await start_raw(nursery, garbage)
    vault = Vault({"default": ConnectionInfo(server=server.url)})
    async with APIClient(vault, NetworkingSettings()) as api:
        with pytest.raises(APIProtocolError, match=r"^GET http://127\.0\.0\.1:\d+/x: malformed"):
            await api.request("GET", "/x")
    assert server.connections == 1  # one attempt: the same exchange would break the same way
    assert not [r for r in caplog.records if "will retry" in r.getMessage()]


async def test_informational_responses_and_heads_split_anywhere(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    body = b'{"kind": "Status"}'
    wire = (
        b"HTTP/1.1 100 Continue\r\nX-Early: 1\r\n\r\n"
        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Twice: a\r\n"
        b"x-twice: b\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )

    async def trickle(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        if await read() is None:
            return False
        for start in range(0, len(wire), 7):  # cuts through lines, names and the body
            await stream.send_all(wire[start : start + 7])
            await trio.sleep(0.01)
        return True

    server = await start_raw(nursery, trickle)
    http = session(server)
    try:
        responses = [await http.request("POST", "/x", content=b"{}") for _ in range(2)]
    finally:
        await http.aclose()
    for response in responses:
        assert (response.status, response.body) == (201, body)
        assert response.headers["x-twice"] == "a, b"
        assert response.headers["content-type"] == "application/json"
        assert "x-early" not in response.headers  # the 100's headers are not the answer's
    assert server.connections == 1


async def test_connections_the_response_ends_are_not_reused(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    # The server says it closes, answers in HTTP/1.0, or adds junk after the response: the
    # response is read whole, and the next request gets a new connection. A HEAD response
    # announces a body that never comes: it is complete at its head, and its connection kept.
    answers = {
        b"/close": ok(b"close", b"Connection: close"),
        b"/old": b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nold",
        b"/junk": ok(b"junk") + b"\r\nnot http at all",
        b"/head": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
    }

    async def varied(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        request = await read()
        if request is None:
            return False
        await stream.send_all(answers[request.split(b" ")[1]])
        return True

    server = await start_raw(nursery, varied)
    http = session(server)
    try:
        bodies = [
            (await http.request("GET", path.decode())).body for path in answers if path != b"/head"
        ]
        head = await http.request("HEAD", "/head")
        with trio.fail_after(1):
            after = await http.request("GET", "/old")
    finally:
        await http.aclose()
    assert bodies == [b"close", b"old", b"junk"]
    assert (head.status, head.body, head.headers["content-length"]) == (200, b"", "10")
    assert after.body == b"old"
    assert server.connections == 4  # the HEAD's connection served the last request


async def test_request_framing_is_h11s_and_never_twofold(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    server = await start_raw(nursery, answer_ok)
    http = session(server)
    try:
        await http.request("POST", "/a", content=b"12345")
        await http.request("POST", "/b", content=b"")
        await http.request("GET", "/c")
        for name in ("Transfer-Encoding", "content-length", "Host"):
            with pytest.raises(APIProtocolError, match=rf"cannot send the request: the {name} "):
                await http.request("POST", "/d", content=b"x", headers={name: "chunked"})
        with pytest.raises(APIProtocolError, match="cannot send the request: Illegal header"):
            await http.request("GET", "/d", headers={"X-Injected": "a\r\nX-Other: b"})
        await http.request("GET", "/e")  # the refused requests sent nothing and broke nothing
    finally:
        await http.aclose()
    heads = [server_head(request) for request in server.requests]
    assert [head[0] for head in heads] == [
        "POST /a HTTP/1.1",
        "POST /b HTTP/1.1",
        "GET /c HTTP/1.1",
        "GET /e HTTP/1.1",
    ]
    assert heads[0][1] == f"host: 127.0.0.1:{server.port}"  # h11 writes the Host first
    assert "content-length: 5" in heads[0]
    assert server.requests[0].endswith(b"\r\n\r\n12345")
    assert "content-length: 0" in heads[1]
    for head in heads:
        assert not any(line.startswith("transfer-encoding:") for line in head)
    assert not any(line.startswith("content-length:") for line in heads[2])


async def test_bytes_after_a_response_are_not_read_as_the_next_response(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    async def chatty(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        if await read() is None:
            return False
        await stream.send_all(
            ok(b"%d" % number) + b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\njunk"
        )
        return True

    server = await start_raw(nursery, chatty)
    http = session(server)
    try:
        bodies = [(await http.request("GET", "/")).body for _ in range(2)]
    finally:
        await http.aclose()
    assert bodies == [b"1", b"2"]


async def test_streams_reuse_only_connections_read_to_their_end(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    async def watch(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        request = await read()
        if request is None:
            return False
        await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(3):
            line = b'{"n": %d, "conn": %d}\n' % (i, number)
            await stream.send_all(b"%x\r\n%s\r\n" % (len(line), line))
        if b"endless" in request:
            await trio.sleep_forever()
        await stream.send_all(b"0\r\n\r\n")
        return True

    server = await start_raw(nursery, watch)
    http = session(server)
    try:
        async with http.stream("GET", "/complete") as response:
            complete = [line async for line in response.lines()]
        async with http.stream("GET", "/again") as response:
            again = [line async for line in response.lines()]
        async with http.stream("GET", "/endless") as response:
            async for line in response.lines():
                abandoned = line
                break
        async with http.stream("GET", "/after") as response:
            after = [line async for line in response.lines()]
    finally:
        await http.aclose()
    assert complete == [b'{"n": 0, "conn": 1}', b'{"n": 1, "conn": 1}', b'{"n": 2, "conn": 1}']
    assert again[0] == b'{"n": 0, "conn": 1}'  # reused: the body was read to its end
    assert abandoned == b'{"n": 0, "conn": 1}'
    assert after[0] == b'{"n": 0, "conn": 2}'  # a fresh connection: the old one was half-read
    assert server.connections == 2


async def test_refused_connection_names_the_url(autojump_clock: MockClock) -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    http = HTTPSession(ConnectionInfo(server=f"http://127.0.0.1:{port}"))
    try:
        with pytest.raises(APIConnectionError, match=rf"^GET http://127\.0\.0\.1:{port}/x: cannot"):
            await http.request("GET", "/x")
    finally:
        await http.aclose()


async def test_a_plain_http_server_is_reached_through_a_proxy_by_absolute_urls(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    # No tunnel for plain HTTP: the proxy gets the whole URL of the API server in each request
    # line, and its own credentials (from the proxy URL) in Proxy-Authorization.
    proxy = await start_raw(nursery, answer_ok)
    proxy_url = f"http://me:secret@127.0.0.1:{proxy.port}"
    info = ConnectionInfo(server="http://kube.invalid:1234/pre", proxy_url=proxy_url, token="t")
    http = HTTPSession(info)
    try:
        response = await http.request("GET", "/api", params={"watch": "1"})
        await http.request("POST", "/api", content=b"{}")
    finally:
        await http.aclose()
    assert response.body == b'{"connection": 1}'
    assert proxy.connections == 1
    head = server_head(proxy.requests[0])
    assert head[0] == "GET http://kube.invalid:1234/pre/api?watch=1 HTTP/1.1"
    assert head[1] == "host: kube.invalid:1234"
    assert "authorization: Bearer t" in head
    assert "proxy-authorization: Basic bWU6c2VjcmV0" in head  # me:secret
    assert server_head(proxy.requests[1])[0] == "POST http://kube.invalid:1234/pre/api HTTP/1.1"


def server_head(request: bytes) -> list[str]:
    lines = request.split(b"\r\n\r\n")[0].decode().split("\r\n")
    return [
        lines[0],
        *(line.split(": ", 1)[0].lower() + ": " + line.split(": ", 1)[1] for line in lines[1:]),
    ]


# ---------------------------------------------------------------- TLS (the transport's own stream)


class TLSRawServer(RawServer):
    """The same scripted server behind TLS; ``raw_close`` drops TCP without a TLS goodbye."""

    def __init__(self, handler: Handler, ca: trustme.CA) -> None:
        super().__init__(handler)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(self.context)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def serve(self, stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, self.context, server_side=True, https_compatible=True)
        await super().serve(tls)  # type: ignore[arg-type]  # a Stream like any other here


async def raw_close(stream: trio.SSLStream[trio.SocketStream]) -> None:
    await stream.transport_stream.aclose()


async def start_tls(nursery: trio.Nursery, handler: Handler, ca: trustme.CA) -> TLSRawServer:
    server = TLSRawServer(handler, ca)
    listeners = await nursery.start(partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1"))
    server.port = listeners[0].socket.getsockname()[1]
    return server


def tls_session(server: TLSRawServer, ca: trustme.CA) -> HTTPSession:
    return HTTPSession(ConnectionInfo(server=server.url, ca_data=ca.cert_pem.bytes()))


async def test_tls_stream_of_many_small_records_then_keep_alive(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    ca = trustme.CA()
    lines = [b'{"type": "ADDED", "n": %d}' % i for i in range(300)]

    async def handler(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        request = await read()
        if request is None:
            return False
        if request.startswith(b"GET /watch"):
            await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for line in lines:  # one TLS record per event, as the API server sends them
                await stream.send_all(b"%x\r\n%s\n\r\n" % (len(line) + 1, line))
            await stream.send_all(b"0\r\n\r\n")
            return True
        return False

    server = await start_tls(nursery, handler, ca)
    http = tls_session(server, ca)
    try:
        received = []
        for _ in range(2):
            async with http.stream("GET", "/watch") as stream:
                await trio.sleep(1)  # every record arrives before the first read: batched reads
                received.append([line async for line in stream.lines()])
    finally:
        await http.aclose()
    assert received == [lines, lines]
    assert server.connections == 1  # the first stream was read to its end: reused


async def test_tls_ragged_end_of_a_close_delimited_body_is_its_end(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    ca = trustme.CA()

    async def handler(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        if await read() is None:
            return False
        await stream.send_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello, ")
        await stream.send_all(b"world")
        await raw_close(stream)  # type: ignore[arg-type]
        return False

    server = await start_tls(nursery, handler, ca)
    http = tls_session(server, ca)
    try:
        response = await http.request("GET", "/")
    finally:
        await http.aclose()
    assert (response.status, response.body) == (200, b"hello, world")


async def test_tls_connection_dropped_mid_body_is_a_connection_error(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    ca = trustme.CA()

    async def handler(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        if await read() is None:
            return False
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        await raw_close(stream)  # type: ignore[arg-type]
        return False

    server = await start_tls(nursery, handler, ca)
    http = tls_session(server, ca)
    try:
        with pytest.raises(APIConnectionError, match=r"GET https://127\.0\.0\.1:\d+/x: .*ended"):
            await http.request("GET", "/x")
        # The next request gets a new connection and its complete answer.
        with pytest.raises(APIConnectionError):
            await http.request("GET", "/y")
    finally:
        await http.aclose()
    assert server.connections == 2


async def test_tls_new_connections_resume_the_servers_last_session(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    ca = trustme.CA()
    resumed: list[bool] = []

    async def handler(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        if await read() is None:
            return False
        resumed.append(stream.session_reused)  # type: ignore[attr-defined]  # an SSLStream
        await stream.send_all(ok(b"{}", b"Connection: close"))  # each request: a new connection
        return False

    server = await start_tls(nursery, handler, ca)
    http = tls_session(server, ca)
    try:
        statuses = [(await http.request("GET", f"/{i}")).status for i in range(3)]
        # The server forgets its tickets (a restart, new keys): the ticket offered next is not
        # taken, the handshake is a full one, and the request goes through as ever.
        server.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server.context)
        statuses += [(await http.request("GET", f"/{i}")).status for i in range(3, 5)]
    finally:
        await http.aclose()
    assert statuses == [200] * 5
    assert server.connections == 5
    assert resumed == [False, True, True, False, True]


async def test_tls_session_is_read_once_for_a_burst_of_connections_and_again_when_old(
    autojump_clock: MockClock, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reading a session out of a connection costs about a handshake (the ssl module copies it
    # through its serialized form): connections that resumed the kept one do not replace it.
    ca = trustme.CA()
    resumed: list[bool] = []
    waiting: list[trio.Event] = []
    burst = 4

    async def handler(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        if await read() is None:
            return False
        resumed.append(stream.session_reused)  # type: ignore[attr-defined]  # an SSLStream
        if 2 <= number <= 1 + burst:  # the burst: all its connections open at once
            arrived = trio.Event()
            waiting.append(arrived)
            if len(waiting) == burst:
                for event in waiting:
                    event.set()
            await arrived.wait()
        await stream.send_all(ok(b"{}", b"Connection: close"))  # each request: a new connection
        return False

    reads: list[bool] = []
    original = TLSStream.resumable_session

    def counted(self: TLSStream) -> ssl.SSLSession | None:
        reads.append(True)
        return original(self)

    monkeypatch.setattr(TLSStream, "resumable_session", counted)
    server = await start_tls(nursery, handler, ca)
    http = tls_session(server, ca)
    statuses: list[int] = []

    async def get(path: str) -> None:
        statuses.append((await http.request("GET", path)).status)

    try:
        await get("/first")
        async with trio.open_nursery() as requests_:
            for i in range(burst):
                requests_.start_soon(get, f"/burst/{i}")
        assert len(reads) == 1  # the first connection's session, kept; the burst resumed it
        autojump_clock.jump(TLS_SESSION_REFRESH + 1)
        await get("/later")
    finally:
        await http.aclose()
    assert statuses == [200] * (burst + 2)
    assert resumed == [False] + [True] * (burst + 1)
    assert len(reads) == 2  # the kept session had grown old: the later connection's replaced it


async def test_tls_answers_of_many_records_small_and_large_then_keep_alive(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    # Regular requests read one TLS record at a time unless it is a full one (16 KiB): the
    # answers come whole either way, in small records apart or in many full ones at once.
    ca = trustme.CA()
    large = b"x" * 200_000

    async def handler(number: int, stream: trio.SocketStream, read: Reader) -> bool:
        request = await read()
        if request is None:
            return False
        if request.startswith(b"GET /large"):
            await stream.send_all(ok(large))
            return True
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n")
        for piece in (b"one", b"two", b"six"):  # a record each, apart
            await trio.sleep(0.1)
            await stream.send_all(piece)
        return True

    server = await start_tls(nursery, handler, ca)
    http = tls_session(server, ca)
    try:
        bodies = [(await http.request("GET", path)).body for path in ("/small", "/large", "/small")]
    finally:
        await http.aclose()
    assert bodies == [b"onetwosix", large, b"onetwosix"]
    assert server.connections == 1


def test_requests_with_validated_headers_reused_are_h11s_bytes_exactly() -> None:
    # The second request of a set of headers reuses the first one's validated headers: the
    # bytes are still those h11 writes for the request from scratch.
    origin = Origin("http", "kube.test", 8080)
    validated: requests.Validated = {}
    headers = {"User-Agent": "me", "Content-Type": "application/merge-patch+json"}
    for target, body in [("/a", b"{}"), ("/b?x=1", b"[]"), ("/c", None), ("/d", None)]:
        method = "PATCH" if body else "GET"
        sent = requests.serialize_request(origin, validated, method, target, headers, body)
        h = h11.Connection(h11.CLIENT)
        items = [("Host", "kube.test:8080"), *headers.items()]
        if body is not None:
            items.append(("Content-Length", str(len(body))))
        expected = h.send(
            h11.Request(method="PATCH" if body else "GET", target=target, headers=items)
        )
        expected += (h.send(h11.Data(data=body)) or b"") if body else b""
        expected += h.send(h11.EndOfMessage()) or b""
        assert sent == expected
    assert len(validated) == 2  # one set per (headers, body length)
    with pytest.raises(h11.LocalProtocolError, match="Illegal target"):
        requests.serialize_request(origin, validated, "GET", "/with space", headers, None)


@pytest.mark.parametrize(
    ("method", "target", "headers", "body"),
    [
        ("GET", "/api/v1/pods", [("Host", "kube.test"), ("Accept", "application/json")], None),
        ("DELETE", "/x?propagationPolicy=Foreground", [("host", "k:1"), ("X-Empty", "")], None),
        ("PATCH", "/a/b", [("Accept", "*/*"), ("Host", "k"), ("Content-Length", "0")], b""),
        ("POST", "/c", [("Host", "k"), ("Content-Length", "9"), ("A", "b")], b'{"a": 1}\n'),
        ("CONNECT", "kube.test:443", [("Host", "kube.test:443")], None),
    ],
)
def test_requests_are_written_as_an_h11_connection_writes_them(
    method: str, target: str, headers: list[tuple[str, str]], body: bytes | None
) -> None:
    # The transport writes requests validated by h11 without a connection's state machine; the
    # bytes must be the ones a fresh h11 connection writes for the same request and body.
    request = h11.Request(method=method, target=target, headers=headers)
    block = requests.header_block(request)
    assert requests.write_request(request, body, block) == _written_by_a_connection(request, body)


def _written_by_a_connection(request: h11.Request, content: bytes | None) -> bytes:
    """The request's bytes as a fresh h11 client connection writes it, event by event."""
    h = h11.Connection(h11.CLIENT)
    parts = [h.send(request)]
    if content:
        parts.append(h.send(h11.Data(data=content)))
    parts.append(h.send(h11.EndOfMessage()))
    return b"".join(part for part in parts if part)
