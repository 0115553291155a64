"""Writing requests: h11 validates each one; its bytes are those an h11 connection writes.

The one place that writes HTTP requests, the tunnels' ``CONNECT`` included, and with
``responses.py`` the only modules of the client that know an HTTP library (h11 here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeAlias

import h11

from trioperator._client.transport.origins import Origin, Proxy

__all__ = [
    "RequestRefused",
    "Validated",
    "header_block",
    "serialize_request",
    "tunnel_request",
    "write_request",
]

RequestRefused = h11.LocalProtocolError
"""A request that h11 refuses to send (a bad header, method or target)."""

Validated: TypeAlias = dict[
    tuple[tuple[tuple[str, str], ...], int | None], tuple[h11.Request, bytes]
]
"""Validated requests and their header lines, by (headers, body length): see
:func:`serialize_request`; one per pool."""

# Headers that frame a request: set by the transport only.
FRAMING: Final = frozenset({"host", "content-length", "transfer-encoding"})
# Sets of validated request headers kept per pool (see TransportPool._serialize).
VALIDATED_HEADERS: Final = 256


def header_block(request: h11.Request) -> bytes:
    """The header lines of a request validated by h11, as h11 writes them: Host first.

    Made once per set of headers (see ``TransportPool._serialize``) from public names only:
    the headers h11 has validated and normalized, in their raw spelling.
    """
    items = request.headers.raw_items()
    hosts = [item for item in items if item[0].lower() == b"host"]
    others = [item for item in items if item[0].lower() != b"host"]
    return b"".join(b"%s: %s\r\n" % item for item in (*hosts, *others)) + b"\r\n"


def write_request(request: h11.Request, content: bytes | None, header_block: bytes) -> bytes:
    """A whole request: its line, its header lines (h11's, see above), and the body as it is.

    What an h11 connection writes for a request with a ``Content-Length`` (the only framing this
    transport uses), without its state machine, which costs two thirds of writing a request (three
    events, the framing looked up in the headers, the states checked) and decides nothing here.
    ``tests/integration/client/test_h11_transport.py`` holds it to the connection's bytes.
    """
    line = b"%s %s HTTP/1.1\r\n" % (request.method, request.target)
    return line + header_block + content if content else line + header_block


def serialize_request(
    origin: Origin,
    validated: Validated,
    method: str,
    target: str,
    headers: Mapping[str, str],
    content: bytes | None,
) -> bytes:
    """The request's bytes as h11 writes them.

    The framing is the transport's alone: the body (always fully known) goes with its
    ``Content-Length``, and a caller's own ``Content-Length``, ``Transfer-Encoding`` or
    ``Host`` is refused, since h11 would send it next to ours (e.g. both a length and
    chunking, which servers and proxies may read differently). h11 validates the rest.

    h11 validates each request; :func:`write_request` writes it. Its validation of the header
    lines, a third of its cost, is done once per set of headers (and body length), and so
    is the writing of those lines: the next requests with the same headers reuse both
    (``validated``); the method and the target are validated each time.
    """
    key = (tuple(headers.items()), None if content is None else len(content))
    full_target = origin.target_base + target
    cached = validated.get(key)
    if cached is not None:
        first, block = cached
        request = h11.Request(method=method, target=full_target, headers=first.headers)
    else:
        items: list[tuple[str, str]] = [("Host", origin.host_header)]
        for name, value in headers.items():
            if name.lower() in FRAMING:
                raise h11.LocalProtocolError(f"the {name} header is the transport's to set")
            items.append((name, value))
        if origin.proxy is not None and not origin.tls and origin.proxy.authorization:
            items.append(("Proxy-Authorization", origin.proxy.authorization))
        if content is not None:
            items.append(("Content-Length", str(len(content))))
        request = h11.Request(method=method, target=full_target, headers=items)
        block = header_block(request)
        if len(validated) >= VALIDATED_HEADERS:
            validated.clear()  # e.g. bodies of many lengths: start over, stay small
        validated[key] = (request, block)
    return write_request(request, content, block)


def tunnel_request(origin: Origin, proxy: Proxy) -> bytes:
    """The ``CONNECT`` request that asks the proxy for a tunnel to the origin."""
    headers = [("Host", origin.authority)]
    if proxy.authorization:
        headers.append(("Proxy-Authorization", proxy.authorization))
    request = h11.Request(method="CONNECT", target=origin.authority, headers=headers)
    return write_request(request, None, header_block(request))
