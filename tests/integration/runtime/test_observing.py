"""Observing a whole resource: a listing is handed over at once, then changes one by one."""

from __future__ import annotations

import copy
import math
from typing import Any

import trio
from tests.integration.conftest import wait_until
from trioperator._client.api import APIClient
from trioperator._client.resources import Resource
from trioperator._client.settings import WatchingSettings
from trioperator._client.watching import RawWatchEvent
from trioperator._runtime.support.observing import observe_resource
from trioperator.testing import FakeAPI

EXAMPLES = Resource(group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample")


def body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": name, "namespace": "default"},
        "spec": copy.deepcopy(spec),
    }


class Seen:
    def __init__(self) -> None:
        self.listings: list[list[str]] = []
        self.events: list[tuple[str | None, str]] = []
        self.wakes: list[float] = []

    @staticmethod
    def keep(event: RawWatchEvent) -> str | None:
        name: str = event["object"]["metadata"]["name"]
        return None if name.startswith("skip") else name  # what the observer needs of it

    async def on_listing(self, names: list[str]) -> None:
        self.listings.append(sorted(names))

    async def on_event(self, event: RawWatchEvent) -> None:
        self.events.append((event["type"], event["object"]["metadata"]["name"]))


async def test_a_listing_comes_whole_and_kept_then_the_changes_one_by_one(
    autojump_clock: Any, fake_api: FakeAPI, api_client: APIClient
) -> None:
    for name in ("b", "a", "skip-me"):
        fake_api.create_object("kopfexamples", body(name))
    seen = Seen()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: observe_resource(
                api_client,
                EXAMPLES,
                "default",
                settings=WatchingSettings(),
                keep=seen.keep,
                on_listing=seen.on_listing,
                on_event=seen.on_event,
            )
        )
        await wait_until(lambda: seen.listings)
        assert seen.listings == [["a", "b"]]
        assert seen.events == []

        fake_api.create_object("kopfexamples", body("c"))
        fake_api.delete_object("kopfexamples", "a", "default")
        await wait_until(lambda: len(seen.events) == 2)
        assert seen.events == [("ADDED", "c"), ("DELETED", "a")]
        assert seen.listings == [["a", "b"]]  # changes never make a listing
        nursery.cancel_scope.cancel()


async def test_the_observer_is_woken_up_when_asked_with_nothing_received(
    autojump_clock: Any, fake_api: FakeAPI, api_client: APIClient
) -> None:
    seen = Seen()
    wake_at = math.inf

    async def relisted(names: list[str]) -> None:
        nonlocal wake_at
        await seen.on_listing(names)
        seen.wakes.append(trio.current_time())  # the listing's time, first
        wake_at = trio.current_time() + 30

    async def woken() -> None:
        nonlocal wake_at
        seen.wakes.append(trio.current_time())
        wake_at = math.inf if len(seen.wakes) >= 3 else trio.current_time() + 30

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: observe_resource(
                api_client,
                EXAMPLES,
                "default",
                settings=WatchingSettings(),
                keep=seen.keep,
                on_listing=relisted,
                on_event=seen.on_event,
                wake_at=lambda: wake_at,
                on_wake=woken,
            )
        )
        await wait_until(lambda: seen.listings)
        await trio.sleep(100)
        assert seen.listings == [[]]
        listed_at = seen.wakes[0]
        assert seen.wakes == [listed_at, listed_at + 30, listed_at + 60]  # then never again
        nursery.cancel_scope.cancel()
