"""The client-side rate limit (``settings.networking.qps``/``burst``), as the server sees it.

The scripted server records the trio time of each request's arrival; the autojump clock moves
only through sleeps, so the pacing is exact.
"""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.settings import NetworkingSettings
from trioperator._runtime.support.httpserver import Request, Response


def arrivals(server: object) -> list[float]:
    times = [r.time for r in server.requests]  # type: ignore[attr-defined]
    return [round(t - times[0], 6) for t in times]


async def test_off_by_default_nothing_waits(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    assert NetworkingSettings().qps is None
    server.handler = ok
    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(api.request, "GET", "/api/v1/things")
    assert arrivals(server) == [0.0] * 50


async def test_burst_goes_at_once_then_paced_at_qps(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.qps = 2
    networking.burst = 3
    server.handler = ok
    for _ in range(7):
        await api.request("GET", "/api/v1/things")
    assert arrivals(server) == [0.0, 0.0, 0.0, 0.5, 1.0, 1.5, 2.0]


async def test_shared_by_concurrent_requests_in_their_order(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.qps = 5
    networking.burst = 1
    server.handler = ok
    async with trio.open_nursery() as nursery:
        for index in range(6):
            nursery.start_soon(api.request, "GET", f"/api/v1/things/{index}")
            await trio.lowlevel.checkpoint()  # started in this order
    assert arrivals(server) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert [r.path for r in server.requests] == [f"/api/v1/things/{i}" for i in range(6)]


async def test_default_burst_is_one_seconds_worth(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.qps = 4
    server.handler = ok
    for _ in range(6):
        await api.request("GET", "/api/v1/things")
    assert arrivals(server) == [0.0, 0.0, 0.0, 0.0, 0.25, 0.5]


async def test_a_quiet_time_refills_the_burst(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.qps = 1
    networking.burst = 2
    server.handler = ok
    for _ in range(3):
        await api.request("GET", "/api/v1/things")
    await trio.sleep(10)  # refills to 2, not to 10
    for _ in range(3):
        await api.request("GET", "/api/v1/things")
    assert arrivals(server) == [0.0, 0.0, 1.0, 11.0, 11.0, 12.0]


async def test_every_retry_takes_a_token(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.qps = 1
    networking.burst = 1
    networking.error_backoffs = [0.1, 0.1]
    server.script(server.status(503), server.status(503), server.json({}))
    await api.request("GET", "/api/v1/things")
    assert arrivals(server) == [0.0, 1.0, 2.0]


async def test_a_cancelled_waiter_gives_its_turn_back(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.qps = 1
    networking.burst = 1
    server.handler = ok
    await api.request("GET", "/api/v1/first")
    with trio.move_on_after(0.5):
        await api.request("GET", "/api/v1/cancelled")  # its turn was at 1.0
    await trio.sleep(0.1)
    await api.request("GET", "/api/v1/third")
    assert [r.path for r in server.requests] == ["/api/v1/first", "/api/v1/third"]
    assert arrivals(server) == [0.0, 1.0]  # at the cancelled one's turn, not at 2.0


async def test_a_watch_counts_once_per_connection(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.qps = 1
    networking.burst = 1
    events = [{"type": "BOOKMARK", "object": {}}] * 20
    server.script(server.stream(server.lines(*events)), server.json({}))
    async with api.stream("/api/v1/things", params={"watch": "true"}) as lines:
        received = [line async for line in lines]
    assert len(received) == 20
    await api.request("GET", "/api/v1/things")
    assert arrivals(server) == [0.0, 1.0]


async def test_settings_changed_at_run_time_apply_to_the_next_request(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    server.handler = ok
    networking.qps = 1
    networking.burst = 1
    for _ in range(2):
        await api.request("GET", "/api/v1/things")
    networking.qps = 10
    networking.burst = None  # a new bucket, full: ten at once
    for _ in range(2):
        await api.request("GET", "/api/v1/things")
    networking.qps = None
    for _ in range(3):
        await api.request("GET", "/api/v1/things")
    assert arrivals(server) == [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("qps", 0),
        ("qps", -1.0),
        ("qps", float("inf")),
        ("qps", float("nan")),
        ("qps", True),
        ("burst", 0),
        ("burst", 1.5),
        ("retry_budget", 0),
        ("retry_burst", None),
    ],
)
def test_bad_settings_are_refused_when_set(name: str, value: object) -> None:
    settings = NetworkingSettings()
    with pytest.raises(ValueError, match=name):
        setattr(settings, name, value)
    assert getattr(settings, name) == getattr(NetworkingSettings(), name)


async def ok(request: Request) -> Response:
    return Response(200, b"{}", headers={"content-type": "application/json"})
