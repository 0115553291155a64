"""The sync client (for sync handlers in threads, and scripts): the same operations."""

from __future__ import annotations

import pytest
import trio
import trioperator as kopf
from tests.integration.apiclient.conftest import configmap
from trioperator.testing import FakeAPI


async def test_the_sync_client_does_it_all_in_a_thread(fake_api: FakeAPI) -> None:
    fake_api.create_namespace("sync")
    credentials = kopf.ConnectionInfo(server=fake_api.url, token="fake")

    def script() -> list[tuple[str, str]]:
        with kopf.connect_sync_api(credentials=credentials) as api:
            cms = api.resource("cm")
            for index in range(5):
                cms.create(configmap(f"c{index}", "sync", key=str(index)))
            listed = cms.list(namespace="sync", limit=2)
            assert sorted(o["metadata"]["name"] for o in listed) == [f"c{i}" for i in range(5)]
            assert listed.resource_version is not None
            assert len(list(cms.iterate(namespace="sync", limit=2))) == 5
            cms.patch("c0", {"data": {"key": "merged"}}, namespace="sync")
            cms.patch("c1", [{"op": "replace", "path": "/data/key", "value": "j"}],
                      type="json", namespace="sync")  # fmt: skip
            cms.delete("c4", namespace="sync")
            with pytest.raises(kopf.APINotFoundError):
                cms.get("c4", namespace="sync")
            with pytest.raises(kopf.APIConflictError):
                cms.create(configmap("c0", "sync"))
            events: list[tuple[str, str]] = []
            with cms.watch(namespace="sync") as stream:  # the current state first, as ADDED
                for kind, obj in stream:
                    events.append((kind, obj["metadata"]["name"]))
                    if len(events) == 4:
                        break  # leaving the block closes the stream
            return events

    events = await trio.to_thread.run_sync(script)
    assert sorted(events) == [("ADDED", f"c{i}") for i in range(4)]
    assert fake_api.get_object("configmaps", "c0", "sync")["data"] == {"key": "merged"}
    assert fake_api.get_object("configmaps", "c1", "sync")["data"] == {"key": "j"}
    assert not fake_api.has_object("configmaps", "c4", "sync")
