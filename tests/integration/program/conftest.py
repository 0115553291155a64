"""The operator's program-level activities (event poster, liveness probes) against the fake API.

Each piece runs in the test's nursery on trio's mock clock, with an API client of a vault that
points at the fake API.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
from tests.integration.conftest import wait_until
from trioperator._client.api import APIClient
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.posting import (
    K8sEvent,
    ObjectEventsHandler,
    install_poster,
    open_poster_channel,
    run_poster,
)


class Posting:
    """Starts a poster in the test's nursery and installs it for the test's own task."""

    def __init__(self, nursery: trio.Nursery, api: APIClient, settings: OperatorSettings) -> None:
        self.nursery = nursery
        self.api = api
        self.settings = settings
        self.send: trio.MemorySendChannel[K8sEvent] | None = None
        self.finished = trio.Event()

    @contextlib.asynccontextmanager
    async def running(self, max_queued: int | None = None, **kwargs: Any) -> AsyncIterator[Posting]:
        """While inside, ``trioperator.event()`` & co. of this task queue to a running poster.

        (A context manager entered in the test's own task: a context variable set by a
        fixture would not be seen by the test.)
        """
        send, receive = (
            open_poster_channel() if max_queued is None else open_poster_channel(max_queued)
        )
        self.send = send

        async def poster(*, task_status: trio.TaskStatus[None]) -> None:
            try:
                await run_poster(
                    self.api,
                    settings=self.settings,
                    receive=receive,
                    task_status=task_status,
                    **kwargs,
                )
            finally:
                self.finished.set()

        await self.nursery.start(poster)
        with install_poster(send, settings=self.settings):
            yield self

    def close(self) -> None:
        """Close the queue, as the operator does when it stops gracefully."""
        assert self.send is not None
        self.send.close()


@pytest.fixture
def posting(nursery: trio.Nursery, api_client: APIClient, settings: OperatorSettings) -> Posting:
    return Posting(nursery, api_client, settings)


@pytest.fixture(autouse=True)
def _no_leftover_log_handler() -> Iterator[None]:
    """The log-to-events handler is installed once per process; keep tests independent."""
    yield
    ObjectEventsHandler.uninstall()


class Helpers:
    # Test modules cannot import from a conftest (importlib mode): helpers ride on a fixture.
    wait_until = staticmethod(wait_until)


@pytest.fixture
def helpers() -> type[Helpers]:
    return Helpers
