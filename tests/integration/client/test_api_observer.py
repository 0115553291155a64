"""The API client tells its observer (the operator's metrics) of every attempt of every request:
Kubernetes' verb, the HTTP code (``None`` when nothing came back) and the latency."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.credentials import Vault
from trioperator._client.errors import APIConnectionError, APINotFoundError
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings
from trioperator._runtime.support.httpserver import DropConnection, Request, Response

THINGS = Resource(group="example.dev", version="v1", plural="things", kind="Thing")


class Observer:
    def __init__(self) -> None:
        self.seen: list[tuple[str, int | None, float]] = []

    def request_done(self, verb: str, code: int | None, seconds: float) -> None:
        self.seen.append((verb, code, seconds))

    @property
    def calls(self) -> list[tuple[str, int | None]]:
        return [(verb, code) for verb, code, _ in self.seen]


@pytest.fixture
def observer() -> Observer:
    return Observer()


@pytest.fixture
async def observed(vault: Vault, observer: Observer) -> Any:
    settings = NetworkingSettings()
    settings.error_backoffs = [1, 1]
    async with APIClient(vault, settings, observer=observer) as client:
        yield client


async def test_each_verb_is_named_as_kubernetes_names_it(
    autojump_clock: MockClock, observed: APIClient, observer: Observer, server: Any
) -> None:
    thing = {"kind": "Thing", "metadata": {"name": "a"}}
    server.script(
        server.json(thing),
        server.json({"kind": "ThingList", "metadata": {"resourceVersion": "1"}, "items": []}),
        server.json(thing, 201),
        server.json(thing),
        server.json({"kind": "Status"}),
        server.json({}),
    )
    await observed.get(THINGS, namespace="ns", name="a")
    await observed.list_objs(THINGS, namespace="ns")
    await observed.create(THINGS, namespace="ns", body=thing)
    await observed.patch(THINGS, namespace="ns", name="a", payload={"spec": {}})
    await observed.delete(THINGS, namespace="ns", name="a")
    await observed.request("POST", "/apis/example.dev/v1/anything", payload={})
    assert observer.calls == [
        ("get", 200),
        ("list", 200),
        ("create", 201),
        ("patch", 200),
        ("delete", 200),
        ("create", 200),
    ]


async def test_every_attempt_counts_with_its_code_and_latency(
    autojump_clock: MockClock, observed: APIClient, observer: Observer, server: Any
) -> None:
    async def slow(request: Request) -> Response:
        await trio.sleep(0.25)
        return server.json({"kind": "Thing"})

    server.script(server.status(503), DropConnection(), slow, server.status(404))
    await observed.get(THINGS, namespace="ns", name="a")
    with pytest.raises(APINotFoundError):
        await observed.get(THINGS, namespace="ns", name="b")
    assert observer.calls == [("get", 503), ("get", None), ("get", 200), ("get", 404)]
    # Time from the request to its answer (the backoffs between attempts are not in it).
    assert [round(seconds, 3) for _, _, seconds in observer.seen] == [0, 0, 0.25, 0]


async def test_a_watch_counts_when_its_stream_opens(
    autojump_clock: MockClock, observed: APIClient, observer: Observer, server: Any
) -> None:
    server.script(server.status(500), server.stream(server.lines({"type": "BOOKMARK"})))
    async with observed.stream("/apis/example.dev/v1/things", params={"watch": "true"}) as body:
        assert observer.calls == [("watch", 500), ("watch", 200)]
        async for _ in body:
            pass
    assert observer.calls == [("watch", 500), ("watch", 200)]


async def test_no_answer_at_all_is_an_error_code(
    autojump_clock: MockClock, observed: APIClient, observer: Observer, server: Any
) -> None:
    server.script(DropConnection(), DropConnection(), DropConnection())
    with pytest.raises(APIConnectionError):
        await observed.get(THINGS, namespace="ns", name="a")
    assert observer.calls == [("get", None)] * 3
