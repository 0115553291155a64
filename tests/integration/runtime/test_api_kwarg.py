"""Handlers get the API client as the ``api`` kwarg (trioperator's own), fitting their flavor:
trio and asyncio handlers an async one, sync handlers (in threads) a sync one; all logged in
as the operator. Each creates a child owned by the object, as an operator does."""

from __future__ import annotations

from typing import Any

import pytest
import sniffio
import trioperator as kopf


def child(name: str, owner: kopf.Body) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"made-by": name},
    }
    kopf.adopt(body, owner=owner)
    return body


async def test_handlers_of_each_flavor_create_children_through_the_api_kwarg(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    seen: dict[str, Any] = {}

    @kopf.on.create("kopfexamples", id="trio_fn", registry=registry)
    async def trio_fn(api: kopf.AsyncAPI, body: kopf.Body, **_: Any) -> None:
        created = await api.resource("configmaps").create(child("from-trio", body))
        seen["trio"] = (sniffio.current_async_library(), created["metadata"]["uid"])
        seen["trio-accessor"] = kopf.api_client() is api

    @kopf.on.create("kopfexamples", id="asyncio_fn", flavor="asyncio", registry=registry)
    async def asyncio_fn(api: kopf.AsyncAPI, body: kopf.Body, **_: Any) -> None:
        created = await api.resource("configmaps").create(child("from-asyncio", body))
        listed = await api.resource("configmaps").list(namespace=body.metadata.namespace)
        seen["asyncio"] = (sniffio.current_async_library(), created["metadata"]["uid"])
        seen["asyncio-listed"] = sorted(o["metadata"]["name"] for o in listed)

    @kopf.on.create("kopfexamples", id="sync_fn", registry=registry)
    def sync_fn(api: kopf.SyncAPI, body: kopf.Body, **_: Any) -> None:
        created = api.resource("configmaps").create(child("from-sync", body))
        seen["sync"] = (type(api).__name__, created["metadata"]["uid"])
        seen["sync-accessor"] = kopf.sync_api_client() is api

    running = await run_operator()
    owner = running.create()
    await running.wait_for(lambda: {"trio", "asyncio", "sync"} <= set(seen))

    assert seen["trio"][0] == "trio"
    assert seen["asyncio"][0] == "asyncio"
    assert seen["sync"][0] == "SyncAPI"
    assert seen["trio-accessor"] is True
    assert seen["sync-accessor"] is True
    assert "from-asyncio" in seen["asyncio-listed"]  # its own write, read back through asyncio
    for name in ("from-trio", "from-asyncio", "from-sync"):
        made = running.api.get_object("configmaps", name, "default")
        assert made["data"] == {"made-by": name}
        [reference] = made["metadata"]["ownerReferences"]
        assert reference["uid"] == owner["metadata"]["uid"]
        assert reference["kind"] == "KopfExample"
    await running.stop()


async def test_the_client_is_closed_when_the_operator_ends(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    kept: list[kopf.AsyncAPI] = []

    @kopf.on.create("kopfexamples", registry=registry)
    async def create_fn(api: kopf.AsyncAPI, **_: Any) -> None:
        await api.resource("configmaps").list(namespace="default")
        kept.append(api)

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: kept)
    await running.stop()
    with pytest.raises(RuntimeError, match="closed"):
        await kept[0].resource("configmaps").list(namespace="default")


async def test_handlers_that_do_not_use_it_make_no_client(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    got: list[object] = []

    @kopf.on.create("kopfexamples", registry=registry)
    async def create_fn(**kwargs: Any) -> None:
        got.append(kwargs["api"])

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: got)
    assert isinstance(got[0], kopf.AsyncAPI)
    assert not got[0]._state.sessions  # no HTTP client was made
    await running.stop()


def test_outside_an_operator_there_is_no_operator_client() -> None:
    with pytest.raises(RuntimeError, match="No operator is running"):
        kopf.api_client()
    with pytest.raises(RuntimeError, match="connect_api"):
        kopf.sync_api_client()


async def test_the_accessor_refuses_sync_code(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    errors: list[str] = []

    @kopf.on.create("kopfexamples", registry=registry)
    def create_fn(**_: Any) -> None:
        try:
            kopf.api_client()
        except RuntimeError as exc:
            errors.append(str(exc))

    running = await run_operator()
    running.create()
    await running.wait_for(lambda: errors)
    assert "sync_api_client()" in errors[0]
    await running.stop()
