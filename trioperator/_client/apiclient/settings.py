"""The bounds of the API client for operator code: timeouts, sizes, retries."""

from __future__ import annotations

import dataclasses

from trioperator._wire.watch import MAX_LINE_BYTES


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClientSettings:
    """How the API client times, bounds and retries its requests."""

    request_timeout: float = 60.0
    """Total time for one regular (non-watch) request, in seconds, retries not included."""

    connect_timeout: float = 10.0
    """Time to establish a connection (TCP and TLS)."""

    watch_timeout: float = 300.0
    """Asked of the server as ``timeoutSeconds`` when a watch gives none: it ends the stream."""

    watch_idle_timeout: float = 330.0
    """A watch stream with no data for this long is broken (bookmarks keep healthy ones busy)."""

    max_response_size: int = 64 * 1024 * 1024
    """The largest response body read (decompressed): a larger one raises
    ``APIResponseTooLargeError`` (a listing is better read in pages, see ``limit``)."""

    max_line_size: int = MAX_LINE_BYTES
    """The largest event of a watch stream."""

    retries: int = 3
    """Retries of 429, of 5xx and connection failures (the latter two for idempotent requests)."""

    backoff: float = 0.5
    """The first retry's delay in seconds; doubled for each next one."""

    max_backoff: float = 10.0
    """The longest delay between retries, also when the server's ``Retry-After`` asks for more."""

    relogins: int = 3
    """How many times one request may invalidate rejected (401) credentials and try again."""

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """The delay before retry number ``attempt`` (1-based): the server's wish, if any."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff)
        return min(self.backoff * 2.0 ** (attempt - 1), self.max_backoff)
