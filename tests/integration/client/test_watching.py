"""The list+watch producer against a scripted server: order, resumption, relisting, timeouts.

Each test runs ``stream_events`` for a bounded stretch of virtual time, with an unbounded
channel, then looks at what was sent and at the requests the server received. After the script
is used up, the server hangs every request, so nothing unscripted happens.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from typing import Any

import pytest
import trio
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.errors import APIServerError
from trioperator._client.resources import Resource
from trioperator._client.settings import NetworkingSettings, WatchingSettings
from trioperator._client.watching import (
    LISTED,
    Listed,
    WatchHealth,
    WatchingError,
    WatchItem,
    stream_events,
)
from trioperator._runtime.support.httpserver import DropConnection, Response

KEX = Resource(group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample")
URL = "/apis/kopf.dev/v1/namespaces/ns1/kopfexamples"
WATCH_LOGGER = "kopf._cogs.clients.watching"  # as Kopf names it


def obj(name: str, rv: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns1", "uid": f"uid-{name}", "resourceVersion": rv}
    }


def listing(rv: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "KopfExampleList",
        "apiVersion": "kopf.dev/v1",
        "metadata": {"resourceVersion": rv},
        "items": list(items),
    }


def event(type: str, name: str, rv: str) -> dict[str, Any]:
    return {"type": type, "object": obj(name, rv)}


def bookmark(rv: str) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {"kind": "KopfExample", "metadata": {"resourceVersion": rv}},
    }


def expired(rv: str = "1") -> dict[str, Any]:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {rv} (999)",
        "reason": "Expired",
        "code": 410,
    }
    return {"type": "ERROR", "object": status}


def is_watch(request: Any) -> bool:
    return request.param("watch") == "true"


def shapes(items: list[WatchItem]) -> list[Any]:
    """Items as comparable tuples: (type, name) for events, LISTED as is."""
    result: list[Any] = []
    for item in items:
        if isinstance(item, Listed):
            result.append(item)
        else:
            result.append((item["type"], item["object"]["metadata"]["name"]))
    return result


@pytest.fixture
def watching() -> WatchingSettings:
    # Inactivity tracking is off unless a test is about it, so that hanging requests stay put.
    return WatchingSettings(inactivity_timeout=None, reconnect_backoff=0.1)


@pytest.fixture
def health() -> WatchHealth:
    return WatchHealth()


async def run_watch(
    api: APIClient,
    watching: WatchingSettings,
    *,
    seconds: float = 100,
    health: WatchHealth | None = None,
    namespace: str | None = "ns1",
) -> list[WatchItem]:
    send, receive = trio.open_memory_channel[WatchItem](math.inf)
    with trio.move_on_after(seconds):
        await stream_events(api, KEX, namespace, settings=watching, send=send, health=health)
    items: list[WatchItem] = []
    while True:
        try:
            items.append(receive.receive_nowait())
        except trio.WouldBlock:
            return items


async def test_list_then_listed_then_events_in_order(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    server.handler = server.hang
    server.script(
        server.json(listing("100", obj("a", "90"), obj("b", "95"))),
        server.stream(
            server.lines(
                event("ADDED", "c", "101"),
                event("MODIFIED", "a", "102"),
                event("DELETED", "b", "103"),
            ),
            then="hang",
        ),
    )
    items = await run_watch(api, watching)
    assert shapes(items) == [
        (None, "a"),
        (None, "b"),
        LISTED,
        ("ADDED", "c"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    listed_a = items[0]
    assert not isinstance(listed_a, Listed)
    assert listed_a["object"]["kind"] == "KopfExample"
    assert listed_a["object"]["apiVersion"] == "kopf.dev/v1"

    list_request, watch_request = server.requests[:2]
    assert list_request.path == URL
    assert list_request.param("watch") is None
    assert list_request.param("limit") == "500"
    assert watch_request.path == URL
    assert watch_request.query == {
        "watch": ["true"],
        "allowWatchBookmarks": ["true"],
        "resourceVersion": ["100"],
    }
    assert len(server.requests) == 2


async def test_started_after_the_first_listing(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    nursery: trio.Nursery,
) -> None:
    server.handler = server.hang
    server.script(
        server.json(listing("100", obj("a", "90"))),
        server.stream(server.lines(event("ADDED", "b", "101")), then="hang"),
    )
    # A channel without a buffer: starting must not wait for the consumer.
    send, receive = trio.open_memory_channel[WatchItem](0)
    await nursery.start(
        lambda task_status: stream_events(
            api, KEX, "ns1", settings=watching, send=send, task_status=task_status
        )
    )
    assert len(server.requests) == 1
    received = [await receive.receive() for _ in range(3)]
    assert shapes(received) == [(None, "a"), LISTED, ("ADDED", "b")]
    nursery.cancel_scope.cancel()


async def test_cluster_wide(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    server.handler = server.hang
    server.script(server.json(listing("1")))
    items = await run_watch(api, watching, namespace=None)
    assert items == [LISTED]
    assert [r.path for r in server.requests] == ["/apis/kopf.dev/v1/kopfexamples"] * 2


async def test_bookmark_advances_the_resume_version(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.stream(server.lines(event("ADDED", "a", "101"), bookmark("150"))),
    )
    items = await run_watch(api, watching)
    assert shapes(items) == [LISTED, ("ADDED", "a")]  # bookmarks are not forwarded
    assert len(server.requests) == 3
    first_watch, second_watch = server.requests[1:]
    assert first_watch.param("resourceVersion") == "100"
    assert second_watch.param("resourceVersion") == "150"
    assert is_watch(second_watch)  # resumed, not relisted
    assert second_watch.time - first_watch.time == pytest.approx(0.1)


async def test_events_advance_the_resume_version(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.stream(server.lines(event("ADDED", "a", "101"), event("MODIFIED", "a", "107"))),
    )
    await run_watch(api, watching)
    assert [r.param("resourceVersion") for r in server.requests] == [None, "100", "107"]


async def test_the_echo_of_our_own_write_brings_the_answer_and_still_advances(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    written = {**obj("a", "105"), "status": {"done": True}}
    raw = json.dumps(written, separators=(",", ":")).encode()
    api.recent_writes.remember(raw, written)
    server.handler = server.hang
    server.script(
        server.json(listing("100", obj("a", "90"))),
        server.stream(
            [
                b'{"type":"MODIFIED","object":' + raw + b"}\n",
                *server.lines(event("MODIFIED", "b", "106")),
            ]
        ),
    )
    items = await run_watch(api, watching)
    assert shapes(items) == [(None, "a"), LISTED, ("MODIFIED", "a"), ("MODIFIED", "b")]
    echoed, other = items[2], items[3]
    assert not isinstance(echoed, Listed)
    assert not isinstance(other, Listed)
    assert echoed["object"] is written
    assert other["object"] == obj("b", "106")
    assert not api.recent_writes
    assert [r.param("resourceVersion") for r in server.requests] == [None, "100", "106"]


async def test_server_closing_the_stream_resumes_after_the_backoff(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    watching.reconnect_backoff = 2.5
    watching.server_timeout = 300
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.stream([]),
        server.stream([]),
    )
    await run_watch(api, watching)
    watches = server.requests[1:]
    assert len(watches) == 3
    assert all(r.param("resourceVersion") == "100" for r in watches)
    assert all(r.param("timeoutSeconds") == "300" for r in watches)
    assert [round(b.time - a.time, 6) for a, b in itertools.pairwise(watches)] == [
        2.5,
        2.5,
    ]


async def test_error_410_event_relists(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    server.handler = server.hang
    server.script(
        server.json(listing("100", obj("a", "90"))),
        server.stream(server.lines(event("ADDED", "b", "101"), expired("101")), then="hang"),
        server.json(listing("200", obj("a", "90"), obj("b", "101"))),
        server.stream(server.lines(event("DELETED", "a", "201")), then="hang"),
    )
    items = await run_watch(api, watching)
    assert shapes(items) == [
        (None, "a"),
        LISTED,
        ("ADDED", "b"),
        (None, "a"),
        (None, "b"),
        LISTED,
        ("DELETED", "a"),
    ]
    assert [(is_watch(r), r.param("resourceVersion")) for r in server.requests] == [
        (False, None),
        (True, "100"),
        (False, None),
        (True, "200"),
    ]


async def test_http_410_relists(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.status(410, "too old resource version", reason="Expired"),
        server.json(listing("300")),
    )
    items = await run_watch(api, watching)
    assert items == [LISTED, LISTED]
    assert [(is_watch(r), r.param("resourceVersion")) for r in server.requests] == [
        (False, None),
        (True, "100"),
        (False, None),
        (True, "300"),
    ]


async def test_other_error_event_raises(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    server.handler = server.hang
    status = {"kind": "Status", "status": "Failure", "message": "etcd is on fire", "code": 500}
    server.script(
        server.json(listing("100")),
        server.stream(server.lines({"type": "ERROR", "object": status}), then="hang"),
    )
    with pytest.raises(WatchingError, match="etcd is on fire") as info:
        await run_watch(api, watching)
    assert info.value.status == status


async def test_drop_mid_stream_resumes_from_the_last_version(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        # The last line is cut short by the dropped connection and is lost.
        server.stream(
            [*server.lines(event("ADDED", "a", "101"), event("MODIFIED", "a", "102")), b'{"type":'],
            then="drop",
        ),
        server.stream(server.lines(event("MODIFIED", "a", "103")), then="hang"),
    )
    items = await run_watch(api, watching)
    assert shapes(items) == [LISTED, ("ADDED", "a"), ("MODIFIED", "a"), ("MODIFIED", "a")]
    assert [(is_watch(r), r.param("resourceVersion")) for r in server.requests] == [
        (False, None),
        (True, "100"),
        (True, "102"),
    ]


async def test_failures_to_establish_are_retried_by_the_client(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    networking: NetworkingSettings,
) -> None:
    networking.error_backoffs = [3, 4]
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        DropConnection(),
        server.status(503),
        server.stream(server.lines(event("ADDED", "a", "101")), then="hang"),
    )
    items = await run_watch(api, watching)
    assert shapes(items) == [LISTED, ("ADDED", "a")]
    watches = server.requests[1:]
    assert [r.param("resourceVersion") for r in watches] == ["100", "100", "100"]
    assert [round(r.time - watches[0].time, 6) for r in watches] == [0, 3, 7]


async def test_inactivity_reconnects_from_the_last_version(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    caplog: pytest.LogCaptureFixture,
    health: WatchHealth,
) -> None:
    caplog.set_level(logging.DEBUG, WATCH_LOGGER)  # at DEBUG, as in Kopf
    watching.inactivity_timeout = 15
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.stream(server.lines(event("ADDED", "a", "101")), then="hang"),
        server.stream(server.lines(event("MODIFIED", "a", "102")), then="hang"),
    )
    items = await run_watch(api, watching, seconds=20, health=health)
    assert shapes(items) == [LISTED, ("ADDED", "a"), ("MODIFIED", "a")]
    watches = server.requests[1:]
    assert [r.param("resourceVersion") for r in watches] == ["100", "101"]
    assert watches[1].time - watches[0].time == pytest.approx(15.1)
    messages = [r.getMessage() for r in caplog.records if r.name == WATCH_LOGGER]
    assert messages == [
        "Watch-stream for kopfexamples.v1.kopf.dev in 'ns1' is inactive for 15 seconds;"
        " reconnecting."
    ]
    assert health.reconnects == 1
    assert health.last_activity == pytest.approx(watches[1].time)
    assert not health.alive


async def test_every_line_postpones_the_inactivity_timeout(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    watching.inactivity_timeout = 15

    async def slow_bookmarks() -> Any:
        for rv in range(101, 105):
            yield json.dumps(bookmark(str(rv))).encode() + b"\n"
            await trio.sleep(10)
        await trio.sleep_forever()

    server.handler = server.hang
    server.script(server.json(listing("100")), Response(200, slow_bookmarks()))
    await run_watch(api, watching, seconds=54)
    watches = server.requests[1:]
    # Bookmarks came at 0, 10, 20, 30; silence from then on; reconnect at 45 + 0.1, or up to
    # 1% of the timeout later (the deadline is not moved for every line).
    assert [r.param("resourceVersion") for r in watches] == ["100", "104"]
    assert 45.1 <= watches[1].time - watches[0].time <= 45.1 + 0.15 + 1e-6


async def test_inactivity_covers_a_server_that_never_answers(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    watching.inactivity_timeout = 20
    server.handler = server.hang
    server.script(server.json(listing("100")))
    await run_watch(api, watching, seconds=50)
    watches = server.requests[1:]
    assert [round(r.time - watches[0].time, 6) for r in watches] == [0, 20.1, 40.2]


async def test_a_slow_consumer_is_not_inactivity(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    nursery: trio.Nursery,
) -> None:
    watching.inactivity_timeout = 15
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.stream(server.lines(event("ADDED", "a", "101"), event("ADDED", "b", "102"))),
    )
    send, receive = trio.open_memory_channel[WatchItem](0)
    nursery.start_soon(lambda: stream_events(api, KEX, "ns1", settings=watching, send=send))
    assert await receive.receive() is LISTED
    await trio.sleep(40)  # the producer is blocked on sending "a" all this time
    assert shapes([await receive.receive(), await receive.receive()]) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]
    assert len(server.requests) == 2  # no reconnection happened while the consumer was slow
    nursery.cancel_scope.cancel()


async def test_an_event_cut_off_by_the_client_timeout_is_not_skipped(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    nursery: trio.Nursery,
) -> None:
    watching.client_timeout = 10
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.stream(server.lines(event("ADDED", "a", "101")), then="hang"),
        server.stream(server.lines(event("ADDED", "a", "101")), then="hang"),
    )
    send, receive = trio.open_memory_channel[WatchItem](0)
    nursery.start_soon(lambda: stream_events(api, KEX, "ns1", settings=watching, send=send))
    assert await receive.receive() is LISTED
    await trio.sleep(15)  # the send of "a" is cancelled by the client timeout at 10 s
    assert shapes([await receive.receive()]) == [("ADDED", "a")]
    watches = server.requests[1:]
    assert [r.param("resourceVersion") for r in watches] == ["100", "100"]
    nursery.cancel_scope.cancel()


async def test_client_timeout_reconnects(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    watching.client_timeout = 30
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.stream(server.lines(event("ADDED", "a", "101")), then="hang"),
    )
    await run_watch(api, watching, seconds=40)
    watches = server.requests[1:]
    assert [r.param("resourceVersion") for r in watches] == ["100", "101"]
    assert watches[1].time - watches[0].time == pytest.approx(30.1)


async def test_garbage_line_is_skipped_with_a_warning(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.stream(
            [
                b"this is not json\n",
                b'{"type": "ADDED"}\n',
                *server.lines(event("ADDED", "a", "101")),
            ],
            then="hang",
        ),
    )
    items = await run_watch(api, watching)
    assert shapes(items) == [LISTED, ("ADDED", "a")]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert all("undecodable line" in r.getMessage() for r in warnings)
    assert "this is not json" in warnings[0].getMessage()


async def test_unknown_event_type_is_skipped_with_a_warning(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.stream(
            server.lines(event("SOMETHING", "x", "500"), event("ADDED", "a", "101")),
        ),
    )
    items = await run_watch(api, watching)
    assert shapes(items) == [LISTED, ("ADDED", "a")]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "Ignoring an unsupported event type 'SOMETHING'"
        " in the watch-stream of kopfexamples.v1.kopf.dev in 'ns1'."
    ]
    # Unknown events do not move the resume version.
    assert server.requests[2].param("resourceVersion") == "101"


async def test_huge_lines_in_small_chunks(
    autojump_clock: MockClock, api: APIClient, server, watching: WatchingSettings
) -> None:
    big = event("ADDED", "big", "101")
    big["object"]["data"] = {"blob": "x" * (3 * 1024 * 1024)}
    line = json.dumps(big).encode() + b"\n"
    chunks = [line[i : i + 50_000] for i in range(0, len(line), 50_000)]
    server.handler = server.hang
    server.script(server.json(listing("100")), server.stream(chunks, then="hang"))
    items = await run_watch(api, watching)
    assert shapes(items) == [LISTED, ("ADDED", "big")]
    last = items[-1]
    assert not isinstance(last, Listed)
    assert last["object"]["data"]["blob"] == "x" * (3 * 1024 * 1024)


async def test_throttled_watch_is_not_fatal(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    networking: NetworkingSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    networking.error_backoffs = []
    server.handler = server.hang
    server.script(
        server.json(listing("100")),
        server.status(429, headers={"Retry-After": "1"}),
        server.stream(server.lines(event("ADDED", "a", "101")), then="hang"),
    )
    items = await run_watch(api, watching)
    assert shapes(items) == [LISTED, ("ADDED", "a")]
    assert [r.param("resourceVersion") for r in server.requests] == [None, "100", "100"]
    assert any("throttled" in r.getMessage() for r in caplog.records)


async def test_server_errors_escalate_after_the_retries(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    networking: NetworkingSettings,
    health: WatchHealth,
) -> None:
    networking.error_backoffs = [1]
    server.script(server.json(listing("100")), server.status(500), server.status(500))
    with pytest.raises(APIServerError):
        await run_watch(api, watching, health=health)
    assert len(server.requests) == 3
    assert not health.alive


async def test_health_while_streaming(
    autojump_clock: MockClock,
    api: APIClient,
    server,
    watching: WatchingSettings,
    health: WatchHealth,
    nursery: trio.Nursery,
) -> None:
    assert not health.alive
    assert health.silent_for() == math.inf
    server.handler = server.hang
    server.script(server.json(listing("100")))
    send, _receive = trio.open_memory_channel[WatchItem](math.inf)
    await nursery.start(
        lambda task_status: stream_events(
            api, KEX, "ns1", settings=watching, send=send, health=health, task_status=task_status
        )
    )
    assert health.alive
    assert health.listings == 1
    await trio.sleep(33)
    assert health.silent_for() == pytest.approx(33)
    nursery.cancel_scope.cancel()
