"""Compressed bodies (gzip, deflate): inflated as they come, in bounded pieces."""

from __future__ import annotations

import zlib
from typing import Final

from trioperator._client.errors import APIProtocolError
from trioperator._client.transport.connections import Connection

__all__ = ["INFLATE_PIECE", "decoder_for", "decompress"]

# The most decompressed bytes one read of a streamed body hands on at once: a small compressed
# read may inflate a thousandfold, so the rest is kept compressed for the next call.
INFLATE_PIECE: Final = 1024 * 1024


def decompress(
    decoder: zlib._Decompress, data: bytes, conn: Connection, max_length: int = 0
) -> bytes:
    """Inflate ``data``: at most ``max_length`` bytes (0: all), the rest of the input kept in
    ``decoder.unconsumed_tail``."""
    try:
        return decoder.decompress(data, max_length)
    except zlib.error as exc:
        conn.close()
        raise APIProtocolError(f"{conn.what}: malformed compressed body: {exc}") from exc


def decoder_for(encoding: str | None) -> zlib._Decompress | None:
    if not encoding or encoding == "identity":
        return None
    if encoding == "gzip":
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return zlib.decompressobj()
    # We only ever ask for gzip; anything else is passed through as the server sent it.
    return None
