"""Objects leaving a server-side selection while they hold our finalizer (docs/selectors.md),
on the fake API (which reports a departure as the API server does: DELETED, last state)."""

from __future__ import annotations

from typing import Any

import trio
import trioperator as kopf
from trioperator.testing import FakeAPI

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


def _handlers(registry: kopf.OperatorRegistry, seen: list[str]) -> None:
    @kopf.on.create("kopfexamples", labels={"a": "b"}, registry=registry)
    async def create(name: str, **_: Any) -> None:
        seen.append(f"create {name}")

    @kopf.on.delete("kopfexamples", labels={"a": "b"}, registry=registry)
    async def delete(name: str, **_: Any) -> None:
        seen.append(f"delete {name}")


def _finalizers(running: Any) -> list[str]:
    return list(running.obj()["metadata"].get("finalizers") or [])


async def test_a_departed_object_is_released_and_its_deletion_is_not_stuck(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: FakeAPI
) -> None:
    seen: list[str] = []
    _handlers(registry, seen)
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: FINALIZER in _finalizers(running) and seen)
    watches = [r.query for r in fake_api.requests if r.query.get("watch") == "true"]
    assert any(query.get("labelSelector") == "a=b" for query in watches)

    # The first release attempt meets a concurrent change (409): it reads again and retries.
    fake_api.inject("PATCH", "*/kopfexamples/kopf-example-1", status=409)
    running.patch({"metadata": {"labels": {"a": "c"}}})
    await running.wait_for(lambda: FINALIZER not in _finalizers(running))
    running.delete()
    await running.wait_for(lambda: not running.exists())
    await trio.sleep(10)
    assert seen == ["create kopf-example-1"]  # no handler matches it any more, as in Kopf
    releases = [
        r.body
        for r in fake_api.requests
        if r.method == "PATCH"
        and isinstance(r.body, dict)  # (our finalizer's addition is a JSON patch, a list)
        and "finalizers" in r.body.get("metadata", {})
    ]
    # The conflicting one, and the one that went through: both with the version they read.
    assert (
        releases
        == [
            {
                "metadata": {
                    "resourceVersion": releases[0]["metadata"]["resourceVersion"],
                    "finalizers": None,
                }
            }
        ]
        * 2
    )


async def test_an_object_that_comes_back_before_the_release_keeps_its_finalizer(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, fake_api: FakeAPI
) -> None:
    seen: list[str] = []
    _handlers(registry, seen)
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: FINALIZER in _finalizers(running) and seen)

    # The release's GET is slow; meanwhile the label comes back: the object is selected again.
    fake_api.inject("GET", "*/kopfexamples/kopf-example-1", delay=5)
    running.patch({"metadata": {"labels": {"a": "c"}}})
    await trio.sleep(1)
    running.patch({"metadata": {"labels": {"a": "b"}}})
    await trio.sleep(30)
    assert FINALIZER in _finalizers(running)
    released = [r for r in fake_api.requests if r.method == "PATCH" and isinstance(r.body, dict)]
    assert not [r for r in released if "finalizers" in r.body.get("metadata", {})]
    running.delete()
    await running.wait_for(lambda: not running.exists())
    assert seen == ["create kopf-example-1", "delete kopf-example-1"]
