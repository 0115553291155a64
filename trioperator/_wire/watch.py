"""Watch-stream events: one JSON document per line, decoded once by a reused decoder.

A watch response is a stream of lines such as
``{"type": "ADDED", "object": {...}}``. The object is kept as a plain dict: the framework hands
it to user code as the body, and Kubernetes objects may carry any fields, so no schema is imposed
on it (unknown fields are never rejected, here or in the envelope).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import msgspec

__all__ = [
    "MAX_LINE_BYTES",
    "LineSplitter",
    "LineTooLongError",
    "WatchEvent",
    "WatchLineError",
    "decode_watch_line",
]


class WatchEvent(msgspec.Struct):
    """The envelope of one watch event.

    ``type`` is ``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK`` or ``ERROR`` (for ``ERROR``,
    ``object`` is a ``metav1.Status``). Other types are passed through for the caller to judge.
    """

    type: str
    object: dict[str, Any]


class WatchLineError(ValueError):
    """A line of a watch stream is not a watch event (broken JSON, or the wrong shape)."""

    def __init__(self, message: str, line: bytes) -> None:
        super().__init__(message)
        self.line = line


# Built once: a msgspec decoder compiles its type plan at construction, so reusing it
# for every line is what makes decoding cheap on busy streams.
_EVENT_DECODER: msgspec.json.Decoder[WatchEvent] = msgspec.json.Decoder(WatchEvent)

_EXCERPT = 200


def decode_watch_line(line: bytes) -> WatchEvent:
    """Decode one line of a watch stream, or raise :class:`WatchLineError`."""
    try:
        return _EVENT_DECODER.decode(line)
    # ValidationError is a DecodeError (wrong shape); bytes that are not UTF-8 in a string
    # raise UnicodeDecodeError instead, which must not end the stream either.
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        excerpt = line[:_EXCERPT]
        more = "..." if len(line) > _EXCERPT else ""
        raise WatchLineError(f"Not a watch event ({exc}): {excerpt!r}{more}", line) from exc


MAX_LINE_BYTES = 64 * 1024 * 1024
"""The default longest line: an object is at most ~1.5 MiB in etcd by default, so a longer line
is garbage (or an attack) and would only grow the operator's memory while it arrives. The
client sets its own (``settings.networking.max_response_size``)."""


class LineTooLongError(ValueError):
    """A line grew past the splitter's limit before its end came."""

    def __init__(self, limit: int, size: int) -> None:
        super().__init__(f"a line exceeds {limit} bytes ({size} bytes so far, not ended)")
        self.limit = limit
        self.size = size


class LineSplitter:
    """Cut a byte stream into lines, whatever the chunking and however long the lines.

    Objects of several MiB arrive as one line spread over many chunks; the pieces of an
    unfinished line are collected in a list and joined once, so a long line costs linear time.
    Blank lines are dropped. Feed chunks with :meth:`feed`, take complete lines with
    :meth:`pop`, and call :meth:`finish` at the end of the stream to flush an unterminated line.

    A line longer than ``max_line`` bytes raises :class:`LineTooLongError` from :meth:`feed` as
    soon as it has grown past the limit, and its pieces are dropped: no event may be longer, so
    the stream is broken, and skipping the line would silently lose an event; the reader ends
    the stream instead (and resumes it from the last version it got, after a backoff).
    """

    __slots__ = ("_max_line", "_partial", "_ready", "_size")

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._partial: list[bytes] = []
        self._ready: deque[bytes] = deque()
        self._max_line = max_line
        self._size = 0  # bytes in _partial

    def feed(self, chunk: bytes) -> None:
        if b"\n" not in chunk:
            self._add(chunk)
            return
        pieces = chunk.split(b"\n")
        self._add(pieces[0])
        if self._partial:
            pieces[0] = self._take()
        tail = pieces.pop()
        limit = self._max_line
        if len(chunk) > limit:
            # Only a chunk longer than the limit can hold a whole line that is: checked per
            # chunk, and only then per line.
            for piece in pieces:
                if len(piece) > limit:
                    raise LineTooLongError(limit, len(piece))
        self._ready.extend(piece for piece in pieces if piece and not piece.isspace())
        self._add(tail)

    def _add(self, piece: bytes) -> None:
        if not piece:
            return
        self._partial.append(piece)
        self._size += len(piece)
        if self._size > self._max_line:
            size = self._size
            self._partial.clear()
            self._size = 0
            raise LineTooLongError(self._max_line, size)

    def _take(self) -> bytes:
        """The line ending here: the collected pieces."""
        line = self._partial[0] if len(self._partial) == 1 else b"".join(self._partial)
        self._partial.clear()
        self._size = 0
        return line

    def finish(self) -> None:
        """The stream has ended: whatever is left is the last line, if it is not blank."""
        last = self._take() if self._partial else b""
        if last and not last.isspace():
            self._ready.append(last)

    def pop(self) -> bytes | None:
        """The next complete line, or ``None`` if more data is needed."""
        return self._ready.popleft() if self._ready else None

    @property
    def pending(self) -> int:
        """How many bytes of an unfinished line are buffered."""
        return self._size
