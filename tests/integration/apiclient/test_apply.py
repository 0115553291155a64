"""Server-side apply through the client, answered by the fake API's own apply (field managers,
``managedFields``, conflicts) rather than by injected responses: what the fake ends up holding
and the conflict Status it sends, as the client parses it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trioperator as kopf
from tests.integration.apiclient.conftest import configmap
from trioperator.testing import FakeAPI


def managers(obj: dict[str, Any]) -> dict[str, tuple[str, set[str]]]:
    """manager -> (operation, the top-level keys of its ``data`` fields)."""
    return {
        entry["manager"]: (
            entry["operation"],
            {key[2:] for key in entry.get("fieldsV1", {}).get("f:data", {})},
        )
        for entry in obj["metadata"].get("managedFields", [])
    }


async def test_apply_creates_updates_and_drops_what_the_manager_no_longer_applies(
    api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    created = await cms.apply(configmap("applied", a="1", b="2"), field_manager="my-operator")
    assert created["data"] == {"a": "1", "b": "2"}
    assert managers(created) == {"my-operator": ("Apply", {"a", "b"})}

    updated = await cms.apply(configmap("applied", a="changed"), field_manager="my-operator")
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert updated["data"] == {"a": "changed"}  # b was only ours: applied no more, removed
    stored = fake_api.get_object("configmaps", "applied", "default")
    assert stored["data"] == {"a": "changed"}
    assert managers(stored) == {"my-operator": ("Apply", {"a"})}

    [request] = [r for r in fake_api.raw_requests if r.method == "PATCH"][:1]
    assert request.path == "/api/v1/namespaces/default/configmaps/applied"
    assert request.headers["content-type"] == "application/apply-patch+yaml"
    assert request.param("fieldManager") == "my-operator"
    assert request.param("force") == "false"
    assert (
        request.body == b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied",'
        b'"namespace":"default"},"data":{"a":"1","b":"2"}}'
    )


async def test_a_conflict_with_another_manager_is_parsed_and_force_takes_the_field(
    api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    await cms.apply(configmap("shared", a="1", b="2"), field_manager="my-operator")
    # Another manager changes one of our fields with an update (kubectl edit): now theirs.
    await cms.patch("shared", {"data": {"a": "edited"}}, namespace="default",
                    field_manager="kubectl-edit")  # fmt: skip
    # And a third applies the other one by force.
    fake_api.apply_object("configmaps", configmap("shared", b="3"), manager="gitops", force=True)

    with pytest.raises(kopf.APIFieldConflictError) as info:
        await cms.apply(configmap("shared", a="1", b="2"), field_manager="my-operator")
    error = info.value
    assert isinstance(error, kopf.APIConflictError)
    assert error.status == 409
    assert error.reason == "Conflict"
    assert error.managers == {"kubectl-edit", "gitops"}
    assert sorted((c.field, c.manager, c.version) for c in error.conflicts) == [
        (".data.a", "kubectl-edit", "v1"),
        (".data.b", "gitops", ""),
    ]
    assert "Apply failed with 2 conflicts" in error.message
    assert fake_api.get_object("configmaps", "shared", "default")["data"] == {
        "a": "edited",
        "b": "3",
    }

    forced = await cms.apply(
        configmap("shared", a="1", b="2"), field_manager="my-operator", force=True
    )
    assert forced["data"] == {"a": "1", "b": "2"}
    assert managers(forced)["my-operator"] == ("Apply", {"a", "b"})
    assert all(
        not fields for name, (_, fields) in managers(forced).items() if name != "my-operator"
    )


async def test_an_apply_that_changes_nothing_of_others_does_not_conflict(
    api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    await cms.apply(configmap("both", a="1"), field_manager="my-operator")
    fake_api.apply_object("configmaps", configmap("both", a="1", c="3"), manager="kubectl")
    # The same value of a shared field is no conflict: both managers own it now.
    again = await cms.apply(configmap("both", a="1", b="2"), field_manager="my-operator")
    assert again["data"] == {"a": "1", "b": "2", "c": "3"}
    assert managers(again) == {
        "my-operator": ("Apply", {"a", "b"}),
        "kubectl": ("Apply", {"a", "c"}),
    }


async def test_the_sync_client_applies_and_gets_the_conflict_too(fake_api: FakeAPI) -> None:
    credentials = kopf.ConnectionInfo(server=fake_api.url, token="fake")
    fake_api.apply_object("configmaps", configmap("theirs", a="1"), manager="kubectl")

    def script() -> tuple[kopf.APIFieldConflictError, dict[str, Any]]:
        with kopf.connect_sync_api(credentials=credentials) as api:
            cms = api.resource("configmaps")
            with pytest.raises(kopf.APIFieldConflictError) as info:
                cms.apply(configmap("theirs", a="2"), field_manager="my-operator")
            return info.value, cms.apply(
                configmap("theirs", a="2"), field_manager="my-operator", force=True
            )

    error, forced = await trio.to_thread.run_sync(script)
    assert [(c.field, c.manager) for c in error.conflicts] == [(".data.a", "kubectl")]
    assert forced["data"] == {"a": "2"}
    assert fake_api.get_object("configmaps", "theirs", "default")["data"] == {"a": "2"}


async def test_apply_to_the_status_subresource(api: kopf.AsyncAPI, fake_api: FakeAPI) -> None:
    deployments = api.resource("deployments")
    intent: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            },
        },
    }
    await deployments.apply(intent, field_manager="my-operator")
    status = {key: intent[key] for key in ("apiVersion", "kind", "metadata")}
    status["status"] = {"observedGeneration": 1, "replicas": 1}
    applied = await deployments.apply(status, field_manager="my-controller", subresource="status")
    assert applied["status"]["replicas"] == 1
    stored = fake_api.get_object("deployments", "web", "default")
    assert stored["spec"]["replicas"] == 1  # the status apply left the spec alone
    assert stored["status"] == {"observedGeneration": 1, "replicas": 1}
    entry = next(e for e in stored["metadata"]["managedFields"] if e["manager"] == "my-controller")
    assert "f:status" in entry["fieldsV1"]
