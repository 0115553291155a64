"""A misbehaving loopback proxy between an operator and the API server, on trio.

The operator speaks plain HTTP to the proxy (its kubeconfig points to ``http://127.0.0.1:PORT``
with the real token); the proxy speaks TLS to the API server. Seeing the requests in clear text
lets it answer some of them itself (429 with ``Retry-After``, 5xx) and tell watch requests from
the others. Each forwarded request goes upstream with ``Connection: close``, so the response
ends when the upstream connection does and can be relayed byte by byte, without framing.

The faults come from :class:`Policy`, whose plain attributes the test changes at any time from
its own thread (the proxy runs ``trio.run`` in a background thread):

- ``reset``: that share of connections is reset (RST) instead of being forwarded;
- ``truncate``: that share of responses is cut off after a random number of bytes;
- ``delay``: that share of requests waits ``delay_seconds`` before it is forwarded;
- ``answer``: that share of non-watch requests gets ``answer_status`` from the proxy itself;
- ``stall_watches``: watch responses get no bytes at all (the socket stays open) while set.
"""

from __future__ import annotations

import json
import random
import socket
import ssl
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field

import trio

REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass
class Policy:
    reset: float = 0.0
    truncate: float = 0.0
    delay: float = 0.0
    delay_seconds: tuple[float, float] = (0.2, 1.5)
    answer: float = 0.0
    answer_status: int = 429
    retry_after: int = 1
    stall_watches: bool = False
    seed: int = 12
    counts: Counter[str] = field(default_factory=Counter)
    """What the proxy did: forwarded, reset, truncated, delayed, answered, stalled, gone (410)."""

    def clear(self) -> None:
        self.reset = self.truncate = self.delay = self.answer = 0.0
        self.stall_watches = False


def _status_json(code: int, retry_after: int | None) -> bytes:
    body: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"injected by the chaos proxy: {code}",
        "reason": REASONS.get(code, "InternalError").replace(" ", ""),
        "code": code,
    }
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return json.dumps(body).encode()


class Proxy:
    """Run with :meth:`start` (a background thread); :meth:`stop` ends it and all connections."""

    def __init__(self, upstream_port: int, cafile: str, policy: Policy | None = None) -> None:
        self.upstream_port = upstream_port
        self.ssl_context = ssl.create_default_context(cafile=cafile)
        self.policy = policy or Policy()
        self.port = 0
        self._random = random.Random(self.policy.seed)
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._generation = 0

    # ------------------------------------------------------------ control (any thread)

    def start(self) -> int:
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the chaos proxy did not start")
        return self.port

    def stop(self) -> None:
        if self._token is not None and self._scope is not None:
            trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        if self._thread is not None:
            self._thread.join(10)

    def cut_all(self) -> None:
        """Reset every open connection now (e.g. to make watches resume after a stall)."""
        self._generation += 1

    # ------------------------------------------------------------ the proxy (trio thread)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as self._scope:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            self.port = listeners[0].socket.getsockname()[1]
            self._ready.set()
            await trio.serve_listeners(self._handle, listeners)

    def _chance(self, share: float) -> bool:
        return share > 0 and self._random.random() < share

    async def _handle(self, client: trio.SocketStream) -> None:
        generation = self._generation
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_generation, generation, client, nursery.cancel_scope)
            try:
                await self._serve(client)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError):
                pass
            finally:
                nursery.cancel_scope.cancel()
        await trio.aclose_forcefully(client)

    async def _watch_generation(
        self, generation: int, client: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        while self._generation == generation:  # noqa: ASYNC110 -- set from another thread
            await trio.sleep(0.05)
        _rst(client)
        scope.cancel()

    async def _serve(self, client: trio.SocketStream) -> None:
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                data = await client.receive_some(65536)
                if not data:
                    return
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(buffer) < length:
                data = await client.receive_some(65536)
                if not data:
                    return
                buffer += data
            body, buffer = buffer[:length], buffer[length:]
            target = lines[0].split(b" ")[1] if len(lines[0].split(b" ")) > 1 else b""
            watch = b"watch=true" in target or b"watch=1" in target or b"/watch/" in target
            policy = self.policy

            if self._chance(policy.reset):
                policy.counts["reset"] += 1
                _rst(client)
                return
            if not watch and self._chance(policy.answer):
                policy.counts[f"answered {policy.answer_status}"] += 1
                retry = policy.retry_after if policy.answer_status == 429 else None
                payload = _status_json(policy.answer_status, retry)
                extra = f"Retry-After: {retry}\r\n" if retry is not None else ""
                reason = REASONS.get(policy.answer_status, "Error")
                head = (
                    f"HTTP/1.1 {policy.answer_status} {reason}\r\n{extra}"
                    "Content-Type: application/json\r\n"
                    f"Content-Length: {len(payload)}\r\n\r\n"
                )
                await client.send_all(head.encode() + payload)
                continue
            if self._chance(policy.delay):
                policy.counts["delayed"] += 1
                await trio.sleep(self._random.uniform(*policy.delay_seconds))
            kept = [line for line in lines[1:] if not line.lower().startswith(b"connection:")]
            upstream_head = b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n"
            await self._forward(client, upstream_head + body, watch=watch)
            return

    async def _forward(self, client: trio.SocketStream, request: bytes, *, watch: bool) -> None:
        policy = self.policy
        upstream = await trio.open_ssl_over_tcp_stream(
            "127.0.0.1", self.upstream_port, ssl_context=self.ssl_context
        )
        try:
            await upstream.send_all(request)
            policy.counts["forwarded"] += 1
            cut_after = self._random.randint(20, 3000) if self._chance(policy.truncate) else None
            sent = 0
            stalled = False
            while True:
                if watch and policy.stall_watches:
                    if not stalled:
                        policy.counts["stalled"] += 1
                        stalled = True
                    await trio.sleep(0.05)
                    continue
                try:
                    data = await upstream.receive_some(65536)
                except (trio.BrokenResourceError, ssl.SSLError):
                    data = b""
                if not data:
                    return
                if b'"code":410' in data or data.startswith(b"HTTP/1.1 410"):
                    policy.counts["gone (410)"] += 1
                if cut_after is not None and sent + len(data) > cut_after:
                    await client.send_all(data[: max(0, cut_after - sent)])
                    policy.counts["truncated"] += 1
                    _rst(client)
                    return
                await client.send_all(data)
                sent += len(data)
        finally:
            await trio.aclose_forcefully(upstream)


def _rst(stream: trio.SocketStream) -> None:
    """Make the next close a reset (RST) rather than an orderly FIN."""
    try:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
