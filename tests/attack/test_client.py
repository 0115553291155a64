"""The operator's API client against a hostile API server (or proxy) on loopback.

Every reply is untrusted: huge bodies, compression bombs, floods of headers, redirects, absurd
``Retry-After`` values. The client must refuse them early (its memory bounded, the rest of the
reply unread), with a clear error, and the watchers must stay up and retry with a backoff
(jittered, so that many of them do not retry in lock-step).

The server speaks raw bytes (it reads a request head and writes whatever a test scripts),
counts what it sent, and stops at a bounded size; the limits are scaled down through the
settings (a cap of 1 MiB against bodies of tens of MiB), so the tests are quick and light.
Time is trio's autojump clock: backoffs of minutes take no time, and are asserted exactly.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import logging
import math
import random
import time
import tracemalloc
import zlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trio
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.errors import APIRedirectError, APIResponseTooLargeError
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings, WatchingSettings
from trioperator._client.transport.responses import MAX_HEAD_BYTES, MAX_HEADERS
from trioperator._client.watching import LISTED, Listed, WatchItem, stream_events

CAP = 1024 * 1024
"""The client's limit in these tests (``max_response_size``): 1 MiB."""

KEX = Resource(group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample")
WATCH_LOGGER = "trioperator._client.watching"


# ------------------------------------------------------------------ the hostile server


class Request:
    def __init__(self, head: bytes, arrived: float) -> None:
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        self.method, self.target, _ = line.split(" ", 2)
        parts = urlsplit(self.target)
        self.path = parts.path
        self.query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        self.time = arrived

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") == "true"


Answer = Callable[["Conn"], Awaitable[None]]


class Conn:
    """One connection as a scripted answer sees it: send bytes, counted by the server."""

    def __init__(self, server: HostileServer, stream: trio.SocketStream, request: Request):
        self.server = server
        self.stream = stream
        self.request = request

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)
        self.server.sent += len(data)


class HostileServer:
    """A loopback server whose answers are scripted per request, in order; then it hangs."""

    def __init__(self) -> None:
        self.port = 0
        self.requests: list[Request] = []
        self.script: deque[Answer] = deque()
        self.sent = 0  # body bytes written, all connections together
        self.finished = 0  # answers written to their end (a cut connection is not counted)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, stream: trio.SocketStream) -> None:
        buffer = bytearray()
        # The client hanging up mid-answer (what these tests expect of it) ends this connection.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            async with stream:
                while True:
                    while b"\r\n\r\n" not in buffer:
                        data = await stream.receive_some(65536)
                        if not data or len(buffer) > 65536:
                            return
                        buffer.extend(data)
                    end = buffer.index(b"\r\n\r\n") + 4
                    request = Request(bytes(buffer[:end]), trio.current_time())
                    del buffer[:end]  # the client sends no bodies here (GETs)
                    self.requests.append(request)
                    if not self.script:
                        await trio.sleep_forever()
                    answer = self.script.popleft()
                    await answer(Conn(self, stream, request))
                    self.finished += 1


@pytest.fixture
async def server(nursery: trio.Nursery) -> HostileServer:
    hostile = HostileServer()
    listeners = await nursery.start(partial(trio.serve_tcp, hostile.serve, 0, host="127.0.0.1"))
    hostile.port = listeners[0].socket.getsockname()[1]
    return hostile


class Scripted:
    """A random source whose draws are given: the jitter of every backoff is then known."""

    def __init__(self, *values: float) -> None:
        self.values = itertools.cycle(values)

    def random(self) -> float:
        return next(self.values)


@pytest.fixture
def networking() -> NetworkingSettings:
    return NetworkingSettings(max_response_size=CAP, error_backoffs=[2, 4, 8])


@pytest.fixture
async def api(server: HostileServer, networking: NetworkingSettings) -> AsyncIterator[APIClient]:
    vault = Vault({"default": ConnectionInfo(server=server.url)})
    # Every draw 0: each backoff is its step exactly (the least jitter allows, known in advance).
    async with APIClient(vault, networking, rng=Scripted(0.0)) as client:
        yield client


@contextlib.contextmanager
def peak_memory() -> Iterator[list[int]]:
    """The peak of Python's allocations inside the block (tracemalloc), in bytes."""
    result: list[int] = []
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        yield result
    finally:
        result.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


# ------------------------------------------------------------------ scripted answers


def head(status: int, *headers: str, reason: str = "Whatever") -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def answer_json(doc: Any, status: int = 200, *headers: str) -> Answer:
    body = json.dumps(doc).encode()

    async def answer(conn: Conn) -> None:
        length = f"Content-Length: {len(body)}"
        await conn.send(head(status, "Content-Type: application/json", length, *headers) + body)

    return answer


def answer_endless(total: int, *, framing: str = "chunked", encoding: str | None = None) -> Answer:
    """A body of ``total`` bytes of JSON-ish filler in 64 KiB pieces, as fast as it is taken."""
    piece = b"x" * 65536

    async def answer(conn: Conn) -> None:
        headers = ["Content-Type: application/json"]
        if framing == "chunked":
            headers.append("Transfer-Encoding: chunked")
        elif framing == "length":
            headers.append(f"Content-Length: {total}")
        else:
            headers.append("Connection: close")  # the body ends with the connection
        await conn.send(head(200, *headers))
        sent = 0
        while sent < total:
            if framing == "chunked":
                await conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            else:
                await conn.send(piece)
            sent += len(piece)
        if framing == "chunked":
            await conn.send(b"0\r\n\r\n")

    return answer


def answer_gzip(payload: bytes, *, chunked: bool = True) -> Answer:
    packed = gzip.compress(payload, compresslevel=9)

    async def answer(conn: Conn) -> None:
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(packed)}"
        await conn.send(head(200, "Content-Encoding: gzip", framing))
        if chunked:
            for start in range(0, len(packed), 8192):
                piece = packed[start : start + 8192]
                await conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            await conn.send(b"0\r\n\r\n")
        else:
            await conn.send(packed)

    return answer


def answer_redirect(location: str, status: int = 302) -> Answer:
    body = b'{"kind": "KopfExampleList", "metadata": {}, "items": []}'

    async def answer(conn: Conn) -> None:
        headers = [f"Location: {location}", f"Content-Length: {len(body)}"]
        await conn.send(head(status, *headers, reason="Found") + body)

    return answer


def answer_lines(*docs: Any, then_hang: bool = True) -> Answer:
    async def answer(conn: Conn) -> None:
        await conn.send(head(200, "Transfer-Encoding: chunked"))
        for doc in docs:
            line = json.dumps(doc).encode() + b"\n"
            await conn.send(b"%x\r\n%s\r\n" % (len(line), line))
        if then_hang:
            await trio.sleep_forever()
        await conn.send(b"0\r\n\r\n")

    return answer


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns1", "uid": name, "resourceVersion": rv}}


def listing(rv: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "KopfExampleList", "metadata": {"resourceVersion": rv}, "items": list(items)}


def shapes(items: list[WatchItem]) -> list[Any]:
    return [
        item if isinstance(item, Listed) else (item["type"], item["object"]["metadata"]["name"])
        for item in items
    ]


async def run_watch(api: APIClient, *, seconds: float = 100) -> list[WatchItem]:
    """The watcher for a bounded stretch of (virtual) time; what it sent in that time."""
    send, receive = trio.open_memory_channel[WatchItem](math.inf)
    watching = WatchingSettings(inactivity_timeout=None, reconnect_backoff=0.1)
    with trio.move_on_after(seconds):
        await stream_events(api, KEX, "ns1", settings=watching, send=send)
    items: list[WatchItem] = []
    while True:
        try:
            items.append(receive.receive_nowait())
        except trio.WouldBlock:
            return items


async def read_lines(api: APIClient, into: list[bytes] | None = None) -> None:
    """Stream a (watch) body line by line to its end, keeping the lines in ``into``."""
    async with api.stream("/x", params={"watch": "true"}) as lines:
        async for line in lines:
            if into is not None:
                into.append(line)


def gaps(requests: list[Request]) -> list[float]:
    return [round(b.time - a.time, 6) for a, b in itertools.pairwise(requests)]


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# ------------------------------------------------------------------ 1. response size


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
async def test_a_huge_body_is_refused_soon_after_the_cap(
    autojump_clock: MockClock, server: HostileServer, api: APIClient, framing: str
) -> None:
    total = 64 * CAP  # what the server would send: 64 MiB, 64 times the cap
    server.script.append(answer_endless(total, framing=framing))
    with peak_memory() as peak, pytest.raises(APIResponseTooLargeError) as info:
        await api.request("GET", "/api/v1/configmaps")
    assert str(info.value).startswith(f"GET {server.url}/api/v1/configmaps: the response body")
    assert "max_response_size" in str(info.value)
    assert info.value.limit == CAP
    # The client stopped reading at the cap: the server was cut off long before its end
    # (what it got to send is the cap plus what the kernel's buffers took), and the client's
    # memory never held much more than the cap.
    assert server.finished == 0
    assert server.sent < 16 * CAP
    assert peak[0] < 4 * CAP
    assert len(server.requests) == 1  # not retried: the same request gets the same answer


async def test_an_announced_huge_length_is_refused_before_its_body(
    autojump_clock: MockClock, server: HostileServer, api: APIClient
) -> None:
    server.script.append(answer_endless(1024 * CAP, framing="length"))  # announces 1 GiB
    with pytest.raises(APIResponseTooLargeError, match=r"announces 1073741824 bytes"):
        await api.request("GET", "/api/v1/configmaps")
    assert server.finished == 0


async def test_a_body_up_to_the_cap_is_accepted(
    autojump_clock: MockClock, server: HostileServer, api: APIClient
) -> None:
    blob = "x" * (CAP - 100)
    server.script.append(answer_json({"blob": blob}))
    assert await api.request("GET", "/x") == {"blob": blob}


# ------------------------------------------------------------------ 2. decompression


@pytest.mark.parametrize("chunked", [True, False])
async def test_a_gzip_bomb_is_refused_once_it_inflates_past_the_cap(
    autojump_clock: MockClock, server: HostileServer, api: APIClient, chunked: bool
) -> None:
    bomb = b"[" + b"0," * (32 * CAP) + b"0]"  # 64 MiB inflated, ~64 KiB compressed
    server.script.append(answer_gzip(bomb, chunked=chunked))
    with peak_memory() as peak, pytest.raises(APIResponseTooLargeError) as info:
        await api.request("GET", "/api/v1/configmaps")
    assert "once decompressed" in str(info.value)
    assert peak[0] < 4 * CAP  # inflated incrementally, stopped one byte past the cap
    assert len(server.requests) == 1


async def test_a_compressed_body_within_the_cap_is_inflated(
    autojump_clock: MockClock, server: HostileServer, api: APIClient
) -> None:
    doc = {"items": [f"item-{i}" for i in range(20000)]}
    server.script.append(answer_gzip(json.dumps(doc).encode()))
    assert await api.request("GET", "/x") == doc


async def test_a_compressed_watch_line_past_the_cap_ends_the_stream(
    autojump_clock: MockClock, server: HostileServer, api: APIClient
) -> None:
    # One "event" inflating to 32 MiB without a newline: never held whole.
    server.script.append(answer_gzip(b'{"type": "ADDED", "object": {"x": "' + b"x" * (32 * CAP)))
    with peak_memory() as peak, pytest.raises(APIResponseTooLargeError) as info:
        await read_lines(api)
    assert f"a line exceeds {CAP} bytes" in str(info.value)
    assert peak[0] < 6 * CAP


# ------------------------------------------------------------------ 3. headers


def test_repeated_headers_are_joined_once_in_order() -> None:
    from trioperator._client.transport.responses import ResponseReader

    reader = ResponseReader()
    values = [f"v{i}" for i in range(MAX_HEADERS - 2)]
    wire = head(200, "Content-Length: 0", *[f"X-Many: {v}" for v in values], "x-many: last")
    # In pieces of 3 bytes: httptools hands on names and values as they come.
    for start in range(0, len(wire), 3):
        reader.feed(wire[start : start + 3])
    assert reader.complete
    assert reader.headers["x-many"] == ", ".join([*values, "last"])
    assert reader.headers["content-length"] == "0"


async def test_a_flood_of_headers_is_refused_at_once(
    autojump_clock: MockClock, server: HostileServer, api: APIClient
) -> None:
    total = 800_000  # 14 MiB of headers: far more than the kernel's buffers take at once

    async def flood(conn: Conn) -> None:
        await conn.send(b"HTTP/1.1 200 OK\r\n")
        lines = b"X-Same: abcdefgh\r\n" * 1000
        for _ in range(total // 1000):
            await conn.send(lines)
        await conn.send(b"Content-Length: 0\r\n\r\n")

    server.script.append(flood)
    started = time.perf_counter()
    with pytest.raises(APIResponseTooLargeError, match=f"more than {MAX_HEADERS} headers"):
        await api.request("GET", "/x")
    # 80,000 of them took 1.6 s of a blocked loop when each repetition was joined as it came.
    assert time.perf_counter() - started < 1.0
    assert server.finished == 0
    assert server.sent < 4 * CAP  # cut off early (what it sent: one read plus kernel buffers)


@pytest.mark.parametrize(
    ("start", "filler"),
    [
        (b"HTTP/1.1 200 OK\r\nX-Huge: ", b"y" * 4096),  # one header that never ends
        (b"HTTP/1.1 200 Reason", b"y" * 4096),  # a reason phrase that never ends
        (b"", b"HTTP/1.1 100 Continue\r\nX-A: b\r\n\r\n" * 100),  # 1xx heads, for ever
    ],
)
async def test_an_endless_head_is_refused_past_its_limit(
    autojump_clock: MockClock, server: HostileServer, api: APIClient, start: bytes, filler: bytes
) -> None:
    async def endless(conn: Conn) -> None:
        await conn.send(start)
        for _ in range(4096):  # 12 to 16 MiB: never reached
            await conn.send(filler)

    server.script.append(endless)
    with peak_memory() as peak, pytest.raises(APIResponseTooLargeError) as info:
        await api.request("GET", "/x")
    assert f"head (status line and headers) is over {MAX_HEAD_BYTES} bytes" in str(info.value)
    assert peak[0] < 1 * CAP
    assert server.finished == 0


async def test_endless_trailers_of_a_stream_are_refused(
    autojump_clock: MockClock, server: HostileServer, api: APIClient
) -> None:
    async def trailers(conn: Conn) -> None:
        await conn.send(head(200, "Transfer-Encoding: chunked") + b"3\r\n{}\n\r\n0\r\nX-T: ")
        for _ in range(4096):  # 16 MiB: never reached
            await conn.send(b"t" * 4096)

    server.script.append(trailers)
    lines: list[bytes] = []
    with pytest.raises(APIResponseTooLargeError, match=f"trailers are over {MAX_HEAD_BYTES}"):
        await read_lines(api, into=lines)
    assert lines == [b"{}"]  # the body came whole: only the trailers were refused
    assert server.finished == 0


@pytest.mark.parametrize("status", [100, 102, 103])
async def test_informational_answers_are_skipped(
    autojump_clock: MockClock, server: HostileServer, api: APIClient, status: int
) -> None:
    async def hints(conn: Conn) -> None:
        await conn.send(head(status, "Link: </style.css>; rel=preload", "X-Early: 1"))
        await answer_json({"kind": "Thing"}, 200, "X-Late: 2")(conn)

    server.script.append(hints)
    response = await api.request_raw("GET", "/x")
    assert response.status == 200
    assert response.body == b'{"kind": "Thing"}'
    assert response.headers["x-late"] == "2"
    assert "x-early" not in response.headers
    assert "link" not in response.headers


# ------------------------------------------------------------------ 4. redirects


async def test_a_redirect_is_an_error_naming_it_and_is_never_followed(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    nursery: trio.Nursery,
) -> None:
    elsewhere = HostileServer()  # where the redirect points: it must never be asked
    listeners = await nursery.start(partial(trio.serve_tcp, elsewhere.serve, 0, host="127.0.0.1"))
    elsewhere.port = listeners[0].socket.getsockname()[1]
    server.script.append(answer_redirect(f"{elsewhere.url}/steal-the-token", status=307))
    with pytest.raises(APIRedirectError) as info:
        await api.request("GET", "/api/v1/namespaces/ns1/configmaps")
    assert info.value.status == 307
    assert info.value.location == f"{elsewhere.url}/steal-the-token"
    assert str(info.value).startswith(
        f"HTTP 307: a redirect (Location '{elsewhere.url}/steal-the-token'), not followed"
    )
    assert len(server.requests) == 1  # not retried
    assert elsewhere.requests == []  # not followed


async def test_a_redirected_list_is_not_an_empty_list(
    autojump_clock: MockClock, server: HostileServer, api: APIClient
) -> None:
    # The redirect's body is a well-formed empty listing: it must still not be taken as one.
    server.script.append(answer_redirect("http://127.0.0.1:1/elsewhere"))
    with pytest.raises(APIRedirectError):
        await api.list_objs(KEX, namespace="ns1")


async def test_the_watcher_retries_a_redirected_list_and_watches_only_after_a_real_one(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.script.extend(
        [
            answer_redirect("http://127.0.0.1:1/login"),
            answer_redirect("http://127.0.0.1:1/login"),
            answer_json(listing("100", obj("a", "90"))),
            answer_lines({"type": "ADDED", "object": obj("b", "101")}),
        ]
    )
    items = await run_watch(api)
    # Nothing is reported listed until a listing succeeded: the objects are all seen.
    assert shapes(items) == [(None, "a"), LISTED, ("ADDED", "b")]
    kinds = [(r.is_watch, r.query.get("resourceVersion")) for r in server.requests]
    assert kinds == [(False, None), (False, None), (False, None), (True, "100")]
    # Retried after a backoff (steps 2 and 4 of the ramp, each drawn at its least).
    assert gaps(server.requests[:3]) == [2.0, 4.0]
    messages = errors(caplog)
    assert len(messages) == 2
    assert messages[0].startswith("The listing of ")
    assert "failed (#1 in a row); retrying in 2 seconds: HTTP 302" in messages[0]
    assert "Location 'http://127.0.0.1:1/login'" in messages[0]
    assert "(#2 in a row); retrying in 4 seconds" in messages[1]


# ------------------------------------------------------------------ the watcher stays up


async def test_the_watcher_survives_a_list_that_is_not_json(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def garbage(conn: Conn) -> None:
        body = b"{not json at all"
        await conn.send(head(200, "Content-Type: application/json", "Content-Length: 16") + body)

    server.script.extend(
        [
            garbage,
            answer_json({"kind": "KopfExampleList", "items": "not a list"}),
            answer_json(listing("100", obj("a", "90"))),
        ]
    )
    items = await run_watch(api)
    assert shapes(items) == [(None, "a"), LISTED]
    messages = errors(caplog)
    assert "is not valid JSON" in messages[0]
    assert "is not a listing" in messages[1]
    assert gaps(server.requests[:3]) == [2.0, 4.0]


async def test_the_watcher_survives_a_gzip_bomb_for_a_list(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bomb = b"[" + b"0," * (32 * CAP) + b"0]"
    server.script.extend([answer_gzip(bomb), answer_json(listing("100", obj("a", "90")))])
    with peak_memory() as peak:
        items = await run_watch(api)
    assert peak[0] < 4 * CAP
    assert shapes(items) == [(None, "a"), LISTED]
    # Taken for a page too large: asked for again, in a smaller page, and (here) answered.
    assert [r.query.get("limit") for r in server.requests[:2]] == ["500", "250"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "once decompressed" in warnings[0]


async def test_a_page_over_the_cap_is_asked_for_again_in_halves(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    big = answer_endless(4 * CAP)
    small = answer_json(listing("100", obj("a", "90")))
    server.script.extend([big, big, small])
    items = await run_watch(api)
    assert shapes(items) == [(None, "a"), LISTED]
    assert [r.query.get("limit") for r in server.requests[:3]] == ["500", "250", "125"]
    assert gaps(server.requests[:3]) == [0, 0]  # not an error yet: smaller pages at once
    assert errors(caplog) == []


async def test_a_page_over_the_cap_whatever_its_size_is_an_error_and_a_retry(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.script.extend([answer_endless(4 * CAP)] * 9)  # 500, 250, ... 1: always too much
    server.script.append(answer_json(listing("100")))
    items = await run_watch(api)
    assert items == [LISTED]
    limits = [r.query.get("limit") for r in server.requests[:10]]
    assert limits == ["500", "250", "125", "62", "31", "15", "7", "3", "1", "500"]
    assert gaps(server.requests[8:10]) == [2.0]  # then a backoff before listing again
    assert f"exceeds the limit of {CAP} bytes" in errors(caplog)[0]


async def test_an_overlong_watch_line_reconnects_from_the_last_version_after_a_backoff(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def overlong(conn: Conn) -> None:
        await conn.send(head(200, "Transfer-Encoding: chunked"))
        line = json.dumps({"type": "ADDED", "object": obj("a", "101")}).encode() + b"\n"
        await conn.send(b"%x\r\n%s\r\n" % (len(line), line))
        piece = b"z" * 65536  # then a line without an end, up to 32 MiB
        for _ in range(512):
            await conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))

    server.script.extend(
        [
            answer_json(listing("100")),
            overlong,
            overlong,
            answer_lines({"type": "MODIFIED", "object": obj("a", "103")}),
        ]
    )
    with peak_memory() as peak:
        items = await run_watch(api)
    assert peak[0] < 6 * CAP
    assert shapes(items) == [LISTED, ("ADDED", "a"), ("ADDED", "a"), ("MODIFIED", "a")]
    watches = server.requests[1:]
    assert [r.query.get("resourceVersion") for r in watches] == ["100", "101", "101"]
    assert gaps(watches) == [2.0, 4.0]
    messages = errors(caplog)
    assert messages[0].startswith("The watch-stream of ")
    assert f"a line exceeds {CAP} bytes" in messages[0]
    assert server.finished == 1  # the listing: neither endless line was read to its end


# ------------------------------------------------------------------ 5. Retry-After and jitter


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        ("1e9", 60.0),  # capped at max_retry_after (60 s by default)
        ("99999999999999999999", 60.0),
        ("7", 7.0),
        ("inf", 2.0),  # garbage: the backoff alone (its step 2)
        ("nan", 2.0),
        ("-5", 2.0),
        ("soon", 2.0),
        ("Fri, 02 Jan 2015 00:00:00 GMT", 60.0),  # a day after the Date below: capped
        ("Thu, 01 Jan 2015 00:00:09 GMT", 9.0),  # 9 s after the response's own Date
        ("Wed, 31 Dec 2014 00:00:00 GMT", 2.0),  # in the past: the backoff alone
    ],
)
async def test_retry_after_is_honoured_up_to_its_cap(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    retry_after: str,
    expected: float,
) -> None:
    date = "Date: Thu, 01 Jan 2015 00:00:00 GMT"
    server.script.extend(
        [
            answer_json({"kind": "Status", "code": 503}, 503, f"Retry-After: {retry_after}", date),
            answer_json({"kind": "Thing"}),
        ]
    )
    assert await api.request("GET", "/x") == {"kind": "Thing"}
    assert gaps(server.requests) == [expected]


async def test_retry_after_cap_is_a_setting(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    networking: NetworkingSettings,
) -> None:
    networking.max_retry_after = 5
    networking.enforce_retry_after = True
    server.script.extend(
        [
            answer_json({"kind": "Status", "code": 429}, 429, "Retry-After: 1000000000"),
            answer_json({"kind": "Thing"}),
        ]
    )
    assert await api.request("GET", "/x") == {"kind": "Thing"}
    assert gaps(server.requests) == [5.0]


async def test_a_throttled_watcher_waits_at_most_the_capped_retry_after(
    autojump_clock: MockClock, server: HostileServer, api: APIClient
) -> None:
    api.settings.error_backoffs = []  # no retries by the client: the watcher's own backoff
    throttled = answer_json({"kind": "Status", "code": 429}, 429, "Retry-After: 1e9")
    server.script.extend([throttled, answer_json(listing("100"))])
    items = await run_watch(api, seconds=1000)
    assert items == [LISTED]
    assert gaps(server.requests[:2]) == [60.0]


def seeded_delays(seeds: range, step: float) -> list[float]:
    return [round(step * (1 + 0.5 * random.Random(seed).random()), 6) for seed in seeds]


async def test_jitter_spreads_the_retries_of_many_clients(
    autojump_clock: MockClock, server: HostileServer
) -> None:
    # Ten clients (say, the workers of ten replicas) fail at the same instant; each draws its
    # backoff from its own generator (seeded here), and they come back spread over the step.
    clients = range(10)
    settings = NetworkingSettings(error_backoffs=[4])
    for _ in clients:
        server.script.extend([answer_json({"code": 503}, 503)])
    for _ in clients:
        server.script.extend([answer_json({"kind": "Thing"})])
    vault = Vault({"default": ConnectionInfo(server=server.url)})
    apis = [APIClient(vault, settings, rng=random.Random(seed)) for seed in clients]
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for seed, api in zip(clients, apis, strict=True):
            nursery.start_soon(api.request, "GET", f"/c{seed}")
    for api in apis:
        await api.aclose()
    retries = sorted(round(r.time - start, 6) for r in server.requests[len(clients) :])
    assert retries == sorted(seeded_delays(clients, 4.0))
    assert len(set(retries)) == len(clients)  # no two in lock-step
    assert max(retries) - min(retries) > 1.0  # spread over most of the 2 seconds added
    assert all(4.0 <= delay < 6.0 for delay in retries)  # never sooner than the step


async def test_without_jitter_the_retries_are_in_lock_step(
    autojump_clock: MockClock, server: HostileServer
) -> None:
    settings = NetworkingSettings(error_backoffs=[4], backoff_jitter=0)
    for _ in range(5):
        server.script.extend([answer_json({"code": 503}, 503)])
    for _ in range(5):
        server.script.extend([answer_json({"kind": "Thing"})])
    vault = Vault({"default": ConnectionInfo(server=server.url)})
    apis = [APIClient(vault, settings, rng=random.Random(seed)) for seed in range(5)]
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for seed, api in enumerate(apis):
            nursery.start_soon(api.request, "GET", f"/c{seed}")
    for api in apis:
        await api.aclose()
    assert {round(r.time - start, 6) for r in server.requests[5:]} == {4.0}


async def test_the_watchers_backoff_grows_with_failures_in_a_row_and_keeps_its_last_step(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api.rng = Scripted(0.0, 0.8)  # the step, then 1.4 times it, in turn
    server.script.extend([answer_redirect("http://127.0.0.1:1/")] * 5)
    server.script.append(answer_json(listing("100")))
    items = await run_watch(api, seconds=1000)
    assert items == [LISTED]
    # Steps 2, 4, 8, 8, 8 (the ramp, its last step repeating), drawn at 1 and 1.4 in turn.
    assert gaps(server.requests[:6]) == pytest.approx([2.0, 5.6, 8.0, 11.2, 8.0])
    assert len(errors(caplog)) == 5


async def test_many_failures_in_a_row_never_escalate(
    autojump_clock: MockClock,
    server: HostileServer,
    api: APIClient,
) -> None:
    # A proxy that redirects everything for an hour: the watcher keeps trying, boundedly.
    async def redirect_for_ever(conn: Conn) -> None:
        server.script.append(redirect_for_ever)  # the next request gets the same
        await answer_redirect("http://127.0.0.1:1/")(conn)

    server.script.append(redirect_for_ever)
    items = await run_watch(api, seconds=600)
    assert items == []
    # Steps of at most 8 s: an attempt every 8 s (after 2 and 4), not a tight loop, and never
    # an escalation (that would have ended run_watch with it).
    assert 70 <= len(server.requests) <= 80
    assert set(gaps(server.requests[3:])) == {8.0}


def test_the_settings_refuse_nonsense() -> None:
    settings = NetworkingSettings()
    with pytest.raises(ValueError, match="max_response_size"):
        settings.max_response_size = 0
    with pytest.raises(ValueError, match="max_retry_after"):
        settings.max_retry_after = math.nan
    with pytest.raises(ValueError, match="backoff_jitter"):
        settings.backoff_jitter = 1.5
    assert settings.max_response_size == 64 * 1024 * 1024
    assert settings.max_retry_after == 60
    assert settings.backoff_jitter == 0.5


def test_zlib_bomb_fixture_is_a_bomb() -> None:
    # The bombs above inflate a thousandfold: the tests measure the client, not a weak bomb.
    bomb = gzip.compress(b"[" + b"0," * (32 * CAP) + b"0]", compresslevel=9)
    assert len(bomb) < 128 * 1024
    assert len(zlib.decompress(bomb, zlib.MAX_WBITS | 16)) > 64 * CAP
