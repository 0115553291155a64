"""The API client for operator code against the fake API (``connect_api`` with fixed
credentials, or the operator's vault)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trioperator as kopf
from trioperator.testing import FakeAPI


@pytest.fixture
async def api(fake_api: FakeAPI) -> AsyncIterator[kopf.AsyncAPI]:
    """An async client of the fake API, logged in with a fixed token."""
    credentials = kopf.ConnectionInfo(server=fake_api.url, token="fake")
    async with kopf.connect_api(credentials=credentials) as client:
        yield client


def configmap(name: str, namespace: str = "default", **data: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": dict(data),
    }
