"""Mapping of failed HTTP responses to API errors (pure: status, body, headers in; error out)."""

from __future__ import annotations

import json

import pytest
from trioperator._client.errors import (
    APIBadRequestError,
    APIClientError,
    APIConflictError,
    APIConnectionError,
    APIError,
    APIForbiddenError,
    APIGoneError,
    APINotFoundError,
    APIRedirectError,
    APIServerError,
    APITimeoutError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    APIUnprocessableEntityError,
    error_from_response,
    parse_retry_after,
)


def status_body(
    code: int, message: str = "boom", reason: str = "Whatever", **extra: object
) -> bytes:
    doc = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
        **extra,
    }
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, APIBadRequestError),
        (401, APIUnauthorizedError),
        (403, APIForbiddenError),
        (404, APINotFoundError),
        (409, APIConflictError),
        (410, APIGoneError),
        (422, APIUnprocessableEntityError),
        (429, APITooManyRequestsError),
        (402, APIClientError),
        (405, APIClientError),
        (418, APIClientError),
        (499, APIClientError),
        (500, APIServerError),
        (502, APIServerError),
        (503, APIServerError),
        (504, APIServerError),
        (599, APIServerError),
        (302, APIRedirectError),
        (301, APIRedirectError),
        (307, APIRedirectError),
        (666, APIError),
    ],
)
def test_every_status_maps_to_its_class(status: int, cls: type[APIError]) -> None:
    err = error_from_response(status, status_body(status), {})
    assert type(err) is cls
    assert err.status == status
    assert err.code == status


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422, 429, 405])
def test_client_errors_share_a_base(status: int) -> None:
    err = error_from_response(status, b"", {})
    assert isinstance(err, APIClientError)
    assert isinstance(err, APIError)
    assert not isinstance(err, APIServerError)


def test_server_errors_are_not_client_errors() -> None:
    err = error_from_response(503, b"", {})
    assert isinstance(err, APIServerError)
    assert not isinstance(err, APIClientError)


def test_status_body_fills_the_fields() -> None:
    body = status_body(
        409,
        message='Operation cannot be fulfilled on kopfexamples "kex1": conflict',
        reason="Conflict",
        details={"name": "kex1", "group": "kopf.dev", "kind": "kopfexamples", "extra": 1},
    )
    err = error_from_response(409, body, {"content-type": "application/json"})
    assert isinstance(err, APIConflictError)
    assert err.message == 'Operation cannot be fulfilled on kopfexamples "kex1": conflict'
    assert err.reason == "Conflict"
    assert err.code == 409
    assert err.details == {"name": "kex1", "group": "kopf.dev", "kind": "kopfexamples", "extra": 1}
    assert err.payload is not None
    assert err.payload["kind"] == "Status"
    assert err.retry_after is None
    assert "conflict" in str(err)
    assert "409" in str(err)


def test_status_code_may_differ_from_http_status() -> None:
    err = error_from_response(500, status_body(999), {})
    assert err.status == 500
    assert err.code == 999


def test_status_with_causes_and_unknown_fields() -> None:
    body = status_body(
        422,
        reason="Invalid",
        details={
            "causes": [{"reason": "FieldValueInvalid", "message": "bad", "field": "spec.x"}],
            "somethingNew": {"a": 1},
        },
        fromTheFuture=True,
    )
    err = error_from_response(422, body, {})
    assert isinstance(err, APIUnprocessableEntityError)
    assert err.details is not None
    assert err.details["causes"][0]["field"] == "spec.x"


def test_text_body_gives_the_first_256_chars() -> None:
    text = "upstream connect error or disconnect/reset before headers " * 20
    err = error_from_response(503, text.encode(), {"content-type": "text/plain"})
    assert isinstance(err, APIServerError)
    assert err.message == text[:256].strip()
    assert err.code is None
    assert err.details is None
    assert err.payload is None


def test_html_body() -> None:
    err = error_from_response(502, b"<html><body>Bad Gateway</body></html>", {})
    assert isinstance(err, APIServerError)
    assert err.message == "<html><body>Bad Gateway</body></html>"


def test_non_utf8_text_body_does_not_fail() -> None:
    err = error_from_response(500, b"\xff\xfe broken", {})
    assert "broken" in err.message


def test_empty_body() -> None:
    err = error_from_response(404, b"", {})
    assert isinstance(err, APINotFoundError)
    assert err.message == ""
    assert str(err) == "HTTP 404"


def test_broken_json_body_is_taken_as_text() -> None:
    err = error_from_response(500, b'{"kind": "Status", "mess', {})
    assert err.message == '{"kind": "Status", "mess'
    assert err.payload is None


def test_json_but_not_a_status() -> None:
    err = error_from_response(500, b'{"error": "no upstream"}', {})
    assert err.message == '{"error": "no upstream"}'
    assert err.payload == {"error": "no upstream"}
    assert err.code is None


def test_json_with_mistyped_status_fields_keeps_the_message() -> None:
    err = error_from_response(500, b'{"message": "hello", "code": "not-an-int"}', {})
    assert err.message == "hello"
    assert err.code is None


def test_retry_after_from_header() -> None:
    err = error_from_response(429, status_body(429), {"retry-after": "10"})
    assert isinstance(err, APITooManyRequestsError)
    assert err.retry_after == 10


def test_retry_after_header_is_case_insensitive() -> None:
    err = error_from_response(429, b"", {"Retry-After": "7"})
    assert err.retry_after == 7


def test_retry_after_from_details() -> None:
    body = status_body(429, reason="TooManyRequests", details={"retryAfterSeconds": 15})
    err = error_from_response(429, body, {})
    assert err.retry_after == 15


def test_retry_after_header_wins_over_details() -> None:
    body = status_body(429, details={"retryAfterSeconds": 15})
    err = error_from_response(429, body, {"retry-after": "3"})
    assert err.retry_after == 3


def test_retry_after_on_server_errors_too() -> None:
    body = status_body(503, details={"retryAfterSeconds": 2})
    err = error_from_response(503, body, {})
    assert isinstance(err, APIServerError)
    assert err.retry_after == 2


def test_retry_after_absent() -> None:
    assert error_from_response(429, b"", {}).retry_after is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10", 10.0),
        (" 3 ", 3.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("-1", None),
        ("nan", None),
        ("inf", None),
        ("-inf", None),
        ("Infinity", None),
        ("1e999", None),
        ("1e9", 1e9),  # parsed as sent: whoever sleeps caps it
        ("1_0", 10.0),  # Python's float() reads it; harmless
        ("soon", None),
        ("5 seconds", None),
        ("0x10", None),
        ("1" * 100, None),  # longer than any real value
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date in the past: no wait
        ("", None),
        ("   ", None),
        (None, None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


# Wed, 21 Oct 2015 07:28:00 GMT, as seconds since the epoch.
OCT_21 = 1445412480.0


@pytest.mark.parametrize(
    "value",
    [
        "Wed, 21 Oct 2015 07:28:30 GMT",  # IMF-fixdate, the one HTTP senders must use
        "Wednesday, 21-Oct-15 07:28:30 GMT",  # the obsolete RFC 850 form
        "Wed Oct 21 07:28:30 2015",  # the obsolete asctime form
    ],
)
def test_parse_retry_after_dates_from_the_wall_clock(value: str) -> None:
    assert parse_retry_after(value, now=OCT_21) == 30.0


def test_parse_retry_after_date_counts_from_the_responses_own_date() -> None:
    # The server's clock against the server's clock: a skewed local clock does not matter.
    value = "Wed, 21 Oct 2015 07:30:00 GMT"
    assert parse_retry_after(value, date="Wed, 21 Oct 2015 07:28:00 GMT", now=0) == 120.0
    assert parse_retry_after(value, date="garbage", now=OCT_21) is None


@pytest.mark.parametrize(
    "value", ["Wed, 32 Oct 2015 07:28:00 GMT", "Someday, never", "Wed, 21 Oct 99999 00:00:00 GMT"]
)
def test_parse_retry_after_broken_dates(value: str) -> None:
    assert parse_retry_after(value, now=OCT_21) is None


def test_retry_after_date_in_a_response_counts_from_its_date_header() -> None:
    headers = {
        "Retry-After": "Wed, 21 Oct 2015 07:28:07 GMT",
        "Date": "Wed, 21 Oct 2015 07:28:00 GMT",
    }
    assert error_from_response(503, b"", headers).retry_after == 7.0


def test_redirect_names_its_location_and_is_not_a_client_error() -> None:
    err = error_from_response(302, b"<html>moved</html>", {"location": "https://elsewhere/x"})
    assert isinstance(err, APIRedirectError)
    assert not isinstance(err, APIClientError | APIServerError)
    assert err.location == "https://elsewhere/x"
    assert str(err).startswith(
        "HTTP 302: a redirect (Location 'https://elsewhere/x'), not followed"
    )
    assert "<html>moved</html>" in str(err)


def test_redirect_with_a_huge_location_is_cut_in_the_message() -> None:
    err = error_from_response(301, b"", {"Location": "x" * 100_000})
    assert isinstance(err, APIRedirectError)
    assert len(str(err)) < 400
    assert err.location == "x" * 100_000


def test_unparsable_header_falls_back_to_details() -> None:
    body = status_body(429, details={"retryAfterSeconds": 4})
    err = error_from_response(429, body, {"retry-after": "soon"})
    assert err.retry_after == 4


def test_repr_names_the_class() -> None:
    err = error_from_response(404, status_body(404, message="not here"), {})
    assert repr(err) == "APINotFoundError(404, 'not here')"


def test_connection_errors() -> None:
    assert issubclass(APITimeoutError, APIConnectionError)
    assert issubclass(APITimeoutError, TimeoutError)
    assert not issubclass(APIConnectionError, APIError)
