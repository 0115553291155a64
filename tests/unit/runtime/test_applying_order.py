"""The order of a cycle's writes: results (status) before the marks of "handled" (body)."""

from __future__ import annotations

import logging
from typing import Any

from trioperator._client.resources import Resource
from trioperator._engine.patches import Patch
from trioperator._runtime.handling.applying import apply_patch

WITH_STATUS = Resource(
    group="kopf.dev", version="v1", plural="kopfexamples", subresources=frozenset({"status"})
)
WITHOUT_STATUS = Resource(group="kopf.dev", version="v1", plural="kopfexamples")
BODY = {"metadata": {"name": "x", "namespace": "ns", "resourceVersion": "1"}, "spec": {"a": 1}}


class RecordingAPI:
    """Answers every patch with a new resourceVersion and records what was sent where."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def patch(
        self, resource: Resource, *, payload: Any, subresource: str | None = None, **_: Any
    ) -> dict[str, Any]:
        self.calls.append((subresource or "", payload))
        return {
            **BODY,
            "metadata": {**BODY["metadata"], "resourceVersion": str(len(self.calls) + 1)},
        }


def handled_patch() -> Patch:
    patch = Patch()
    patch.status["create_fn"] = {"answer": 42}
    patch.metadata.annotations["kopf.zalando.org/last-handled-configuration"] = "{}"
    return patch


async def test_results_are_written_before_the_mark_of_handled() -> None:
    api = RecordingAPI()
    await apply_patch(
        api, resource=WITH_STATUS, body=BODY, patch=handled_patch(), logger=logging.getLogger("t")
    )
    assert [where for where, _ in api.calls] == ["status", ""]
    assert api.calls[0][1] == {"status": {"create_fn": {"answer": 42}}}
    assert api.calls[1][1] == {
        "metadata": {"annotations": {"kopf.zalando.org/last-handled-configuration": "{}"}}
    }


async def test_without_a_status_subresource_everything_is_one_write() -> None:
    api = RecordingAPI()
    await apply_patch(
        api,
        resource=WITHOUT_STATUS,
        body=BODY,
        patch=handled_patch(),
        logger=logging.getLogger("t"),
    )
    assert api.calls == [("", dict(handled_patch()))]


async def test_json_patches_also_go_status_first_each_guarded_by_the_version_it_follows() -> None:
    def edit(body: Any) -> None:
        body.setdefault("status", {})["phase"] = "done"
        body["metadata"]["finalizers"] = []

    api = RecordingAPI()
    await apply_patch(
        api, resource=WITH_STATUS, body=BODY, patch=Patch(fns=[edit]), logger=logging.getLogger("t")
    )
    assert [where for where, _ in api.calls] == ["status", ""]
    status_ops, body_ops = api.calls[0][1], api.calls[1][1]
    assert status_ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "1"}
    assert status_ops[1:] == [{"op": "add", "path": "/status", "value": {"phase": "done"}}]
    # The status write made version 2: the body's part must not fail on our own change.
    assert body_ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "2"}
    assert body_ops[1:] == [{"op": "add", "path": "/metadata/finalizers", "value": []}]


async def test_the_versions_of_earlier_writes_are_told_apart_from_the_last() -> None:
    # The status write's version is a state older than what the cycle wrote: the worker must
    # never take it for the consistent state (see workers.py).
    api = RecordingAPI()
    result = await apply_patch(
        api, resource=WITH_STATUS, body=BODY, patch=handled_patch(), logger=logging.getLogger("t")
    )
    assert result.resource_version == "3"
    assert result.earlier_versions == ["2"]
    single = await apply_patch(
        RecordingAPI(),
        resource=WITHOUT_STATUS,
        body=BODY,
        patch=handled_patch(),
        logger=logging.getLogger("t"),
    )
    assert single.resource_version == "2"
    assert single.earlier_versions == []
