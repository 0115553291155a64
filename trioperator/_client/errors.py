"""Errors of the Kubernetes API, one class per HTTP status that the framework treats specially.

The hierarchy follows Kopf's, so ``except kopf.APIConflictError`` keeps working::

    APIError
    ├── APIRedirectError (3xx: never followed, see below)
    ├── APIClientError (4xx)
    │   ├── APIBadRequestError (400)
    │   ├── APIUnauthorizedError (401)
    │   ├── APIForbiddenError (403)
    │   ├── APINotFoundError (404)
    │   ├── APIConflictError (409)
    │   ├── APIGoneError (410)
    │   ├── APIUnprocessableEntityError (422)
    │   └── APITooManyRequestsError (429)
    └── APIServerError (5xx)

    APIConnectionError   (no HTTP response at all: TCP/TLS/protocol failures)
    ├── APIProtocolError (a response that breaks HTTP or cannot be used; not retried)
    │   └── APIResponseTooLargeError (over the client's size limits)
    └── APITimeoutError  (also a builtin ``TimeoutError``)

This module does no I/O: :func:`error_from_response` is a function of what was received (and,
for a ``Retry-After`` date without a ``Date`` header, of the wall clock).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from trioperator._wire.status import Status, status_from_dict

__all__ = [
    "APIBadRequestError",
    "APIClientError",
    "APIConflictError",
    "APIConnectionError",
    "APIError",
    "APIForbiddenError",
    "APIGoneError",
    "APINotFoundError",
    "APIProtocolError",
    "APIRedirectError",
    "APIResponseTooLargeError",
    "APIServerError",
    "APITimeoutError",
    "APITooManyRequestsError",
    "APIUnauthorizedError",
    "APIUnprocessableEntityError",
    "error_from_response",
    "parse_retry_after",
]

TEXT_MESSAGE_LIMIT = 256
"""How much of a non-Status (text/HTML) error body becomes the message."""


class APIError(Exception):
    """The API server answered with an error status.

    ``status`` is the HTTP status; ``code``, ``reason``, ``message`` and ``details`` come from the
    ``metav1.Status`` body when there is one (``details`` as the raw dict, for Kopf compatibility);
    ``retry_after`` is the server's requested delay in seconds (``Retry-After`` header, or else
    ``details.retryAfterSeconds``), if any.
    """

    status: int
    code: int | None
    reason: str | None
    message: str
    details: dict[str, Any] | None
    retry_after: float | None
    payload: dict[str, Any] | None

    def __init__(
        self,
        message: str = "",
        *,
        status: int,
        code: int | None = None,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after
        self.payload = payload

    def __str__(self) -> str:
        text = f"HTTP {self.status}"
        if self.reason:
            text += f" {self.reason}"
        if self.message:
            text += f": {self.message}"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status}, {self.message!r})"


class APIRedirectError(APIError):
    """3xx: the server (or a proxy on the way) redirected the request elsewhere.

    The API server never redirects the requests of an API client, so a redirect means a wrong
    server URL, a captive portal or a hostile proxy: it is never followed (the credentials
    would go with it to wherever ``Location`` points) and, like a 4xx, not retried by the
    client. ``location`` is the header as received, if any.
    """

    location: str | None

    def __init__(self, message: str = "", *, location: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.location = location


class APIClientError(APIError):
    """4xx: the request is wrong; retrying it as is will not help (except 401 and 429)."""


class APIBadRequestError(APIClientError):
    """HTTP 400: the server could not read the request (e.g. a malformed patch)."""


class APIUnauthorizedError(APIClientError):
    """HTTP 401: the credentials were refused; the operator logs in again."""


class APIForbiddenError(APIClientError):
    """HTTP 403: the credentials are not allowed this request (RBAC)."""


class APINotFoundError(APIClientError):
    """HTTP 404: no such object, or no such resource on this server."""


class APIConflictError(APIClientError):
    """HTTP 409: the object exists already, or changed since the version the request named."""


class APIGoneError(APIClientError):
    """HTTP 410: the version asked for is too old (a watch then lists again)."""


class APIUnprocessableEntityError(APIClientError):
    """HTTP 422: the object is invalid (its schema or a validating webhook refused it)."""


class APITooManyRequestsError(APIClientError):
    """HTTP 429: the server is throttling; retried, honouring its ``Retry-After``."""


class APIServerError(APIError):
    """5xx: the server is wrong (or overloaded); presumably temporary."""


class APIConnectionError(Exception):
    """No (complete) HTTP response: connection refused/reset, TLS failure, protocol breakage."""


class APIProtocolError(APIConnectionError):
    """The HTTP exchange itself broke the protocol: a malformed response, or an unsendable request.

    Not retried: the same request to the same server would break the same way, and the retries
    would only hide the cause. A subclass of :class:`APIConnectionError` so that code handling
    "no usable response" still sees it as one.
    """


class APIResponseTooLargeError(APIProtocolError):
    """A response over the client's limits: its body (as sent or decompressed), a line of a watch
    stream, its head (status line and headers) or trailers, or its number of headers.

    ``limit`` is the limit exceeded, in bytes (or in headers). Not retried by the client: a
    server that sent it once would send it again.
    """

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class APITimeoutError(APIConnectionError, TimeoutError):
    """The request did not complete in time (connecting or in total)."""


_CLASSES: dict[int, type[APIError]] = {
    400: APIBadRequestError,
    401: APIUnauthorizedError,
    403: APIForbiddenError,
    404: APINotFoundError,
    409: APIConflictError,
    410: APIGoneError,
    422: APIUnprocessableEntityError,
    429: APITooManyRequestsError,
}

_JSON_DECODER = msgspec.json.Decoder()


def error_class(status: int) -> type[APIError]:
    """The most specific class for an HTTP status."""
    if status in _CLASSES:
        return _CLASSES[status]
    if 300 <= status < 400:
        return APIRedirectError
    if 400 <= status < 500:
        return APIClientError
    if 500 <= status < 600:
        return APIServerError
    return APIError


_RETRY_AFTER_LENGTH: Final = 64
"""Longer ``Retry-After`` values are garbage: an HTTP-date has 29 characters."""


def parse_retry_after(
    value: str | None, *, date: str | None = None, now: float | None = None
) -> float | None:
    """Seconds from a ``Retry-After`` header; ``None`` if absent or unusable.

    Either form of HTTP is understood: seconds (fractions too), or an HTTP-date, counted from
    the response's own ``Date`` header (``date``) if it has one, so that the two clocks never
    mix; else from ``now`` (seconds since the epoch; by default the wall clock). A date in the
    past means no wait. Garbage, negative, infinite and NaN values are ``None``. The value is
    not capped here: whoever sleeps caps it (``settings.networking.max_retry_after``).
    """
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > _RETRY_AFTER_LENGTH:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        # float() also takes "inf", "nan" and "1_0": only finite, non-negative numbers count.
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    when = _http_date(text)
    if when is None:
        return None
    if date is not None:
        reference = _http_date(date.strip())
        if reference is None:
            return None
    else:
        reference = time.time() if now is None else now
    return max(0.0, when - reference)


def _http_date(text: str) -> float | None:
    """Seconds since the epoch of an HTTP-date (any of its three formats), or ``None``."""
    if not text or len(text) > _RETRY_AFTER_LENGTH or not text[0].isalpha():
        return None
    # Imported here: dates are rare (Kubernetes sends seconds), and the email package is not
    # worth loading into every operator for them.
    from datetime import UTC
    from email.utils import parsedate_to_datetime

    try:
        # Through a datetime, which checks the fields (no 32nd of October).
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:  # "-0000": UTC, whatever the local zone
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    except (ValueError, TypeError, IndexError, OverflowError):
        return None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    for key, val in headers.items():
        if key.lower() == lowered:
            return val
    return None


def error_from_response(status: int, body: bytes, headers: Mapping[str, str]) -> APIError:
    """Build the error for a failed response from its status, body and headers."""
    payload: dict[str, Any] | None = None
    parsed: Status | None = None
    if body.lstrip()[:1] == b"{":
        try:
            decoded = _JSON_DECODER.decode(body)
        except msgspec.DecodeError:
            decoded = None
        if isinstance(decoded, dict):
            payload = decoded
            parsed = status_from_dict(decoded)

    message = ""
    code: int | None = None
    reason: str | None = None
    details: dict[str, Any] | None = None
    details_retry_after: float | None = None
    if payload is not None:
        raw_details = payload.get("details")
        details = raw_details if isinstance(raw_details, dict) else None
    if parsed is not None:
        message = parsed.message or ""
        code = parsed.code
        reason = parsed.reason
        if parsed.details is not None:
            details_retry_after = parsed.details.retry_after_seconds
    elif payload is not None and isinstance(payload.get("message"), str):
        message = payload["message"]
    if not message:
        # Not a Status: proxies and load balancers answer with text, HTML or other JSON.
        message = body[:TEXT_MESSAGE_LIMIT].decode("utf-8", errors="replace").strip()

    retry_after = parse_retry_after(_header(headers, "retry-after"), date=_header(headers, "date"))
    if (
        retry_after is None
        and details_retry_after is not None
        and math.isfinite(details_retry_after)
        and details_retry_after >= 0
    ):
        retry_after = details_retry_after

    cls = error_class(status)
    extra: dict[str, Any] = {}
    if cls is APIRedirectError:
        location = extra["location"] = _header(headers, "location")
        shown = "no Location" if location is None else f"Location {_excerpt(location)}"
        text = f"a redirect ({shown}), not followed: the API server never redirects"
        message = f"{text}; {message}" if message else text
    return cls(
        message,
        status=status,
        code=code,
        reason=reason,
        details=details,
        retry_after=retry_after,
        payload=payload,
        **extra,
    )


def _excerpt(text: str, limit: int = TEXT_MESSAGE_LIMIT) -> str:
    """A header value for a message: quoted, and cut if long (it is the server's, unchecked)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."
