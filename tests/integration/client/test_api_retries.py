"""Retries, backoffs, Retry-After, timeouts and re-authentication of API requests.

Timing is exact: the autojump clock moves only through sleeps and deadlines, and the server
records the trio time of each request's arrival.
"""

from __future__ import annotations

import itertools
import logging
import socket
from collections.abc import Iterator

import pytest
import trio
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, LoginError, Vault
from trioperator._client.errors import (
    APIBadRequestError,
    APIConflictError,
    APIConnectionError,
    APIError,
    APIForbiddenError,
    APIGoneError,
    APINotFoundError,
    APIServerError,
    APITimeoutError,
    APITooManyRequestsError,
    APIUnprocessableEntityError,
)
from trioperator._client.settings import NetworkingSettings
from trioperator._runtime.support.httpserver import DropConnection, Request, Response

API_LOGGER = "trioperator._client.api"


def deltas(server: object) -> list[float]:
    times = [r.time for r in server.requests]  # type: ignore[attr-defined]
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


def retry_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Request attempt")]


async def test_success_needs_one_request(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json({"kind": "Thing", "x": 1}))
    assert await api.request("GET", "/api/v1/things") == {"kind": "Thing", "x": 1}
    assert len(server.requests) == 1
    request = server.requests[0]
    assert request.method == "GET"
    assert request.path == "/api/v1/things"
    assert request.headers["user-agent"].startswith("trioperator/")
    assert request.headers["accept"] == "application/json"


async def test_5xx_then_success(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [1, 2, 3]
    server.script(server.status(503), server.status(500), server.json({"ok": True}))
    assert await api.request("GET", "/x") == {"ok": True}
    assert len(server.requests) == 3
    assert deltas(server) == [1, 2]


async def test_exact_backoffs_then_escalation(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    networking: NetworkingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, API_LOGGER)
    networking.error_backoffs = [1, 1, 2]
    server.handler = lambda request: _async(server.status(500, "down for maintenance"))
    start = trio.current_time()
    with pytest.raises(APIServerError) as info:
        await api.request("GET", "/apis/kopf.dev/v1/kopfexamples")
    assert info.value.message == "down for maintenance"
    assert len(server.requests) == 4
    assert deltas(server) == [1, 1, 2]
    assert trio.current_time() - start == pytest.approx(4)
    url = f"{server.url}/apis/kopf.dev/v1/kopfexamples"
    messages = retry_messages(caplog)
    assert messages == [
        f"Request attempt #1/4 failed; will retry: GET {url} -> {info.value!r}",
        f"Request attempt #2/4 failed; will retry: GET {url} -> {info.value!r}",
        f"Request attempt #3/4 failed; will retry: GET {url} -> {info.value!r}",
        f"Request attempt #4/4 failed; escalating: GET {url} -> {info.value!r}",
    ]


async def test_default_backoffs_give_9_attempts(
    autojump_clock: MockClock, api: APIClient, server, caplog: pytest.LogCaptureFixture
) -> None:
    server.handler = lambda request: _async(server.status(502))
    with pytest.raises(APIServerError):
        await api.request("GET", "/x")
    assert deltas(server) == [1, 1, 2, 3, 5, 8, 13, 21]
    messages = retry_messages(caplog)
    assert len(messages) == 9
    assert messages[0].startswith("Request attempt #1/9 failed; will retry: GET ")
    assert messages[-1].startswith("Request attempt #9/9 failed; escalating: GET ")


async def test_single_float_backoff(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = 2.5
    server.handler = lambda request: _async(server.status(500))
    with pytest.raises(APIServerError):
        await api.request("GET", "/x")
    assert deltas(server) == [2.5]


async def test_no_backoffs_means_no_retries(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    networking: NetworkingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    networking.error_backoffs = []
    server.script(server.status(500))
    with pytest.raises(APIServerError):
        await api.request("GET", "/x")
    assert len(server.requests) == 1
    assert retry_messages(caplog)[0].startswith("Request attempt #1/1 failed; escalating: ")


class Reiterable:
    def __init__(self) -> None:
        self.iterations = 0

    def __iter__(self) -> Iterator[float]:
        self.iterations += 1
        yield 3
        yield 4


async def test_backoffs_are_reiterated_per_request(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    networking: NetworkingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    backoffs = Reiterable()
    networking.error_backoffs = backoffs
    server.script(server.status(500), server.json({}), server.status(500), server.json({}))
    await api.request("GET", "/x")
    await api.request("GET", "/x")
    assert backoffs.iterations == 2
    assert deltas(server) == [3, 0, 3]
    # An unsized iterable has no known total: the attempts are numbered without it.
    assert retry_messages(caplog)[0].startswith("Request attempt #1 failed; will retry: ")


async def test_settings_are_read_at_call_time(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    server.handler = lambda request: _async(server.status(500))
    networking.error_backoffs = [7]
    with pytest.raises(APIServerError):
        await api.request("GET", "/x")
    assert deltas(server) == [7]


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, APIBadRequestError),
        (403, APIForbiddenError),
        (404, APINotFoundError),
        (409, APIConflictError),
        (410, APIGoneError),
        (422, APIUnprocessableEntityError),
        (418, APIError),
    ],
)
async def test_4xx_escalate_at_once(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    caplog: pytest.LogCaptureFixture,
    status: int,
    cls: type[APIError],
) -> None:
    server.handler = lambda request: _async(server.status(status, "no way"))
    start = trio.current_time()
    with pytest.raises(cls) as info:
        await api.request("PATCH", "/x", payload={"a": 1})
    assert info.value.status == status
    assert info.value.message == "no way"
    assert len(server.requests) == 1
    assert trio.current_time() == start
    assert retry_messages(caplog) == []


async def test_429_with_retry_after_header_overrides_shorter_backoffs(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [1, 1, 15]
    throttled = server.status(429, reason="TooManyRequests", headers={"Retry-After": "10"})
    server.script(throttled, throttled, throttled, server.json({"done": 1}))
    assert await api.request("GET", "/x") == {"done": 1}
    assert deltas(server) == [10, 10, 15]


async def test_429_with_enforced_retry_after(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [1, 1, 15]
    networking.enforce_retry_after = True
    throttled = server.status(429, headers={"Retry-After": "10"})
    server.script(throttled, throttled, throttled, server.json({"done": 1}))
    assert await api.request("GET", "/x") == {"done": 1}
    assert deltas(server) == [10, 10, 10]


async def test_429_old_style_retry_after_in_details(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [1, 1, 15]
    throttled = server.status(429, details={"retryAfterSeconds": 10})
    server.script(throttled, throttled, throttled, server.json({"done": 1}))
    assert await api.request("GET", "/x") == {"done": 1}
    assert deltas(server) == [10, 10, 15]


async def test_429_escalates_after_the_retries(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [1]
    server.handler = lambda request: _async(server.status(429, headers={"Retry-After": "2"}))
    with pytest.raises(APITooManyRequestsError) as info:
        await api.request("GET", "/x")
    assert info.value.retry_after == 2
    assert deltas(server) == [2]


async def test_503_with_retry_after(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [1]
    server.script(server.status(503, headers={"Retry-After": "6"}), server.json({}))
    await api.request("GET", "/x")
    assert deltas(server) == [6]


async def test_text_error_body(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = []
    server.script(Response(502, b"<html>Bad Gateway</html>", content_type="text/html"))
    with pytest.raises(APIServerError) as info:
        await api.request("GET", "/x")
    assert info.value.message == "<html>Bad Gateway</html>"


async def test_dropped_connection_is_retried(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    networking: NetworkingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    networking.error_backoffs = [1.5]
    server.script(DropConnection(), server.json({"ok": 1}))
    assert await api.request("GET", "/x") == {"ok": 1}
    assert deltas(server) == [1.5]
    messages = retry_messages(caplog)
    assert len(messages) == 1
    assert "APIConnectionError" in messages[0]


async def test_dropped_connections_escalate(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [1, 1]
    server.handler = _drop
    with pytest.raises(APIConnectionError):
        await api.request("GET", "/x")
    assert len(server.requests) == 3


async def test_refused_connection_is_retried_then_escalates(
    autojump_clock: MockClock, networking: NetworkingSettings, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    networking.error_backoffs = [1, 2]
    vault = Vault({"x": ConnectionInfo(server=f"http://127.0.0.1:{port}")})
    start = trio.current_time()
    async with APIClient(vault, networking) as api:
        with pytest.raises(APIConnectionError):
            await api.request("GET", "/x")
    assert trio.current_time() - start == pytest.approx(3)
    assert len(retry_messages(caplog)) == 3


async def test_stalled_server_hits_the_request_timeout(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    networking: NetworkingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    networking.request_timeout = 7
    networking.error_backoffs = [1]
    server.handler = server.hang
    start = trio.current_time()
    with pytest.raises(APITimeoutError) as info:
        await api.request("GET", "/x")
    assert isinstance(info.value, TimeoutError)
    assert deltas(server) == [8]  # 7 s timed out, 1 s of backoff
    assert trio.current_time() - start == pytest.approx(15)
    assert len(retry_messages(caplog)) == 2


async def test_explicit_timeout_overrides_the_setting(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = []
    server.handler = server.hang
    start = trio.current_time()
    with pytest.raises(APITimeoutError):
        await api.request("GET", "/x", timeout=2)
    assert trio.current_time() - start == pytest.approx(2)


async def test_slow_but_timely_response(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.request_timeout = 10

    async def slow(request: Request) -> Response:
        await trio.sleep(9)
        return server.json({"slow": True})

    server.script(slow)
    assert await api.request("GET", "/x") == {"slow": True}
    assert len(server.requests) == 1


# ---------------------------------------------------------------- authentication


def _token(request: Request) -> str:
    return request.headers.get("authorization", "")


async def test_401_invalidates_and_retries_with_next_credentials(
    autojump_clock: MockClock,
    server,
    networking: NetworkingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stale = ConnectionInfo(server=server.url, token="stale", priority=10)
    fresh = ConnectionInfo(server=server.url, token="fresh", priority=0)
    vault = Vault({"stale": stale, "fresh": fresh})

    async def check(request: Request) -> Response:
        if _token(request) == "Bearer fresh":
            return server.json({"ok": True})
        return server.status(401, "Unauthorized", reason="Unauthorized")

    server.handler = check
    async with APIClient(vault, networking) as api:
        assert await api.request("GET", "/x") == {"ok": True}
        assert await api.request("GET", "/y") == {"ok": True}
    tokens = [r.headers.get("authorization") for r in server.requests]
    assert tokens == ["Bearer stale", "Bearer fresh", "Bearer fresh"]
    assert deltas(server) == [0, 0]  # re-authentication is not a backoff
    assert retry_messages(caplog) == []
    assert [key for key, _ in vault.items()] == ["fresh"]


async def test_401_without_more_credentials_fails_the_login(
    autojump_clock: MockClock, server, networking: NetworkingSettings, nursery: trio.Nursery
) -> None:
    vault = Vault({"only": ConnectionInfo(server=server.url, token="stale")})

    async def authenticator() -> None:
        await vault.wait_for_emptiness()
        vault.fail(RuntimeError("no more logins"))

    nursery.start_soon(authenticator)
    server.handler = lambda request: _async(server.status(401))
    async with APIClient(vault, networking) as api:
        with pytest.raises(LoginError):
            await api.request("GET", "/x")
    assert len(server.requests) == 1


async def test_401_then_relogin(
    autojump_clock: MockClock, server, networking: NetworkingSettings, nursery: trio.Nursery
) -> None:
    vault = Vault({"login": ConnectionInfo(server=server.url, token="old")})

    async def authenticator() -> None:
        await vault.wait_for_emptiness()
        await trio.sleep(5)
        await vault.populate({"login": ConnectionInfo(server=server.url, token="new")})

    async def check(request: Request) -> Response:
        if _token(request) == "Bearer new":
            return server.json({"ok": True})
        return server.status(401)

    nursery.start_soon(authenticator)
    server.handler = check
    async with APIClient(vault, networking) as api:
        assert await api.request("GET", "/x") == {"ok": True}
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer old", "Bearer new"]
    assert deltas(server) == [5]


async def test_basic_auth_header(
    autojump_clock: MockClock, server, networking: NetworkingSettings
) -> None:
    vault = Vault({"basic": ConnectionInfo(server=server.url, username="me", password="secret")})
    server.script(server.json({}))
    async with APIClient(vault, networking) as api:
        await api.request("GET", "/x")
    assert server.requests[0].headers["authorization"] == "Basic bWU6c2VjcmV0"


async def test_scheme_and_token_header(
    autojump_clock: MockClock, server, networking: NetworkingSettings
) -> None:
    vault = Vault({"t": ConnectionInfo(server=server.url, scheme="Token", token="abc")})
    server.script(server.json({}))
    async with APIClient(vault, networking) as api:
        await api.request("GET", "/x")
    assert server.requests[0].headers["authorization"] == "Token abc"


async def test_server_with_a_path_prefix(
    autojump_clock: MockClock, server, networking: NetworkingSettings
) -> None:
    vault = Vault({"p": ConnectionInfo(server=f"{server.url}/k8s/clusters/c-1/")})
    server.script(server.json({}))
    async with APIClient(vault, networking) as api:
        await api.request("GET", "/api/v1/pods")
    assert server.requests[0].path == "/k8s/clusters/c-1/api/v1/pods"


# ---------------------------------------------------------------- helpers


async def _async(response: Response) -> Response:
    return response


async def _drop(request: Request) -> Response:
    raise DropConnection()
