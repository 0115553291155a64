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

__all__ = ["LineSplitter", "WatchEvent", "WatchLineError", "decode_watch_line"]


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
    except msgspec.DecodeError as exc:  # ValidationError is a subclass: wrong shape
        excerpt = line[:_EXCERPT]
        more = "..." if len(line) > _EXCERPT else ""
        raise WatchLineError(f"Not a watch event ({exc}): {excerpt!r}{more}", line) from exc


class LineSplitter:
    """Cut a byte stream into lines, whatever the chunking and however long the lines.

    Objects of several MiB arrive as one line spread over many chunks; the pieces of an
    unfinished line are collected in a list and joined once, so a long line costs linear time.
    Blank lines are dropped. Feed chunks with :meth:`feed`, take complete lines with
    :meth:`pop`, and call :meth:`finish` at the end of the stream to flush an unterminated line.
    """

    __slots__ = ("_partial", "_ready")

    def __init__(self) -> None:
        self._partial: list[bytes] = []
        self._ready: deque[bytes] = deque()

    def feed(self, chunk: bytes) -> None:
        if b"\n" not in chunk:
            if chunk:
                self._partial.append(chunk)
            return
        pieces = chunk.split(b"\n")
        if self._partial:
            self._partial.append(pieces[0])
            pieces[0] = b"".join(self._partial)
            self._partial.clear()
        tail = pieces.pop()
        if tail:
            self._partial.append(tail)
        self._ready.extend(piece for piece in pieces if piece and not piece.isspace())

    def finish(self) -> None:
        """The stream has ended: whatever is left is the last line, if it is not blank."""
        if self._partial:
            last = b"".join(self._partial)
            self._partial.clear()
            if not last.isspace():
                self._ready.append(last)

    def pop(self) -> bytes | None:
        """The next complete line, or ``None`` if more data is needed."""
        return self._ready.popleft() if self._ready else None

    @property
    def pending(self) -> int:
        """How many bytes of an unfinished line are buffered."""
        return sum(len(part) for part in self._partial)
