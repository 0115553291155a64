"""Reading a watch stream's events for the API client (no I/O): versions, bookmarks, errors."""

from __future__ import annotations

from typing import Any

import msgspec

from trioperator._client.apiclient.calls import error_of
from trioperator._client.errors import APIProtocolError
from trioperator._wire.watch import WatchLineError, decode_watch_line

__all__ = ["WatchState"]

_ENCODER = msgspec.json.Encoder()


class WatchState:
    """Follows one watch: the newest resourceVersion, and what each line means to the caller."""

    def __init__(self, resource_version: str | None, *, bookmarks: bool) -> None:
        self.resource_version = resource_version
        self.bookmarks = bookmarks

    def interpret(self, line: bytes) -> tuple[str, dict[str, Any]] | None:
        """The event of a line for the caller; ``None`` for one to skip (a bookmark).

        An ``ERROR`` event raises the error its Status describes (e.g. ``APIGoneError`` for an
        expired resourceVersion); a line that is not an event raises ``APIProtocolError``.
        """
        try:
            event = decode_watch_line(line)
        except WatchLineError as exc:
            raise APIProtocolError(f"A watch stream sent a broken event: {exc}") from None
        obj = event.object
        if event.type == "ERROR":
            code = obj.get("code")
            status = code if isinstance(code, int) and 400 <= code <= 599 else 500
            raise error_of(status, _ENCODER.encode(obj), {})
        meta = obj.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if isinstance(version, str) and version:
            self.resource_version = version
        if event.type == "BOOKMARK" and not self.bookmarks:
            return None
        return event.type, obj
