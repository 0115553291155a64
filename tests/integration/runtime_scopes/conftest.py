"""The orchestrator in the test's nursery against the fake API, on trio's mock clock.

It is driven directly (not through ``Operator``): an ``OperatorContext`` is built as the
operator builds it, and ``Orchestration.run`` is started in the test's nursery.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from tests.integration.conftest import wait_until
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.watching import WatchHealth
from trioperator._engine.memos import Memo
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.invocation import make_limiter
from trioperator._runtime.pipeline.contexts import OperatorContext
from trioperator._runtime.program.orchestration import Orchestration
from trioperator.testing import FakeAPI


@pytest.fixture
async def bare_api() -> AsyncIterator[FakeAPI]:
    """The fake API without the example CRD.

    Frequent bookmarks make the fake notice soon that a client has closed a watch (it only
    notices when it writes), so that ``open_watches`` follows the watchers closely.
    """
    async with FakeAPI.serve(bookmark_interval=1.0) as api:
        yield api


@pytest.fixture
def fake_api(bare_api: FakeAPI, crd: dict[str, Any]) -> FakeAPI:
    """The fake API with the example CRD."""
    bare_api.create_object("customresourcedefinitions", crd)
    return bare_api


class Orchestrated:
    """A running orchestrator, its context, and a graceful stop."""

    def __init__(self, context: OperatorContext, orchestration: Orchestration) -> None:
        self.context = context
        self.orchestration = orchestration
        self.finished = trio.Event()

    wait_for = staticmethod(wait_until)

    @property
    def serving(self) -> set[tuple[str, str | None]]:
        """``(plural, namespace)`` of every running watcher."""
        return {(resource.plural, ns) for resource, ns in self.orchestration.serving}

    async def stop(self) -> None:
        self.context.stopping.set()
        await wait_until(self.finished.is_set)


@pytest.fixture
async def orchestrate(
    bare_api: FakeAPI, registry: OperatorRegistry, settings: OperatorSettings
) -> AsyncIterator[Any]:
    """``await orchestrate(*patterns, clusterwide=False, health=None)`` starts one."""
    vault = Vault({"fake": ConnectionInfo(server=bare_api.url, token="fake")})
    async with APIClient(vault, settings.networking) as api, trio.open_nursery() as nursery:
        started: list[Orchestrated] = []

        async def start(
            *patterns: str | re.Pattern[str],
            clusterwide: bool = False,
            health: dict[str, WatchHealth] | None = None,
        ) -> Orchestrated:
            context = OperatorContext(
                api=api,
                registry=registry,
                settings=settings,
                memo=Memo(),
                thread_limiter=make_limiter(settings.execution.max_workers),
            )
            finished = trio.Event()

            async def main(*, task_status: trio.TaskStatus[Orchestration]) -> None:
                try:
                    await Orchestration(
                        context,
                        api=api,
                        registry=registry,
                        settings=settings,
                        namespaces_patterns=patterns,
                        clusterwide=clusterwide,
                        health=health,
                    ).run(task_status=task_status)
                finally:
                    finished.set()

            with trio.fail_after(60):
                orchestration = await nursery.start(main)
            running = Orchestrated(context, orchestration)
            running.finished = finished
            started.append(running)
            return running

        yield start
        for running in started:
            running.context.stopping.set()
