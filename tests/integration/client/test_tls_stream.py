"""The transport's TLS stream against trio's own TLS server stream, on loopback.

The server side is ``trio.SSLStream``, an independent TLS implementation on the same OpenSSL,
scripted per test: which TLS version it allows, how it ends the connection (with a TLS
close_notify, or by dropping TCP), and how it cuts its data into TLS records.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from functools import partial

import pytest
import trio
import trustme
from trio.testing import MockClock
from trioperator._client.transport.tls_stream import TLSStream

Script = Callable[[trio.SSLStream[trio.SocketStream]], Awaitable[None]]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def connect(
    nursery: trio.Nursery,
    ca: trustme.CA,
    script: Script,
    *,
    version: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED,
) -> TLSStream:
    """Start a one-connection TLS server running ``script``; the client's stream to it."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    if version is not ssl.TLSVersion.MAXIMUM_SUPPORTED:
        server_context.minimum_version = server_context.maximum_version = version

    async def serve(tcp: trio.SocketStream) -> None:
        tls = trio.SSLStream(tcp, server_context, server_side=True)
        await tls.do_handshake()
        await script(tls)

    listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    return await TLSStream.wrap(tcp, client_context, "127.0.0.1")


async def read_to_end(stream: TLSStream, size: int = 65536) -> bytes:
    parts = []
    while data := await stream.receive_some(size):
        parts.append(data)
    return b"".join(parts)


@pytest.mark.parametrize(
    ("version", "name"),
    [(ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")],
)
async def test_request_and_answer_over_each_tls_version(
    autojump_clock: MockClock,
    nursery: trio.Nursery,
    ca: trustme.CA,
    version: ssl.TLSVersion,
    name: str,
) -> None:
    async def echo(tls: trio.SSLStream[trio.SocketStream]) -> None:
        request = await tls.receive_some()
        await tls.send_all(b"echo:" + request)
        await tls.aclose()

    stream = await connect(nursery, ca, echo, version=version)
    try:
        assert stream.socket.version() == name
        await stream.send_all(b"x" * 100_000)  # more than one TLS record, more than one read
        # The server echoes what its first read got, which may be a part only.
        answer = await read_to_end(stream)
    finally:
        await stream.aclose()
    assert answer.startswith(b"echo:xxx")
    assert set(answer[5:]) == {ord("x")}


async def test_close_notify_is_the_end_of_the_stream_after_the_data(
    autojump_clock: MockClock, nursery: trio.Nursery, ca: trustme.CA
) -> None:
    async def goodbye(tls: trio.SSLStream[trio.SocketStream]) -> None:
        await tls.send_all(b"last words")
        await tls.aclose()  # TLS close_notify, then TCP close

    stream = await connect(nursery, ca, goodbye)
    try:
        assert await read_to_end(stream) == b"last words"
        assert await stream.receive_some() == b""  # and stays ended
    finally:
        await stream.aclose()


async def test_ragged_eof_is_the_end_of_the_stream_after_the_data(
    autojump_clock: MockClock, nursery: trio.Nursery, ca: trustme.CA
) -> None:
    async def drop(tls: trio.SSLStream[trio.SocketStream]) -> None:
        await tls.send_all(b"cut short")
        tls.transport_stream.socket.close()  # TCP closes without a TLS goodbye

    stream = await connect(nursery, ca, drop)
    try:
        # As HTTPS clients do (and trio's https_compatible): the HTTP framing above tells
        # whether anything is missing.
        assert await read_to_end(stream) == b"cut short"
    finally:
        await stream.aclose()


async def test_data_pending_in_the_ssl_object_is_read_without_waiting_for_the_socket(
    autojump_clock: MockClock, nursery: trio.Nursery, ca: trustme.CA
) -> None:
    sent = trio.Event()
    done = trio.Event()

    async def one_record(tls: trio.SSLStream[trio.SocketStream]) -> None:
        await tls.send_all(b"0123456789" * 10)  # one record of 100 bytes, then silence
        sent.set()
        await done.wait()

    stream = await connect(nursery, ca, one_record)
    try:
        await sent.wait()
        first = await stream.receive_some(10)
        # The rest of the record is decrypted already: the socket has nothing more to say,
        # so a read that waited for it would wait forever (here: fail at the deadline).
        assert stream.pending()
        rest = b""
        with trio.fail_after(5):
            while len(first + rest) < 100:
                rest += await stream.receive_some(7)
        assert not stream.pending()
    finally:
        done.set()
        await stream.aclose()
    assert first + rest == b"0123456789" * 10


async def test_records_already_received_are_read_together(
    autojump_clock: MockClock, nursery: trio.Nursery, ca: trustme.CA
) -> None:
    sent = trio.Event()
    done = trio.Event()

    async def many_records(tls: trio.SSLStream[trio.SocketStream]) -> None:
        for i in range(20):
            await tls.send_all(b'{"event": %d}\n' % i)  # a record each, as watch events come
        sent.set()
        await done.wait()
        await tls.aclose()

    stream = await connect(nursery, ca, many_records)
    try:
        await sent.wait()
        await trio.sleep(0.1)  # the loopback has delivered everything by now
        first = await stream.receive_some()
        done.set()
        rest = await read_to_end(stream)
    finally:
        await stream.aclose()
    assert first == b"".join(b'{"event": %d}\n' % i for i in range(20))
    assert rest == b""


async def test_a_broken_connection_after_data_comes_after_the_data(
    autojump_clock: MockClock, nursery: trio.Nursery, ca: trustme.CA
) -> None:
    sent = trio.Event()
    done = trio.Event()

    async def garbage_after_data(tls: trio.SSLStream[trio.SocketStream]) -> None:
        await tls.send_all(b"good")
        await tls.transport_stream.send_all(b"\x17\x03\x03\x00\x05junk!")  # a forged record
        sent.set()
        await done.wait()

    stream = await connect(nursery, ca, garbage_after_data)
    try:
        await sent.wait()
        await trio.sleep(0.1)
        assert await stream.receive_some() == b"good"
        with pytest.raises(ssl.SSLError):
            await stream.receive_some()
    finally:
        done.set()
        await stream.aclose()


async def test_a_closed_stream_is_closed_for_good(
    autojump_clock: MockClock, nursery: trio.Nursery, ca: trustme.CA
) -> None:
    done = trio.Event()

    async def silent(tls: trio.SSLStream[trio.SocketStream]) -> None:
        await done.wait()

    stream = await connect(nursery, ca, silent)
    await stream.aclose()
    done.set()
    assert stream.socket.fileno() == -1
    with pytest.raises(OSError):
        await stream.send_all(b"after close")
