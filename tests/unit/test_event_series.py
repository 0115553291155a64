"""The memory of lately posted Events (``_client/event_series.py``): keys, age and size bounds."""

from __future__ import annotations

from typing import Any

from trioperator._client.event_series import PostedEvent, RecentEvents, event_key

BODY: dict[str, Any] = {
    "metadata": {"namespace": "ns1", "generateName": "kopf-event-"},
    "type": "Normal",
    "reason": "Testing",
    "message": "Hello.",
    "reportingComponent": "kopf",
    "reportingInstance": "dev",
    "involvedObject": {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "name": "example",
        "uid": "uid-1",
        "namespace": "ns1",
    },
    "firstTimestamp": "2020-12-31T23:59:59.000000+00:00",
    "lastTimestamp": "2020-12-31T23:59:59.000000+00:00",
}


def _posted(name: str) -> PostedEvent:
    return PostedEvent(namespace="ns1", name=name, count=1, seen=0.0)


def test_repeats_differ_only_in_their_times() -> None:
    later = {**BODY, "firstTimestamp": "x", "lastTimestamp": "y", "eventTime": "z"}
    assert event_key(later) == event_key(BODY)


def test_anything_else_makes_another_event() -> None:
    keys = {
        event_key(BODY),
        event_key({**BODY, "type": "Warning"}),
        event_key({**BODY, "reason": "Other"}),
        event_key({**BODY, "message": "Hello!"}),
        event_key({**BODY, "reportingInstance": "other"}),
        event_key({**BODY, "metadata": {"namespace": "default"}}),
        event_key({**BODY, "involvedObject": {**BODY["involvedObject"], "uid": "uid-2"}}),
        event_key({**BODY, "involvedObject": {**BODY["involvedObject"], "kind": "Other"}}),
    }
    assert len(keys) == 8


def test_found_within_the_window_of_its_last_repeat_only() -> None:
    recent = RecentEvents()
    key = event_key(BODY)
    recent.remember(key, _posted("e1"), now=100.0, window=60, max_size=10)
    found = recent.find(key, now=159.0, window=60)
    assert found == PostedEvent(namespace="ns1", name="e1", count=1, seen=100.0)
    assert found is not None
    recent.remember(key, found, now=159.0, window=60, max_size=10)
    assert recent.find(key, now=218.0, window=60) is not None  # the window restarted at 159
    assert recent.find(key, now=219.0, window=60) is None
    assert len(recent) == 0  # forgotten, not only hidden


def test_bounded_in_size_least_recently_repeated_first() -> None:
    recent = RecentEvents()
    keys = [event_key({**BODY, "message": f"m{i}"}) for i in range(4)]
    for index, key in enumerate(keys[:3]):
        recent.remember(key, _posted(f"e{index}"), now=float(index), window=60, max_size=3)
    recent.remember(keys[0], _posted("e0"), now=3.0, window=60, max_size=3)  # repeated
    recent.remember(keys[3], _posted("e3"), now=4.0, window=60, max_size=3)
    assert len(recent) == 3
    assert recent.find(keys[1], now=5.0, window=60) is None  # the least recently repeated
    assert [recent.find(k, now=5.0, window=60) is not None for k in keys] == [
        True,
        False,
        True,
        True,
    ]


def test_forget() -> None:
    recent = RecentEvents()
    key = event_key(BODY)
    recent.remember(key, _posted("e1"), now=0.0, window=60, max_size=10)
    recent.forget(key)
    recent.forget(key)  # twice is fine
    assert recent.find(key, now=0.0, window=60) is None
