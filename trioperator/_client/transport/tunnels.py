"""Tunnels through HTTP(S) proxies: ``CONNECT`` to the origin, for TLS inside the tunnel."""

from __future__ import annotations

import trio

from trioperator._client.errors import APIConnectionError, APIProtocolError
from trioperator._client.transport.connections import Connection
from trioperator._client.transport.origins import Origin, Proxy
from trioperator._client.transport.requests import tunnel_request
from trioperator._client.transport.responses import REASON_LENGTH, ResponseReader

__all__ = ["open_tunnel"]


async def open_tunnel(stream: trio.abc.Stream, origin: Origin, proxy: Proxy, what: str) -> None:
    """Ask the proxy for a tunnel to the origin (``CONNECT``); raise unless it is open."""
    conn = Connection(stream)
    conn.what = what
    await conn.send(tunnel_request(origin, proxy))
    # A 2xx answer to CONNECT has no body: llhttp reads one until the end of the connection,
    # so whatever comes after the head shows as body bytes.
    reader = ResponseReader()
    try:
        await conn.receive_head(reader)
    except APIProtocolError:
        raise
    except APIConnectionError:
        raise conn.error(
            f"the proxy {proxy.url} closed the connection instead of a tunnel"
        ) from None
    if not 200 <= reader.status < 300:
        refusal = f"HTTP {reader.status} {reader.reason}".rstrip()
        location = reader.headers.get("location")
        if location is not None and 300 <= reader.status < 400:
            refusal += f" (to {location[:REASON_LENGTH]!r}, not followed)"
        raise conn.error(f"the proxy {proxy.url} refused the tunnel: {refusal}")
    if reader.body or reader.trailing:
        # The origin speaks only after the client's TLS hello: these bytes are the proxy's.
        conn.close()
        raise APIProtocolError(f"{what}: the proxy {proxy.url} sent data into the new tunnel")
