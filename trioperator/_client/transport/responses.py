"""Reading responses: httptools (llhttp, in C) parses them, under the limits of untrusted input.

For the few headers and small JSON bodies of an API server's answers llhttp costs a tenth of
parsing in pure Python. The only module of the client that knows httptools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import httptools

__all__ = [
    "MAX_HEADERS",
    "MAX_HEAD_BYTES",
    "PARSE_ERRORS",
    "REASON_LENGTH",
    "ResponseReader",
    "announced_length",
]

MAX_HEAD_BYTES: Final = 64 * 1024
"""The most bytes of a response that may come without any of its body: its head (with any 1xx
heads before it) and its trailers. An API server's head is well under 1 KiB, and proxies add
little; 64 KiB is what common HTTP stacks accept, and it bounds what httptools accumulates of
a header arriving in many pieces."""

MAX_HEADERS: Final = 256
"""The most header lines of a response (its trailers included); an API server sends about ten."""

# How much of a reason phrase (or a refusing proxy's Location) is kept for messages.
REASON_LENGTH: Final = 256

PARSE_ERRORS: Final = (httptools.HttpParserError, httptools.HttpParserUpgrade)
"""What :meth:`ResponseReader.feed` raises for bytes that break HTTP."""


class ResponseReader:
    """One response as httptools parses it: status, headers, the body's bytes not yet taken.

    The parser calls the ``on_*`` methods as the bytes are fed. Whatever follows a complete
    response (the server is confused) is never parsed into another one: it only makes the
    connection unusable for the next request.
    """

    __slots__ = (
        "_informational",
        "_parser",
        "_repeated",
        "body",
        "body_size",
        "close_delimited",
        "complete",
        "head_done",
        "head_only",
        "header_count",
        "headers",
        "reason",
        "reusable",
        "status",
        "trailing",
        "unbodied",
    )

    def __init__(self, *, head_only: bool = False) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._informational = False
        self.head_only = head_only  # the answer to a HEAD request: no body, whatever it says
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.complete = False
        self.close_delimited = False  # the body ends where the connection does
        self.reusable = True
        self.trailing = False  # bytes came after the complete response
        self.body: list[bytes] = []
        self.body_size = 0  # bytes of body parsed so far (taken from ``body`` or not)
        self.header_count = 0  # header lines of this head, then of its trailers
        # Headers seen more than once, by name: all their values, joined once at the end of the
        # head (joining as they come would copy the value so far for each repetition).
        self._repeated: dict[str, list[str]] | None = None
        # Bytes fed in a row that brought no body: a head, 1xx heads, trailers (see Connection).
        self.unbodied = 0

    def feed(self, data: bytes | bytearray) -> None:
        """Parse the bytes; ``httptools.HttpParserError`` for a response that breaks HTTP."""
        if self.complete:
            self.trailing = True
            self.reusable = False
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            if not self.complete:
                raise
            self.trailing = True  # garbage after a complete response
            self.reusable = False

    def end(self) -> bool:
        """The connection ended: whether that completed the response (a close-delimited body)."""
        if self.head_done and not self.complete and self.close_delimited:
            self.complete = True
            self.reusable = False
        return self.complete

    def on_message_begin(self) -> None:
        if self.complete:
            self.trailing = True  # another response after the one asked for
            self.reusable = False

    def on_status(self, reason: bytes) -> None:
        # Called for each piece of the reason phrase as it arrives: only its beginning is kept
        # (it is only ever shown), so a long one that trickles in costs no copying.
        if not self.complete and len(self.reason) < REASON_LENGTH:
            self.reason = (self.reason + reason.decode("latin-1"))[:REASON_LENGTH]

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            return
        self.header_count += 1
        if self.header_count > MAX_HEADERS:
            return  # the response is refused after this read (see Connection.receive_into)
        # Names lower-cased; repeated headers are joined, as HTTP allows for lists.
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self.headers
        if key in headers:
            repeated = self._repeated
            if repeated is None:
                repeated = self._repeated = {}
            values = repeated.get(key)
            if values is None:
                repeated[key] = [headers[key], text]
            else:
                values.append(text)
        else:
            headers[key] = text

    def _join_repeated(self) -> None:
        repeated = self._repeated
        if repeated is not None:
            self._repeated = None
            headers = self.headers
            for key, values in repeated.items():
                headers[key] = ", ".join(values)

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            # 100 Continue, 103 Early Hints & co: the real answer follows, with its own head.
            self._informational = True
            self.headers = {}
            self._repeated = None
            self.header_count = 0
            self.reason = ""
            return
        self._join_repeated()
        self.status = status
        self.head_done = True
        headers = self.headers
        coding = headers.get("transfer-encoding")
        if coding is not None:
            self.close_delimited = not coding.rstrip().lower().endswith("chunked")
        else:
            self.close_delimited = "content-length" not in headers and status not in (204, 304)
        if self.head_only:
            # No body, whatever the head announces (llhttp does not know the request's method:
            # it would wait for that body). Each response has a parser of its own, so the
            # connection is reusable; bytes coming after this head are not.
            self.complete = True
            self.reusable = self._parser.should_keep_alive()

    def on_body(self, data: bytes) -> None:
        if self.complete:
            self.trailing = True  # after the head of a HEAD response
            self.reusable = False
        else:
            self.body.append(data)
            self.body_size += len(data)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self.complete:
            return
        self._join_repeated()  # of the trailers
        self.complete = True
        if self.close_delimited or not self._parser.should_keep_alive():
            self.reusable = False


def announced_length(headers: Mapping[str, str]) -> int | None:
    """The ``Content-Length`` of a response, if it has one that is a plain number."""
    value = headers.get("content-length")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:  # e.g. the same length repeated: llhttp judged it already
        return None
