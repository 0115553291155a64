"""Repeated Events are counted on one Event object (``count``, ``lastTimestamp``), not posted anew.

What a user observes: the Events the (fake) API holds after the operator posted the same one
several times, and the log lines when counting is not possible.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.posting import info, warn
from trioperator.testing import FakeAPI

BODY: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "kopf-example-1", "namespace": "default", "uid": "uid-1"},
}


def events(api: FakeAPI) -> list[dict[str, Any]]:
    stored = api.objects("events", "default")
    return sorted(stored, key=lambda e: e["metadata"]["creationTimestamp"] + e["metadata"]["name"])


def summary(api: FakeAPI) -> list[tuple[str, str, int]]:
    """Reason, message and how many times each Event happened (no ``count``: once)."""
    stored = api.objects("events", "default")
    return sorted((e["reason"], e["message"], e.get("count") or 1) for e in stored)


async def _post_and_wait(
    fake_api: FakeAPI, helpers: Any, fn: Any, *args: Any, **kwargs: Any
) -> None:
    """Post one event and wait until the API has it (a new Event, or a count or time changed)."""
    before = [(e["metadata"]["name"], e.get("count"), e["lastTimestamp"]) for e in events(fake_api)]
    fn(*args, **kwargs)
    await helpers.wait_until(
        lambda: (
            [(e["metadata"]["name"], e.get("count"), e["lastTimestamp"]) for e in events(fake_api)]
            != before
        )
    )


async def test_repeats_are_counted_on_one_event(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    async with posting.running():
        for _ in range(5):
            await _post_and_wait(fake_api, helpers, info, BODY, reason="Busy", message="Working.")
            await trio.sleep(7)

    [event] = events(fake_api)
    assert (event["type"], event["reason"], event["message"]) == ("Normal", "Busy", "Working.")
    assert event["count"] == 5
    assert event["firstTimestamp"] < event["lastTimestamp"]
    assert event["metadata"]["name"].startswith("kopf-event-")
    assert event["involvedObject"]["uid"] == "uid-1"


async def test_only_exact_repeats_are_counted(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    other = {**BODY, "metadata": {**BODY["metadata"], "name": "other", "uid": "uid-2"}}
    async with posting.running():
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="a")
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="b")
        await _post_and_wait(fake_api, helpers, warn, BODY, reason="R", message="a")
        await _post_and_wait(fake_api, helpers, info, other, reason="R", message="a")
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="a")
        await _post_and_wait(fake_api, helpers, info, BODY, reason="S", message="a")
    assert len(events(fake_api)) == 5
    assert summary(fake_api) == [
        ("R", "a", 1),
        ("R", "a", 1),
        ("R", "a", 2),
        ("R", "b", 1),
        ("S", "a", 1),
    ]


async def test_a_repeat_after_the_window_is_a_new_event(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    settings: OperatorSettings,
) -> None:
    settings.posting.aggregation_window = 60
    async with posting.running():
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="m")
        await trio.sleep(59)
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="m")
        await trio.sleep(59)  # the window restarts with every repeat
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="m")
        await trio.sleep(61)
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="m")
    assert [e.get("count") for e in events(fake_api)] == [3, None]


async def test_no_counting_with_a_zero_window(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    settings: OperatorSettings,
) -> None:
    settings.posting.aggregation_window = 0
    async with posting.running():
        for _ in range(3):
            await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="m")
    assert [e.get("count") for e in events(fake_api)] == [None, None, None]


async def test_the_memory_is_bounded_in_size(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    settings: OperatorSettings,
) -> None:
    settings.posting.aggregation_size = 2
    async with posting.running():
        for message in ["a", "b", "c", "a", "c"]:  # "a" was forgotten when "c" came
            await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message=message)
    assert summary(fake_api) == [("R", "a", 1), ("R", "a", 1), ("R", "b", 1), ("R", "c", 2)]


async def test_a_deleted_event_is_posted_anew(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    async with posting.running():
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="m")
        [first] = events(fake_api)
        fake_api.delete_object("events", first["metadata"]["name"], "default")
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="m")
        await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="m")
    [event] = events(fake_api)
    assert event["metadata"]["name"] != first["metadata"]["name"]
    assert event["count"] == 2


async def test_without_permission_to_patch_repeats_are_posted_as_before(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    fake_api.inject("PATCH", "/api/v1/namespaces/*/events/*", status=403, times=None)
    async with posting.running():
        for _ in range(4):
            await _post_and_wait(fake_api, helpers, info, BODY, reason="R", message="m")
    assert [e.get("count") for e in events(fake_api)] == [None] * 4
    warnings = [r.getMessage() for r in caplog_trioperator.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once, not per event: no PATCH is tried after the first 403
    assert "grant the 'patch' verb on events" in warnings[0]
