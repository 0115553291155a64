"""Admission against the fake API: the operator's WebhookFn and the managed configurations.

No sockets for reviews: the tests call the WebhookFn directly, as a server would, and a test
double of a trio-native server stands in for the real ones (``_kits/webhooks.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import trio
from tests.integration.conftest import wait_until
from trioperator._client.resources import Resource
from trioperator._engine.webhooks import WebhookClientConfig, WebhookFn

EXAMPLES = Resource(
    group="kopf.dev",
    version="v1",
    plural="kopfexamples",
    kind="KopfExample",
    singular="kopfexample",
)


class Insights:
    """What the orchestrator tells admission, settable by tests."""

    def __init__(self, resources: frozenset[Resource] = frozenset({EXAMPLES})) -> None:
        self.webhook_resources = resources
        self.memos: dict[str, Any] = {}
        self._revised = trio.Event()

    def revise(self, resources: frozenset[Resource]) -> None:
        self.webhook_resources = resources
        self._revised.set()
        self._revised = trio.Event()

    async def wait_webhook_resources_revised(self) -> None:
        await self._revised.wait()

    def recall_memo(self, resource: Resource, body: Mapping[str, Any]) -> Any | None:
        return self.memos.get((body.get("metadata") or {}).get("uid", ""))


class FakeServer:
    """A trio-native webhook server without sockets: it keeps ``fn`` for tests to call and sends
    whatever client configs the test gives it."""

    def __init__(self, config: WebhookClientConfig | None = None) -> None:
        self.fn: WebhookFn | None = None
        self.configs: trio.MemorySendChannel[WebhookClientConfig] | None = None
        self.initial = config if config is not None else {"url": "https://127.0.0.1:9443"}
        self.running = False
        self.stopped = trio.Event()
        self._requests_in, self._requests_out = trio.open_memory_channel[
            tuple[bytes, str | None, list[dict[str, Any]]]
        ](0)
        self._answered = trio.Event()

    async def serve(
        self,
        fn: WebhookFn,
        *,
        configs: trio.MemorySendChannel[WebhookClientConfig],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self.fn = fn
        self.configs = configs
        self.running = True
        try:
            await configs.send(self.initial)
            task_status.started()
            # Reviews are answered in this task, as a real server answers them in its own tasks
            # (which see the operator's context, e.g. its event poster).
            async for request, webhook, reply in self._requests_out:
                try:
                    reply.append(await fn(request, webhook=webhook))
                finally:
                    self._answered.set()
                    self._answered = trio.Event()
        finally:
            self.running = False
            self.stopped.set()

    async def review(self, request: bytes, webhook: str | None = None) -> dict[str, Any]:
        """Send a review to the operator through the server's own task."""
        reply: list[dict[str, Any]] = []
        answered = self._answered
        await self._requests_in.send((request, webhook, reply))
        await answered.wait()
        return reply[0]

    async def send(self, config: WebhookClientConfig) -> None:
        assert self.configs is not None
        await self.configs.send(config)


@pytest.fixture
def insights() -> Insights:
    return Insights()


class Helpers:
    # Test modules cannot import from a conftest (importlib mode): helpers ride on a fixture.
    wait_until = staticmethod(wait_until)
    Insights = Insights
    FakeServer = FakeServer
    EXAMPLES = EXAMPLES


@pytest.fixture
def helpers() -> type[Helpers]:
    return Helpers
