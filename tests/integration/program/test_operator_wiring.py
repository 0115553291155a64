"""The poster and the liveness endpoint as parts of a whole running operator (fake API, mock clock).

These check the operator's wiring of trioperator/_runtime/handling/posting.py and
program/probing.py; they are skipped until the operator has that wiring
(``Operator(liveness_endpoint=...)``).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import httpx2 as httpx
import pytest
import trio
import trioperator as kopf
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.posting import info, warn
from trioperator._runtime.program.operator import Operator
from trioperator.testing import FakeAPI

pytestmark = pytest.mark.skipif(
    "liveness_endpoint" not in inspect.signature(Operator).parameters,
    reason="the operator does not wire the poster and the liveness endpoint yet",
)

OBJ: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "kopf-example-1", "namespace": "default"},
    "spec": {"field": "value"},
}


def reasons(api: FakeAPI) -> list[str]:
    stored = sorted(
        api.objects("events", "default"), key=lambda e: int(e["metadata"]["resourceVersion"])
    )
    return [e["reason"] for e in stored]


async def test_events_of_handlers_are_posted_and_drained_at_stop(
    autojump_clock: Any,
    crd_api: FakeAPI,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    helpers: Any,
) -> None:
    @kopf.on.startup(registry=registry)
    async def startup(**_: Any) -> None:
        info(OBJ, reason="FromStartup")  # queued before the poster runs

    @kopf.on.create("kopfexamples", id="sync_fn", registry=registry)
    def sync_fn(body: Any, **_: Any) -> None:
        info(body, reason="FromSync")

    @kopf.on.create("kopfexamples", id="async_fn", registry=registry)
    async def async_fn(body: Any, **_: Any) -> None:
        warn(body, reason="FromAsync")

    vault = Vault({"fake": ConnectionInfo(server=crd_api.url, token="fake")})
    operator = Operator(registry=registry, settings=settings, vault=vault)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        with trio.fail_after(60):
            await operator.ready_flag.wait()
        crd_api.create_object("kopfexamples", copy.deepcopy(OBJ))
        await helpers.wait_until(lambda: len(reasons(crd_api)) == 3)
        operator.stop()
    assert reasons(crd_api) == ["FromStartup", "FromSync", "FromAsync"]


async def test_liveness_endpoint_of_a_running_operator(
    autojump_clock: Any,
    crd_api: FakeAPI,
    registry: OperatorRegistry,
    settings: OperatorSettings,
) -> None:
    @kopf.on.probe(id="answer", registry=registry)
    async def answer(**_: Any) -> int:
        return 42

    @kopf.on.create("kopfexamples", registry=registry)
    async def create_fn(**_: Any) -> None:
        pass

    vault = Vault({"fake": ConnectionInfo(server=crd_api.url, token="fake")})
    # Typed loosely: the checker sees the operator as it is before the wiring.
    wired: Any = Operator
    operator: Any = wired(
        registry=registry,
        settings=settings,
        vault=vault,
        liveness_endpoint="http://127.0.0.1:0/healthz",
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        with trio.fail_after(60):
            await operator.ready_flag.wait()
        assert "kopfexamples.v1.kopf.dev cluster-wide" in operator.watchers_health
        assert set(operator.watchers_health) <= {
            "kopfexamples.v1.kopf.dev cluster-wide",
            "CRDs observer",  # it may not have listed the CRDs yet when the operator is ready
        }
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{operator.liveness_port}") as c:
            response = await c.get("/healthz")
        assert (response.status_code, response.json()) == (200, {"answer": 42})
        operator.stop()
