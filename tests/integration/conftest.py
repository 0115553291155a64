"""Fixtures shared by the integration tiers: the fake API, a client of it, the example CRD.

Tiers override what they need differently (e.g. ``runtime`` serves the example CRD in every
``fake_api``; ``runtime_scopes`` makes the fake send frequent bookmarks).
"""

from __future__ import annotations

import copy
import datetime
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, NamedTuple

import pytest
import trio
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.settings import NetworkingSettings
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.execution import Execution
from trioperator._runtime.handling.invocation import make_limiter
from trioperator.testing import FakeAPI
from trioperator.testing.harness import line_of

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "kopfexamples.kopf.dev"},
    "spec": {
        "group": "kopf.dev",
        "scope": "Namespaced",
        "names": {
            "plural": "kopfexamples",
            "singular": "kopfexample",
            "kind": "KopfExample",
            "shortNames": ["kex"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
"""The example CRD (``kopfexamples.kopf.dev/v1``, namespaced, with a status subresource)."""


@pytest.fixture
def crd() -> dict[str, Any]:
    """A fresh copy of the example CRD, to create it in the fake API."""
    return copy.deepcopy(CRD)


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeAPI]:
    """The fake API, empty (without the example CRD: see ``crd_api``)."""
    async with FakeAPI.serve() as api:
        yield api


@pytest.fixture
def crd_api(fake_api: FakeAPI, crd: dict[str, Any]) -> FakeAPI:
    """The fake API with the example CRD."""
    fake_api.create_object("customresourcedefinitions", crd)
    return fake_api


@pytest.fixture
async def api_client(fake_api: FakeAPI) -> AsyncIterator[APIClient]:
    """An API client of the fake API."""
    vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})
    # Short backoffs: a failing request is retried a few times, then given up quickly.
    async with APIClient(vault, NetworkingSettings(error_backoffs=(1, 2))) as client:
        yield client


@pytest.fixture
def settings() -> OperatorSettings:
    return OperatorSettings()


@pytest.fixture
def registry() -> OperatorRegistry:
    return OperatorRegistry()


@pytest.fixture
def execution() -> Execution:
    """An execution of handlers outside of an operator, on a fixed wall clock."""
    basetime = datetime.datetime(2020, 12, 31, tzinfo=datetime.UTC)
    return Execution(
        now=lambda: basetime + datetime.timedelta(seconds=trio.current_time()),
        default_backoff=60,
        limiter=make_limiter(None),
    )


@pytest.fixture
def caplog_trioperator(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="trioperator")
    return caplog


def results(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status without the journal of the operator's writes (``status.kopf.journal``)."""
    return {key: value for key, value in status.items() if key != "kopf"}


async def wait_until(predicate: Callable[[], object], limit: float = 600) -> None:
    """Poll ``predicate`` every 10 ms of mock time (real I/O with the fake API is in flight);
    fail after ``limit`` seconds."""
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 -- polling what the fake API holds
            await trio.sleep(0.01)


class LogLine(NamedTuple):
    time: float | None
    """trio's (mock) time when it was logged; ``None`` if logged from a thread."""
    logger: str
    level: int
    message: str


class Logs(logging.Handler):
    """The log lines of trioperator, each with the trio time it was logged at."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[LogLine] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            now: float | None = trio.current_time()
        except RuntimeError:
            now = None
        # As the log line shows it: an object's message with its "[namespace/name]" first.
        self.lines.append(LogLine(now, record.name, record.levelno, line_of(record)))

    def messages(self, level: int = logging.DEBUG) -> list[str]:
        return [line.message for line in self.lines if line.level >= level]

    def times(self, fragment: str) -> list[float | None]:
        """When the lines containing ``fragment`` were logged."""
        return [line.time for line in self.lines if fragment in line.message]

    def count(self, fragment: str, level: int = logging.DEBUG) -> int:
        return sum(1 for message in self.messages(level) if fragment in message)

    def assert_in_order(self, *fragments: str) -> None:
        """Each fragment is in some line, each after the line of the previous one."""
        messages = self.messages()
        position = 0
        for fragment in fragments:
            for index in range(position, len(messages)):
                if fragment in messages[index]:
                    position = index + 1
                    break
            else:
                raise AssertionError(f"{fragment!r} not found in order in:\n" + "\n".join(messages))


@pytest.fixture
def logs() -> Iterator[Logs]:
    """Every log line of trioperator in this test (at DEBUG and above)."""
    handler = Logs()
    logger = logging.getLogger("trioperator")
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
