"""Watching through the client: events as (type, object), versions followed, bookmarks,
errors in the stream, and the bounds of a stream."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trioperator as kopf
from tests.integration.apiclient.conftest import configmap
from trioperator.testing import FakeAPI


async def test_events_from_a_listing_on(
    autojump_clock: Any, api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    fake_api.create_object("configmaps", configmap("before"))
    cms = api.resource("configmaps")
    listed = await cms.list(namespace="default")
    assert [o["metadata"]["name"] for o in listed] == ["before"]

    async with cms.watch(namespace="default", resource_version=listed.resource_version) as events:
        fake_api.create_object("configmaps", configmap("after", key="1"))
        fake_api.patch_object("configmaps", "after", {"data": {"key": "2"}}, "default")
        fake_api.delete_object("configmaps", "after", "default")
        seen = [await events.__anext__() for _ in range(3)]
        assert [(kind, obj["metadata"]["name"]) for kind, obj in seen] == [
            ("ADDED", "after"),
            ("MODIFIED", "after"),
            ("DELETED", "after"),
        ]
        assert seen[1][1]["data"] == {"key": "2"}
        assert events.resource_version == fake_api.resource_version
    watch = [r for r in fake_api.requests if r.query.get("watch") == "true"]
    assert watch[0].query["resourceVersion"] == listed.resource_version
    assert watch[0].query["allowWatchBookmarks"] == "true"


async def test_bookmarks_move_the_version_and_are_shown_only_when_asked(
    autojump_clock: Any, api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    listed = await cms.list(namespace="default")
    async with cms.watch(
        namespace="default", resource_version=listed.resource_version, bookmarks=True
    ) as events:
        fake_api.create_object("configmaps", configmap("one"))
        kind, _ = await events.__anext__()
        assert kind == "ADDED"
        fake_api.create_object("secrets", {"metadata": {"name": "s", "namespace": "default"}})
        kind, obj = await events.__anext__()  # after the bookmark interval (60 s, mock time)
        assert kind == "BOOKMARK"
        assert events.resource_version == obj["metadata"]["resourceVersion"]
        assert events.resource_version == fake_api.resource_version

    async with cms.watch(namespace="default", resource_version=listed.resource_version) as events:
        fake_api.create_object("secrets", {"metadata": {"name": "t", "namespace": "default"}})
        async with trio.open_nursery() as nursery:

            async def later() -> None:
                await trio.sleep(200)  # after a few bookmarks
                fake_api.create_object("configmaps", configmap("two"))

            nursery.start_soon(later)
            kinds = []
            async for kind, obj in events:
                kinds.append((kind, obj["metadata"]["name"]))
                if obj["metadata"]["name"] == "two":
                    break
        assert kinds == [("ADDED", "one"), ("ADDED", "two")]  # no bookmarks among them


async def test_an_expired_version_is_gone(
    autojump_clock: Any, api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    async with cms.watch(namespace="default", resource_version="1") as events:
        fake_api.inject_watch_error("*/configmaps", 410, reason="Expired", message="too old")
        with pytest.raises(kopf.APIGoneError) as info:
            await events.__anext__()
    assert info.value.message == "too old"


async def test_the_stream_ends_when_the_server_ends_it(
    autojump_clock: Any, api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    started = trio.current_time()
    async with cms.watch(namespace="default", timeout_seconds=30) as events:
        assert [event async for event in events] == []
    assert trio.current_time() - started == pytest.approx(30, abs=1)
    [watch] = [r for r in fake_api.requests if r.query.get("watch") == "true"]
    assert watch.query["timeoutSeconds"] == "30"


async def test_an_event_over_the_line_limit_ends_the_stream(fake_api: FakeAPI) -> None:
    settings = kopf.APIClientSettings(max_line_size=4096)
    credentials = kopf.ConnectionInfo(server=fake_api.url, token="fake")
    async with kopf.connect_api(credentials=credentials, settings=settings) as api:
        cms = api.resource("configmaps")
        listed = await cms.list(namespace="default")
        async with cms.watch(namespace="default", resource_version=listed.resource_version) as ev:
            fake_api.create_object("configmaps", configmap("big", blob="x" * 10_000))
            with pytest.raises(kopf.APIResponseTooLargeError):
                await ev.__anext__()


async def test_a_watch_is_used_within_its_block(api: kopf.AsyncAPI, fake_api: FakeAPI) -> None:
    events = api.resource("configmaps").watch(namespace="default")
    with pytest.raises(RuntimeError, match="async with"):
        await events.__anext__()
