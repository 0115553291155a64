"""The liveness endpoint, asked over real loopback HTTP as the kubelet would ask it.

Probe handlers are async here: with the autojump clock, a worker thread lets the clock jump
(to the client's timeout, say) while it runs; the sync case has its own test without timeouts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import httpx2 as httpx
import pytest
import trio
import trioperator as kopf
from trioperator._client.api import APIClient
from trioperator._client.resources import Resource
from trioperator._client.watching import WatchHealth, WatchItem, stream_events
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.execution import Execution
from trioperator._runtime.program.probing import ProbeHealth, serve_liveness
from trioperator._util.endpoints import parse_endpoint
from trioperator.testing import FakeAPI

Starter = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def start_liveness(
    nursery: trio.Nursery,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    execution: Execution,
) -> AsyncIterator[Starter]:
    clients: list[httpx.AsyncClient] = []

    async def start(
        health: Any = None, path: str = "/healthz", client_timeout: float | None = 30
    ) -> httpx.AsyncClient:
        serve = partial(
            serve_liveness,
            endpoint=f"http://127.0.0.1:0{path}",
            registry=registry,
            settings=settings,
            memo=kopf.Memo(),
            execution=execution,
            health=health,
        )
        port = await nursery.start(serve)
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=client_timeout)
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.aclose()


async def test_probe_results_as_json(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    @kopf.on.probe(id="now", registry=registry)
    async def now(**_: Any) -> float:
        return trio.current_time()

    @kopf.on.probe(id="text", registry=registry)
    async def text(memo: Any, settings: Any, **_: Any) -> str:
        assert isinstance(settings, OperatorSettings)
        return "fine"

    client = await start_liveness()
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"now": trio.current_time(), "text": "fine"}


async def test_no_probe_handlers_answer_an_empty_object(
    autojump_clock: Any, start_liveness: Starter
) -> None:
    client = await start_liveness()
    response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {})


async def test_probes_that_return_none_are_left_out_as_in_kopf(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    @kopf.on.probe(id="api", registry=registry)
    async def api(**_: Any) -> None:
        pass

    @kopf.on.probe(id="zero", registry=registry)
    async def zero(**_: Any) -> int:
        return 0  # falsy, but not None: kept

    client = await start_liveness()
    response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"zero": 0})


async def test_a_single_probe_returning_none_answers_an_empty_object(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    @kopf.on.probe(id="api", registry=registry)
    async def api(**_: Any) -> None:
        pass

    client = await start_liveness()
    response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {})


async def test_results_are_cached_for_10_seconds(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    calls: list[float] = []

    @kopf.on.probe(id="counter", registry=registry)
    async def counter(**_: Any) -> int:
        calls.append(trio.current_time())
        return len(calls)

    client = await start_liveness()
    start = trio.current_time()
    assert (await client.get("/healthz")).json() == {"counter": 1}
    await trio.sleep(9.9)
    assert (await client.get("/healthz")).json() == {"counter": 1}
    await trio.sleep(0.2)
    assert (await client.get("/healthz")).json() == {"counter": 2}
    assert calls == [pytest.approx(start, abs=0.01), pytest.approx(start + 10.1, abs=0.01)]


async def test_concurrent_requests_share_one_run_of_the_probes(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    calls: list[float] = []

    @kopf.on.probe(id="slow", registry=registry)
    async def slow(**_: Any) -> int:
        calls.append(trio.current_time())
        await trio.sleep(1)
        return len(calls)

    client = await start_liveness()
    results: list[Any] = []

    async def ask() -> None:
        results.append((await client.get("/healthz")).json())

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(ask)
    assert results == [{"slow": 1}] * 5
    assert len(calls) == 1


async def test_sync_probe_handlers_run_in_threads(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    @kopf.on.probe(id="sync", registry=registry)
    def sync(**_: Any) -> dict[str, int]:
        return {"answer": 42}

    client = await start_liveness(client_timeout=None)  # no deadline for the clock to jump to
    response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"sync": {"answer": 42}})


async def test_results_that_are_not_json_are_shown_as_text(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    @kopf.on.probe(id="odd", registry=registry)
    async def odd(**_: Any) -> Any:
        return {"set": {1}}

    client = await start_liveness()
    assert (await client.get("/healthz")).json() == {"odd": {"set": "{1}"}}


async def test_a_failing_probe_is_a_server_error_and_is_not_retried(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    calls: list[float] = []

    @kopf.on.probe(id="good", registry=registry)
    async def good(**_: Any) -> str:
        return "ok"

    @kopf.on.probe(id="bad", registry=registry)
    async def bad(**_: Any) -> None:
        calls.append(trio.current_time())
        raise ZeroDivisionError("division by zero")

    client = await start_liveness()
    started = trio.current_time()
    response = await client.get("/healthz")
    assert trio.current_time() == started  # answered now, not after a retry's backoff
    assert response.status_code == 500
    assert response.json() == {
        "error": "The operator is unhealthy: 1 probe(s) failed.",
        "probes": {"bad": "ZeroDivisionError: division by zero"},
    }
    # The failure is cached like results are; then the probes run again.
    assert (await client.get("/healthz")).status_code == 500
    assert len(calls) == 1
    await trio.sleep(10)
    assert (await client.get("/healthz")).status_code == 500
    assert len(calls) == 2


async def test_probe_retries_are_honoured_if_asked_for(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    calls: list[float] = []

    @kopf.on.probe(id="flaky", registry=registry, retries=3, backoff=1)
    async def flaky(**_: Any) -> str:
        calls.append(trio.current_time())
        if len(calls) < 2:
            raise RuntimeError("not yet")
        return "recovered"

    client = await start_liveness()
    response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"flaky": "recovered"})
    assert len(calls) == 2


async def test_other_paths_and_methods(autojump_clock: Any, start_liveness: Starter) -> None:
    client = await start_liveness(path="/healthz")
    assert (await client.get("/")).status_code == 404
    assert (await client.get("/healthz/")).status_code == 404
    assert (await client.get("/other")).status_code == 404
    response = await client.post("/healthz")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET"
    assert (await client.get("/healthz", params={"verbose": "1"})).status_code == 200


async def test_root_path_by_default(autojump_clock: Any, start_liveness: Starter) -> None:
    client = await start_liveness(path="")
    assert (await client.get("/")).status_code == 200


# ------------------------------------------------------------------------------ watchers


async def test_dead_watchers_make_it_fail(autojump_clock: Any, start_liveness: Starter) -> None:
    alive, dead = WatchHealth(), WatchHealth()
    alive.alive = True
    alive.touch()
    watchers = {"kopfexamples in 'ns1'": alive, "pods in 'ns1'": dead}
    client = await start_liveness(health=watchers)
    response = await client.get("/healthz")
    assert response.status_code == 500
    assert response.json() == {
        "error": "The operator is unhealthy: 1 watcher(s) dead or stalled.",
        "watchers": {"pods in 'ns1'": "dead"},
    }
    # The mapping is read anew on every request: e.g. a watcher that stopped gracefully is gone.
    del watchers["pods in 'ns1'"]
    assert (await client.get("/healthz")).status_code == 200


async def test_watchers_and_probes_both_reported(
    autojump_clock: Any, start_liveness: Starter, registry: OperatorRegistry
) -> None:
    @kopf.on.probe(id="bad", registry=registry)
    async def bad(**_: Any) -> None:
        raise RuntimeError()

    client = await start_liveness(health=[WatchHealth()])
    response = await client.get("/healthz")
    assert response.json() == {
        "error": "The operator is unhealthy: 1 watcher(s) dead or stalled; 1 probe(s) failed.",
        "watchers": {"watcher #1": "dead"},
        "probes": {"bad": "RuntimeError"},
    }


async def test_silent_watchers_are_stalled_after_their_inactivity_timeout(
    autojump_clock: Any, start_liveness: Starter, settings: OperatorSettings
) -> None:
    settings.watching.inactivity_timeout = 70
    settings.watching.reconnect_backoff = 0.1
    health = WatchHealth()
    health.alive = True
    health.touch()
    client = await start_liveness(health={"w": health})
    assert (await client.get("/healthz")).status_code == 200
    await trio.sleep(70 + 0.1 + 10 - 0.5)  # inactivity + backoff + grace: still fine
    assert (await client.get("/healthz")).status_code == 200
    await trio.sleep(1)
    response = await client.get("/healthz")
    assert response.status_code == 500
    assert response.json()["watchers"] == {"w": "stalled: no progress for 81 seconds"}
    health.touch()  # a line from the stream: healthy again
    assert (await client.get("/healthz")).status_code == 200


async def test_quiet_watchers_that_reconnect_are_healthy(
    autojump_clock: Any, start_liveness: Starter, settings: OperatorSettings
) -> None:
    """A quiet resource sends nothing; its watcher reconnects every inactivity timeout, and the
    API server answers each new watch request."""
    settings.watching.inactivity_timeout = 70
    health = WatchHealth()
    health.alive = True
    health.touch()

    async def reconnect_every_70s() -> None:
        while True:
            await trio.sleep(70 + settings.watching.reconnect_backoff)
            health.reconnects += 1
            health.touch()  # the answer to the new request

    client = await start_liveness(health={"w": health})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reconnect_every_70s)
        for _ in range(60):  # 10 minutes, probed every 10 seconds (kubelet's default)
            assert (await client.get("/healthz")).status_code == 200
            await trio.sleep(10)
        nursery.cancel_scope.cancel()


async def test_unanswered_reconnections_are_no_progress(
    autojump_clock: Any, start_liveness: Starter, settings: OperatorSettings
) -> None:
    """Against a dead API server a watcher retries forever: that is not a sign of life."""
    settings.watching.inactivity_timeout = 70
    health = WatchHealth()
    health.alive = True
    health.touch()

    async def reconnect_in_vain() -> None:
        while True:
            await trio.sleep(5)
            health.reconnects += 1

    client = await start_liveness(health={"w": health})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reconnect_in_vain)
        assert (await client.get("/healthz")).status_code == 200
        await trio.sleep(70 + 0.1 + 10 + 1)
        response = await client.get("/healthz")
        assert response.status_code == 500
        assert response.json()["watchers"]["w"].startswith("stalled")
        nursery.cancel_scope.cancel()


async def test_no_stall_detection_without_an_inactivity_timeout(
    autojump_clock: Any, start_liveness: Starter, settings: OperatorSettings
) -> None:
    settings.watching.inactivity_timeout = None
    health = WatchHealth()
    health.alive = True
    client = await start_liveness(health={"w": health})
    await trio.sleep(3600)
    assert (await client.get("/healthz")).status_code == 200


async def test_a_health_callable(autojump_clock: Any, start_liveness: Starter) -> None:
    problems: dict[str, str] = {}
    client = await start_liveness(health=lambda: ProbeHealth(dict(problems)))
    assert (await client.get("/healthz")).status_code == 200
    problems["peering"] = "lost"
    response = await client.get("/healthz")
    assert response.status_code == 500
    assert response.json()["watchers"] == {"peering": "lost"}


async def test_a_real_watcher_alive_stalled_and_dead(
    autojump_clock: Any,
    start_liveness: Starter,
    api_client: APIClient,
    fake_api: FakeAPI,
    settings: OperatorSettings,
) -> None:
    """A real list+watch stream against the fake API; its consumer stops consuming."""
    fake_api.create_object("configmaps", {"metadata": {"name": "cm1", "namespace": "default"}})
    settings.watching.inactivity_timeout = 30
    resource = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap")
    health = WatchHealth()
    client = await start_liveness(health={"configmaps in 'default'": health})
    send, receive = trio.open_memory_channel[WatchItem](0)
    async with trio.open_nursery() as nursery:
        stream = partial(
            stream_events,
            api_client,
            resource,
            "default",
            settings=settings.watching,
            send=send,
            health=health,
        )
        await nursery.start(stream)
        # The listing is in, but nobody receives it: the producer is blocked on sending.
        assert (await client.get("/healthz")).status_code == 200
        await trio.sleep(30 + 0.1 + 10 + 1)
        response = await client.get("/healthz")
        assert response.status_code == 500
        assert response.json()["watchers"]["configmaps in 'default'"].startswith("stalled")
        # The consumer catches up: the stream flows again.
        item = await receive.receive()
        assert item == {"type": None, "object": fake_api.get_object("configmaps", "cm1", "default")}
        await receive.receive()  # LISTED
        await trio.sleep(0.1)
        fake_api.create_object("configmaps", {"metadata": {"name": "cm2", "namespace": "default"}})
        await receive.receive()  # ADDED cm2: a line from the stream was heard
        assert (await client.get("/healthz")).status_code == 200
        nursery.cancel_scope.cancel()
    response = await client.get("/healthz")
    assert response.status_code == 500
    assert response.json()["watchers"] == {"configmaps in 'default'": "dead"}


async def test_a_real_watcher_whose_requests_hang_is_stalled_until_answered(
    autojump_clock: Any,
    start_liveness: Starter,
    api_client: APIClient,
    fake_api: FakeAPI,
    settings: OperatorSettings,
) -> None:
    """The API server accepts the watch requests and never answers (e.g. a stalled proxy)."""
    settings.watching.inactivity_timeout = 5
    resource = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap")
    health = WatchHealth()
    client = await start_liveness(health={"configmaps in 'default'": health})
    send, _receive = trio.open_memory_channel[WatchItem](100)
    hanging = fake_api.inject("GET", "*configmaps*", delay=3600, times=None, watch=True)
    async with trio.open_nursery() as nursery:
        stream = partial(
            stream_events,
            api_client,
            resource,
            "default",
            settings=settings.watching,
            send=send,
            health=health,
        )
        await nursery.start(stream)
        assert (await client.get("/healthz")).status_code == 200
        await trio.sleep(5 + 0.1 + 10 + 5)  # several reconnections in vain
        response = await client.get("/healthz")
        assert response.status_code == 500
        assert response.json()["watchers"]["configmaps in 'default'"].startswith("stalled")
        assert health.reconnects >= 3
        # The API server answers again: healthy with the next reconnection, without any event.
        fake_api.remove_injection(hanging)
        await trio.sleep(5 + 1)
        assert (await client.get("/healthz")).status_code == 200
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------------------------ endpoints


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://0.0.0.0:8080/healthz", ("0.0.0.0", 8080, "/healthz")),
        ("http://localhost:1234/", ("localhost", 1234, "/")),
        ("http://localhost:1234", ("localhost", 1234, "/")),
        ("http://127.0.0.1/x/y", ("127.0.0.1", 80, "/x/y")),
        ("http://[::1]:9000/h", ("::1", 9000, "/h")),
        ("http://:9000/h", ("0.0.0.0", 9000, "/h")),
    ],
)
def test_endpoint_parsing(endpoint: str, expected: tuple[str, int, str]) -> None:
    assert parse_endpoint(endpoint) == expected


@pytest.mark.parametrize(
    "endpoint", ["https://0.0.0.0:8080/", "tcp://0.0.0.0:8080", "0.0.0.0:8080", "http://h:x/"]
)
def test_unsupported_endpoints(endpoint: str) -> None:
    with pytest.raises(ValueError, match="liveness endpoint"):
        parse_endpoint(endpoint)
