"""Hostile clients against the operator's HTTP servers (webhooks, liveness, metrics).

Each test runs the server in this process on loopback with small limits, attacks it with raw
sockets (bounded in count), and drives time with a mock clock: a connection is shown open
just before its deadline and closed (or answered with an error) just after it. The clients
are plain blocking sockets used without blocking (``MSG_DONTWAIT``), so that they never wait
on the mock clock themselves.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial

import pytest
import trio
import trio.testing
import trustme
from trioperator._engine.settings import ServingSettings
from trioperator._runtime.support.httpserver import Request, Response, serve_http

LIMITS = ServingSettings(
    handshake_timeout=5,
    idle_timeout=20,
    header_timeout=5,
    body_timeout=10,
    send_timeout=10,
    max_connections=8,
    max_header_size=4096,
    max_body_size=512 * 1024,
    max_buffered=256 * 1024,
)


@dataclasses.dataclass
class Served:
    port: int
    requests: list[Request] = dataclasses.field(default_factory=list)
    in_handler: int = 0
    release: trio.Event | None = None
    """When set, handlers wait for it: requests stay in flight."""

    async def handle(self, request: Request) -> Response:
        self.requests.append(request)
        self.in_handler += 1
        try:
            if self.release is not None:
                await self.release.wait()
        finally:
            self.in_handler -= 1
        return Response(200, b'{"size": %d}' % len(request.body))


@asynccontextmanager
async def serving(
    limits: ServingSettings = LIMITS, context: ssl.SSLContext | None = None
) -> AsyncIterator[Served]:
    served = Served(port=0)
    async with trio.open_nursery() as nursery:
        serve = partial(
            serve_http, served.handle, host="127.0.0.1", limits=limits, ssl_context=context
        )
        listeners = await nursery.start(serve)
        served.port = listeners[0].socket.getsockname()[1]
        yield served
        nursery.cancel_scope.cancel()


@contextmanager
def clients(port: int, count: int) -> Iterator[list[socket.socket]]:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()


def read(sock: socket.socket) -> tuple[bytes, bool]:
    """What the server sent since the last read, and whether it closed the connection."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(1024 * 1024, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return b"".join(chunks), False
        except ConnectionResetError:
            return b"".join(chunks), True
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)


def state(sock: socket.socket) -> bytes | None:
    """What the server sent (``b""``: it closed the connection without a word); ``None``:
    nothing yet, and the connection is open."""
    data, closed = read(sock)
    return data if data or closed else None


async def settle() -> None:
    """Let the server take in what the clients sent, and act on it."""
    await trio.testing.wait_all_tasks_blocked(cushion=0.01)


def status_of(reply: bytes | None) -> int:
    assert reply, reply
    return int(reply.split(b" ", 2)[1])


GET = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"


async def test_idle_connections_are_closed_at_the_idle_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with serving() as served:
        with clients(served.port, 5) as socks:
            await settle()
            mock_clock.jump(19.9)
            await settle()
            assert [state(sock) for sock in socks] == [None] * 5
            mock_clock.jump(0.2)
            await settle()
            assert [state(sock) for sock in socks] == [b""] * 5


async def test_tls_connections_that_never_say_hello_are_closed_at_the_handshake_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    async with serving(context=context) as served:
        with clients(served.port, 5) as socks:
            await settle()
            mock_clock.jump(4.9)
            await settle()
            assert [state(sock) for sock in socks] == [None] * 5
            mock_clock.jump(0.2)
            await settle()
            assert [state(sock) for sock in socks] == [b""] * 5


async def test_a_slowly_trickled_head_gets_408_at_the_header_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with serving() as served:
        with clients(served.port, 1) as (sock,):
            for byte in GET[:5]:  # a byte a second: every read is in time, the whole head not
                sock.send(bytes([byte]))
                await settle()
                mock_clock.jump(0.99)
            await settle()
            assert state(sock) is None
            mock_clock.jump(0.2)  # 5 seconds after the first byte
            await settle()
            assert status_of(state(sock)) == 408
            assert served.requests == []


async def test_a_body_larger_than_allowed_is_refused_before_it_is_sent() -> None:
    async with serving() as served:
        with clients(served.port, 1) as (sock,):
            sock.sendall(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 104857600\r\n\r\n")
            await settle()
            reply = state(sock)
            assert status_of(reply) == 413
            assert reply is not None
            assert reply.endswith(b"exceeds 524288 bytes.")
            assert served.requests == []


async def test_a_body_that_never_comes_gets_408_at_the_body_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with serving() as served:
        with clients(served.port, 1) as (sock,):
            sock.sendall(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{")
            await settle()
            mock_clock.jump(9.9)
            await settle()
            assert state(sock) is None
            mock_clock.jump(0.2)
            await settle()
            assert status_of(state(sock)) == 408


async def test_at_the_cap_the_longest_waiting_connections_make_room_for_new_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cap = LIMITS.max_connections or 0
    async with serving() as served:
        with clients(served.port, cap) as oldest:
            await settle()
            with clients(served.port, 20) as newer:
                await settle()
                assert [state(sock) for sock in oldest] == [b""] * cap
                states = [state(sock) for sock in newer]
                assert states.count(b"") == 20 - cap
                assert states.count(None) == cap
                # A newcomer with a request (a probe, the API server) is served at once.
                with clients(served.port, 1) as (probe,):
                    probe.sendall(GET)
                    await settle()
                    assert status_of(state(probe)) == 200
    notes = [r for r in caplog.records if "that had not sent a request" in r.getMessage()]
    assert len(notes) == 1  # once per period, with a count
    assert notes[0].exc_info is None


async def test_kept_alive_connections_go_after_those_that_never_sent_a_request() -> None:
    cap = LIMITS.max_connections or 0
    async with serving() as served:
        with clients(served.port, 1) as (kept,):
            kept.sendall(GET)  # like the API server: a review, then the connection kept alive
            await settle()
            assert status_of(state(kept)) == 200
            with clients(served.port, cap + 10) as crowd:
                await settle()
                assert state(kept) is None  # still open: the crowd made room among itself
                assert [state(sock) for sock in crowd].count(b"") == 11
                kept.sendall(GET)
                await settle()
                assert status_of(state(kept)) == 200


async def test_silent_tls_connections_make_room_for_a_real_client_too() -> None:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)

    def get() -> bytes:
        raw = socket.create_connection(("127.0.0.1", served.port), timeout=10)
        with client_context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(GET)
            return tls.recv(1024)

    async with serving(context=context) as served:
        with clients(served.port, LIMITS.max_connections or 0) as silent:
            await settle()
            reply = await trio.to_thread.run_sync(get)
            assert status_of(reply) == 200
            await settle()
            assert sorted(state(sock) is None for sock in silent).count(False) == 1


async def test_when_every_connection_is_busy_newcomers_are_refused_and_other_servers_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cap = LIMITS.max_connections or 0
    async with serving() as attacked, serving() as probes:
        attacked.release = trio.Event()
        with clients(attacked.port, cap) as busy:
            for sock in busy:
                sock.sendall(GET)
            await settle()
            assert attacked.in_handler == cap
            with clients(attacked.port, 30) as refused:
                await settle()
                assert [state(sock) for sock in refused] == [b""] * 30
            # The other server (e.g. the liveness endpoint beside the webhooks) has its own.
            with clients(probes.port, 1) as (probe,):
                probe.sendall(GET)
                await settle()
                assert status_of(state(probe)) == 200
            attacked.release.set()
            attacked.release = None
            await settle()
            assert [status_of(state(sock)) for sock in busy] == [200] * cap
            with clients(attacked.port, 1) as (late,):
                late.sendall(GET)
                await settle()
                assert status_of(state(late)) == 200
    refusals = [r for r in caplog.records if "Refused connections" in r.getMessage()]
    assert len(refusals) == 1  # once per period, with a count
    assert refusals[0].exc_info is None


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(os.urandom(64).replace(b"\n", b"") + b"\r\n\r\n", id="random-bytes"),
        pytest.param(b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", id="broken-header"),
        pytest.param(b"POST / HTTP/1.1\r\ncontent-length: -5\r\n\r\n", id="negative-length"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" * 4, id="tls-to-plain"),
    ],
)
async def test_malformed_requests_get_400_and_one_log_line(
    garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trioperator")
    async with serving() as served:
        with clients(served.port, 1) as (sock,):
            sock.sendall(garbage)
            await settle()
            assert status_of(state(sock)) == 400
        with clients(served.port, 1) as (sock,):  # and the server goes on serving
            sock.sendall(GET)
            await settle()
            assert status_of(state(sock)) == 200
    lines = [r for r in caplog.records if r.name.startswith("trioperator")]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.WARNING
    assert lines[0].getMessage().startswith("Answered 400 to 127.0.0.1:")
    assert lines[0].exc_info is None


async def test_an_oversized_head_gets_431() -> None:
    async with serving() as served:
        with clients(served.port, 1) as (sock,):
            # h11 bounds the part of a head that has not ended yet (one read may hold more).
            sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nx-filler: " + b"a" * 8000)
            await settle()
            assert status_of(state(sock)) == 431
            assert served.requests == []


async def test_a_request_in_too_many_tiny_pieces_is_refused() -> None:
    head = b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 400\r\n\r\n"
    async with serving() as served:
        with clients(served.port, 1) as (sock,):
            sock.sendall(head)
            await settle()
            sent = 0
            try:
                while sent < 400:  # one byte per read of the server
                    sock.send(b" ")
                    sent += 1
                    await settle()
            except OSError:  # the server hung up before it had all
                pass
            assert 200 <= sent < 400
            assert status_of(state(sock)) == 400
            assert served.requests == []


async def test_a_few_small_pieces_are_fine() -> None:
    async with serving() as served:
        with clients(served.port, 1) as (sock,):
            for piece in (b"POST /x HTTP/1.1\r\n", b"host: x\r\n", b"content-length: 2\r\n\r\n"):
                sock.send(piece)
                await settle()
            sock.send(b"{}")
            await settle()
            assert status_of(state(sock)) == 200
            assert [r.body for r in served.requests] == [b"{}"]


async def until(condition: Callable[[], bool]) -> None:
    """Wait for something that must happen (bytes of large bodies move between the kernel's
    buffers at their own pace); 10 seconds at most."""
    with trio.fail_after(10):
        while not condition():  # noqa: ASYNC110 -- kernel buffers have no trio.Event
            await trio.sleep(0.01)


async def test_large_bodies_in_memory_at_once_are_bounded_by_the_budget() -> None:
    # 200 KiB bodies, of which 136 KiB count (the first 64 KiB of each are free): one fits the
    # 256 KiB budget, a second waits until the first is answered; small ones never wait.
    large = b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 204800\r\n\r\n" + b"x" * 204800
    small = b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n" + b"x" * 1000
    large_in_handler = most_large_in_handler = 0
    release = trio.Event()
    sizes: list[int] = []

    async def handle(request: Request) -> Response:
        nonlocal large_in_handler, most_large_in_handler
        sizes.append(len(request.body))
        if len(request.body) < 64 * 1024:
            return Response(200, b"{}")
        large_in_handler += 1
        most_large_in_handler = max(most_large_in_handler, large_in_handler)
        await release.wait()
        large_in_handler -= 1
        return Response(200, b"{}")

    async with trio.open_nursery() as nursery:
        serve = partial(serve_http, handle, host="127.0.0.1", limits=LIMITS)
        port = (await nursery.start(serve))[0].socket.getsockname()[1]
        with clients(port, 4) as socks:
            for sock in socks[:3]:
                await trio.to_thread.run_sync(sock.sendall, large)
            socks[3].sendall(small)
            replies: list[bytes] = [b""] * 4

            def answered(*which: int) -> bool:
                for index in which:
                    replies[index] += state(socks[index]) or b""
                return all(replies[index] for index in which)

            await until(lambda: answered(3))  # the small one did not wait for the large ones
            assert large_in_handler == 1
            release.set()
            await until(lambda: answered(0, 1, 2))
        nursery.cancel_scope.cancel()
    assert [status_of(reply) for reply in replies] == [200] * 4
    assert sorted(sizes) == [1000, 204800, 204800, 204800]
    assert most_large_in_handler == 1


async def test_a_large_body_that_waits_for_the_budget_past_its_deadline_gets_503(
    mock_clock: trio.testing.MockClock,
) -> None:
    # The first large body holds the budget (its handler waits); the second waits for its
    # share until the body timeout: 503 for it, and the server goes on serving the others.
    # (It used to raise UnboundLocalError out of the server, which stopped the operator.)
    large = b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 204800\r\n\r\n" + b"x" * 204800
    async with serving() as served:
        served.release = trio.Event()
        with clients(served.port, 3) as (first, second, small):
            await trio.to_thread.run_sync(first.sendall, large)
            await settle()
            assert served.in_handler == 1
            second.sendall(large[:1000])
            await settle()
            mock_clock.jump(9.9)
            await settle()
            assert state(second) is None
            mock_clock.jump(0.2)
            await settle()
            assert status_of(state(second)) == 503
            served.release.set()
            await settle()
            assert status_of(state(first)) == 200
            small.sendall(GET)
            await settle()
            assert status_of(state(small)) == 200


async def test_a_peer_that_does_not_read_its_answer_is_dropped_at_the_send_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    big = b"x" * (64 * 1024 * 1024)

    async def handle(request: Request) -> Response:
        return Response(200, big)

    async with trio.open_nursery() as nursery:
        serve = partial(serve_http, handle, host="127.0.0.1", limits=LIMITS)
        listeners = await nursery.start(serve)
        port = listeners[0].socket.getsockname()[1]
        with clients(port, 1) as (sock,):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(GET)
            await settle()
            mock_clock.jump(9.9)
            await settle()
            received, closed = read(sock)
            assert received.startswith(b"HTTP/1.1 200")
            assert not closed
            mock_clock.jump(0.2)
            await settle()
            rest, closed = read(sock)
            assert closed
            assert len(received) + len(rest) < len(big)  # cut, not finished
        nursery.cancel_scope.cancel()
