"""Posting Kubernetes Events: the exact JSON, namespaces, message cutting, ignored failures."""

from __future__ import annotations

import datetime
import logging

import pytest
from trio.testing import MockClock
from trioperator._client.api import APIClient
from trioperator._client.errors import APIServerError
from trioperator._client.events import cut_message, post_event
from trioperator._client.settings import NetworkingSettings

NOW = datetime.datetime(2020, 12, 31, 23, 59, 59, 0, tzinfo=datetime.UTC)
REF = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "name": "kopf-example-1",
    "uid": "uid-1",
    "namespace": "ns1",
}
COMMON = {
    "reporting_component": "kopf",
    "reporting_instance": "dev",
    "name_prefix": "kopf-event-",
    "now": NOW,
}


async def test_event_json(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json({}, 201))
    await post_event(api, ref=REF, type="Normal", reason="Testing", message="Hello.", **COMMON)
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/api/v1/namespaces/ns1/events")
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {
        "metadata": {"namespace": "ns1", "generateName": "kopf-event-"},
        "action": "Action?",
        "type": "Normal",
        "reason": "Testing",
        "message": "Hello.",
        "reportingComponent": "kopf",
        "reportingInstance": "dev",
        "source": {"component": "kopf"},
        "involvedObject": REF,
        "firstTimestamp": "2020-12-31T23:59:59.000000+00:00",
        "lastTimestamp": "2020-12-31T23:59:59.000000+00:00",
        "eventTime": "2020-12-31T23:59:59.000000+00:00",
    }


async def test_cluster_scoped_object_gets_its_event_in_default_without_event_time(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    # kube-apiserver rejects an event about a cluster-scoped object with eventTime outside
    # kube-system (1.20), and without eventTime outside "default": only this shape is accepted.
    server.script(server.json({}, 201))
    ref = {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}
    await post_event(api, ref=ref, type="Warning", reason="R", message="m", **COMMON)
    [request] = server.requests
    assert request.path == "/api/v1/namespaces/default/events"
    body = request.json()
    assert body["metadata"]["namespace"] == "default"
    assert body["involvedObject"] == ref  # no namespace key for cluster-scoped objects
    assert "eventTime" not in body
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2020-12-31T23:59:59.000000+00:00"


async def test_long_message_is_cut(autojump_clock: MockClock, api: APIClient, server) -> None:
    server.script(server.json({}, 201))
    message = "H" * 600 + "M" * 1000 + "T" * 600
    await post_event(api, ref=REF, type="Normal", reason="R", message=message, **COMMON)
    posted = server.requests[0].json()["message"]
    assert len(posted) == 1024
    assert posted == "H" * 511 + "..." + "T" * 510  # as Kopf cuts it


@pytest.mark.parametrize(
    ("size", "expected"),
    [(0, 0), (1023, 1023), (1024, 1024), (1025, 1024), (5000, 1024)],
)
def test_cut_message_sizes(size: int, expected: int) -> None:
    message = "x" * size
    cut = cut_message(message)
    assert len(cut) == expected
    assert (cut == message) == (size <= 1024)


async def test_events_about_events_are_not_posted(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    ref = {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "u", "namespace": "ns1"}
    await post_event(api, ref=ref, type="Normal", reason="R", message="m", **COMMON)
    assert server.requests == []


async def test_client_errors_are_logged_and_ignored(
    autojump_clock: MockClock, api: APIClient, server, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(server.status(403, "events is forbidden", reason="Forbidden"))
    await post_event(api, ref=REF, type="Normal", reason="R", message="m", **COMMON)
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith(
        "Failed to post an event. Ignoring and continuing. Code: 403. Message: events is forbidden."
    )


async def test_server_errors_escalate_after_retries(
    autojump_clock: MockClock, api: APIClient, server, networking: NetworkingSettings
) -> None:
    networking.error_backoffs = [1]
    server.script(server.status(500), server.status(500))
    with pytest.raises(APIServerError):
        await post_event(api, ref=REF, type="Normal", reason="R", message="m", **COMMON)
    assert len(server.requests) == 2


async def test_default_time_is_now_in_utc(
    autojump_clock: MockClock, api: APIClient, server
) -> None:
    server.script(server.json({}, 201))
    await post_event(
        api,
        ref=REF,
        type="Normal",
        reason="R",
        message="m",
        reporting_component="c",
        reporting_instance="i",
        name_prefix="p-",
    )
    stamp = server.requests[0].json()["eventTime"]
    parsed = datetime.datetime.fromisoformat(stamp)
    assert parsed.utcoffset() == datetime.timedelta(0)
    assert len(stamp.split(".")[1]) == len("000000+00:00")
