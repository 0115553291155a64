"""The retry budget (``settings.networking.retry_budget``/``retry_burst``), as the server sees it.

Many requests failing together (an API server in trouble) retry at the budget's pace instead
of all at once; each still makes all its attempts. Times are the autojump clock's, exact.
"""

from __future__ import annotations

import logging
from collections import Counter

import pytest
import trio
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.errors import APIServerError
from trioperator._client.settings import NetworkingSettings
from trioperator._runtime.support.httpserver import Request, Response

API_LOGGER = "trioperator._client.api"


def _json(status: int, headers: dict[str, str] | None = None) -> Response:
    body = b"{}" if status < 300 else b'{"kind": "Status", "code": %d}' % status
    return Response(status, body, headers={"content-type": "application/json", **(headers or {})})


class FailingFirst:
    """Answers each path with ``failures`` errors (HTTP ``status``) first, then 200."""

    def __init__(self, failures: int = 1, status: int = 503, **headers: str) -> None:
        self.failures = failures
        self.status = status
        self.headers = headers
        self.seen: Counter[str] = Counter()

    async def __call__(self, request: Request) -> Response:
        self.seen[request.path] += 1
        if self.seen[request.path] <= self.failures:
            return _json(self.status, self.headers)
        return _json(200)


def retry_times(server: object) -> list[float]:
    """When the second and later attempts of each path arrived."""
    seen: Counter[str] = Counter()
    times = []
    for request in server.requests:  # type: ignore[attr-defined]
        seen[request.path] += 1
        if seen[request.path] > 1:
            times.append(round(request.time, 6))
    return sorted(times)


async def _concurrently(api: APIClient, count: int) -> None:
    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(api.request, "GET", f"/api/v1/things/{index}")


async def test_retries_of_many_requests_are_paced_by_the_budget(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    networking: NetworkingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=API_LOGGER)
    networking.error_backoffs = [0.1]
    networking.retry_budget = 1
    networking.retry_burst = 2
    server.handler = FailingFirst()
    start = trio.current_time()
    await _concurrently(api, 5)
    assert [round(t - start, 6) for t in retry_times(server)] == [0.1, 0.1, 1.1, 2.1, 3.1]
    assert len(server.requests) == 10  # every request made its two attempts and succeeded
    warnings = [r.getMessage() for r in caplog.records if "retry budget is spent" in r.message]
    assert len(warnings) == 1  # once for the whole episode, not per retry
    assert "settings.networking.retry_budget=1 per second" in warnings[0]

    # Later, with the budget refilled: a retry goes at once, and the episode is over.
    await trio.sleep(10)
    server.handler = FailingFirst()
    await api.request("GET", "/api/v1/later")
    assert server.requests[-1].time - server.requests[-2].time == pytest.approx(0.1)
    assert any("retry budget has room again" in r.getMessage() for r in caplog.records)


async def test_without_a_budget_every_request_retries_on_its_own_ramp(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [0.1]
    networking.retry_budget = None
    server.handler = FailingFirst()
    start = trio.current_time()
    await _concurrently(api, 200)
    assert {round(t - start, 6) for t in retry_times(server)} == {0.1}


async def test_the_default_budget_lets_a_burst_of_retries_through(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    assert (networking.retry_budget, networking.retry_burst) == (10.0, 100)
    networking.error_backoffs = [0.1]
    server.handler = FailingFirst()
    start = trio.current_time()
    await _concurrently(api, 120)
    times = [round(t - start, 6) for t in retry_times(server)]
    assert times[:100] == [0.1] * 100
    assert times[100:] == [round(0.1 + n / 10, 6) for n in range(1, 21)]


async def test_a_spent_budget_delays_but_never_drops_attempts(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [0.1, 0.1, 0.1]
    networking.retry_budget = 0.5
    networking.retry_burst = 1
    server.handler = FailingFirst(failures=3)
    start = trio.current_time()
    assert await api.request("GET", "/api/v1/thing") == {}
    assert [round(r.time - start, 6) for r in server.requests] == [0.0, 0.1, 2.1, 4.1]

    # And when they run out, the last error escalates as before, not sooner.
    server.handler = FailingFirst(failures=4)
    with pytest.raises(APIServerError):
        await api.request("GET", "/api/v1/other")
    assert sum(1 for r in server.requests if r.path == "/api/v1/other") == 4


async def test_retry_after_is_honoured_and_the_budget_adds_to_it(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [0.1]
    networking.retry_budget = 1
    networking.retry_burst = 1
    server.handler = FailingFirst(status=429, **{"Retry-After": "3"})
    start = trio.current_time()
    await _concurrently(api, 2)
    # Both slept the server's 3 seconds; then one took the burst, the other its budget's turn.
    assert [round(t - start, 6) for t in retry_times(server)] == [3.0, 4.0]


async def test_a_retry_waiting_for_the_budget_is_cancellable(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [0.1]
    networking.retry_budget = 0.1
    networking.retry_burst = 1
    server.handler = FailingFirst()
    await api.request("GET", "/api/v1/first")  # spends the burst
    start = trio.current_time()
    with trio.move_on_after(1):
        await api.request("GET", "/api/v1/second")  # its retry's turn: 10 s later
    assert trio.current_time() - start == pytest.approx(1)
    assert [r.path for r in server.requests].count("/api/v1/second") == 1
