"""Errors of the Kubernetes API, one class per HTTP status that the framework treats specially.

The hierarchy follows Kopf's, so ``except kopf.APIConflictError`` keeps working::

    APIError
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
    └── APITimeoutError  (also a builtin ``TimeoutError``)

This module does no I/O: :func:`error_from_response` is a pure function of what was received.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


class APIClientError(APIError):
    """4xx: the request is wrong; retrying it as is will not help (except 401 and 429)."""


class APIBadRequestError(APIClientError):
    pass


class APIUnauthorizedError(APIClientError):
    pass


class APIForbiddenError(APIClientError):
    pass


class APINotFoundError(APIClientError):
    pass


class APIConflictError(APIClientError):
    pass


class APIGoneError(APIClientError):
    pass


class APIUnprocessableEntityError(APIClientError):
    pass


class APITooManyRequestsError(APIClientError):
    pass


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
    if 400 <= status < 500:
        return APIClientError
    if 500 <= status < 600:
        return APIServerError
    return APIError


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header; ``None`` if absent or not a number.

    The HTTP-date form is not supported: Kubernetes sends seconds, and honouring a date would
    need the wall clock, which the retry logic deliberately never reads.
    """
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if seconds != seconds or seconds < 0:  # NaN or negative
        return None
    return seconds


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

    retry_after = parse_retry_after(_header(headers, "retry-after"))
    if retry_after is None and details_retry_after is not None and details_retry_after >= 0:
        retry_after = details_retry_after

    cls = error_class(status)
    return cls(
        message,
        status=status,
        code=code,
        reason=reason,
        details=details,
        retry_after=retry_after,
        payload=payload,
    )
