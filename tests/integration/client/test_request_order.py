"""The order in which waiting requests get a connection, as the API server sees them arrive.

A cycle's first write (the handlers' results) carries the object's ticket; the writes after it
(follow-ups: the marks) give way to the results of objects that came later, for a while.
"""

from __future__ import annotations

import contextlib
from functools import partial

import pytest
import trio
import trio.testing
from trioperator._client import http as http_module
from trioperator._client.credentials import ConnectionInfo
from trioperator._client.http import HTTPSession
from trioperator._util.ordering import current_ticket, next_ticket

CUSHION = 0.05  # for the bytes on loopback to reach the other side


class GatedServer:
    """Answers each request once its path's gate (if any) is open; records the arrivals."""

    def __init__(self) -> None:
        self.arrived: list[str] = []
        self.gates: dict[str, trio.Event] = {}
        self.port = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        buffer = bytearray()
        with contextlib.suppress(trio.BrokenResourceError):
            async with stream:
                while True:
                    while b"\r\n\r\n" not in buffer:
                        data = await stream.receive_some(65536)
                        if not data:
                            return
                        buffer.extend(data)
                    end = buffer.index(b"\r\n\r\n") + 4
                    head = bytes(buffer[:end])
                    length = 0
                    for line in head.lower().split(b"\r\n"):
                        if line.startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    while len(buffer) < end + length:
                        buffer.extend(await stream.receive_some(65536))
                    del buffer[: end + length]
                    path = head.split(b" ")[1].decode()
                    self.arrived.append(path)
                    gate = self.gates.get(path)
                    if gate is not None:
                        await gate.wait()
                    await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")


async def test_follow_up_writes_give_way_to_later_objects_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One request at a time: the order of arrival is the order the slots were given in.
    monkeypatch.setattr(http_module, "MAX_CONCURRENT_REQUESTS", 1)
    server = GatedServer()
    blocker = server.gates["/blocker"] = trio.Event()
    b_result = server.gates["/b"] = trio.Event()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1"))
        server.port = listeners[0].socket.getsockname()[1]
        session = HTTPSession(ConnectionInfo(server=f"http://127.0.0.1:{server.port}"))

        async def work(ticket: int, *paths: str) -> None:
            current_ticket.set(ticket)
            for path in paths:  # a cycle: its first write, then its follow-ups
                await session.request("PATCH", path, content=b"{}")

        async with trio.open_nursery() as clients:
            clients.start_soon(session.request, "GET", "/blocker")
            await trio.testing.wait_all_tasks_blocked(CUSHION)
            clients.start_soon(work, next_ticket(), "/a", "/a-body")
            clients.start_soon(work, next_ticket(), "/b")
            await trio.testing.wait_all_tasks_blocked(CUSHION)
            blocker.set()  # /a goes, then /b (held) while /a-body waits as a follow-up
            await trio.testing.wait_all_tasks_blocked(CUSHION)
            assert server.arrived == ["/blocker", "/a", "/b"]
            # An object that came after the follow-up began to wait: its result goes first.
            clients.start_soon(work, next_ticket(), "/c")
            await trio.testing.wait_all_tasks_blocked(CUSHION)
            b_result.set()
        await session.aclose()
        nursery.cancel_scope.cancel()
    assert server.arrived == ["/blocker", "/a", "/b", "/c", "/a-body"]
