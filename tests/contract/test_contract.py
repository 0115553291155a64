"""The same scenarios against the FakeAPI and a real kube-apiserver 1.20, so the fake cannot drift.

Where the real server's answer is deterministic, the whole body is compared (minus uids,
timestamps, resourceVersions and managedFields). Scenarios that only one back end can play are
not here: see ``tests/integration/testing`` for the fake's fault injection.
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

import pytest
import trio
import trio.testing

from .conftest import CRD_BODY, GROUP, JSON_PATCH, MERGE, Backend

VOLATILE = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "managedFields")


def scrub(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without the metadata that differs between runs and back ends."""
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in VOLATILE}
    return {**obj, "metadata": meta}


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def status(code: int, reason: str | None, message: str, details: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason is not None:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def ours(items: list[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
    """The listed objects that a test created itself, in the order listed."""
    return [item for item in items if item["metadata"]["name"] in names]


def without_causes(body: dict[str, Any]) -> dict[str, Any]:
    """The real server repeats some validation causes; compare them as a set, separately."""
    details = {k: v for k, v in body.get("details", {}).items() if k != "causes"}
    return {**body, "details": details}


def causes(body: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(c["reason"], c["field"], c["message"]) for c in body["details"].get("causes", [])}


# ------------------------------------------------------------------------------ plain objects


async def test_create_get_list_delete(backend: Backend) -> None:
    ns = backend.namespace
    response = await backend.request(
        "POST",
        backend.cm_path(),
        {"metadata": {"name": "cm1", "labels": {"a": "b"}}, "data": {"x": "1"}},
    )
    assert response.status_code == 201
    created = response.json()
    meta = created["metadata"]
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", meta["uid"]
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert meta["resourceVersion"].isdigit()
    assert scrub(created) == {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": "cm1", "namespace": ns, "labels": {"a": "b"}},
        "data": {"x": "1"},
    }

    fetched = await backend.ok("GET", backend.cm_path("cm1"))
    assert scrub(fetched) == scrub(created)
    assert fetched["metadata"]["uid"] == meta["uid"]
    assert fetched["metadata"]["resourceVersion"] == meta["resourceVersion"]

    listing = await backend.ok("GET", backend.cm_path())
    assert (listing["kind"], listing["apiVersion"]) == ("ConfigMapList", "v1")
    assert set(listing["metadata"]) == {"resourceVersion"}
    assert rv(listing) >= rv(created)
    # Typed lists carry no kind/apiVersion in their items. A real cluster's controllers put
    # objects of their own into every namespace (e.g. `kube-root-ca.crt`): only ours count.
    assert [scrub(item) for item in ours(listing["items"], {"cm1"})] == [
        {"metadata": {"name": "cm1", "namespace": ns, "labels": {"a": "b"}}, "data": {"x": "1"}}
    ]

    response = await backend.request("DELETE", backend.cm_path("cm1"))
    assert response.status_code == 200
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "cm1", "kind": "configmaps", "uid": meta["uid"]},
    }
    assert (await backend.request("GET", backend.cm_path("cm1"))).status_code == 404


async def test_custom_object_crud(backend: Backend) -> None:
    ns = backend.namespace
    body = backend.widget("w1", spec={"size": 1}, status={"ignored": True})
    response = await backend.request("POST", backend.widget_path(), body)
    assert response.status_code == 201
    created = response.json()
    # The status subresource owns .status: it is dropped on creation.
    assert scrub(created) == {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": ns, "generation": 1},
        "spec": {"size": 1},
    }

    listing = await backend.ok("GET", backend.widget_path())
    assert (listing["kind"], listing["apiVersion"]) == ("WidgetList", f"{GROUP}/v1")
    assert listing["metadata"] == {
        "continue": "",
        "resourceVersion": listing["metadata"]["resourceVersion"],
    }
    assert [scrub(item) for item in listing["items"]] == [scrub(created)]

    cluster_wide = await backend.ok("GET", f"/apis/{GROUP}/v1/widgets")
    assert scrub(created) in [scrub(item) for item in cluster_wide["items"]]

    response = await backend.request("DELETE", backend.widget_path("w1"))
    assert response.status_code == 200
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": "w1",
            "group": GROUP,
            "kind": "widgets",
            "uid": created["metadata"]["uid"],
        },
    }


async def test_generate_name(backend: Backend) -> None:
    created = await backend.ok("POST", backend.cm_path(), {"metadata": {"generateName": "gen-"}})
    name = created["metadata"]["name"]
    assert created["metadata"]["generateName"] == "gen-"
    assert re.fullmatch(r"gen-[bcdfghjklmnpqrstvwxz2456789]{5}", name)
    assert (await backend.ok("GET", backend.cm_path(name)))["metadata"]["uid"] == created[
        "metadata"
    ]["uid"]


async def test_resource_versions_increase_and_noop_writes_keep_them(backend: Backend) -> None:
    created = await backend.ok(
        "POST", backend.cm_path(), {"metadata": {"name": "rv"}, "data": {"a": "1"}}
    )
    first = await backend.patch(backend.cm_path("rv"), {"data": {"a": "2"}})
    second = await backend.patch(backend.cm_path("rv"), {"data": {"b": "3"}})
    assert rv(created) < rv(first) < rv(second)
    # A write that changes nothing stores nothing: same resourceVersion.
    same = await backend.patch(backend.cm_path("rv"), {"data": {"a": "2"}})
    assert rv(same) == rv(second)
    listing = await backend.ok("GET", backend.cm_path())
    assert rv(listing) >= rv(second)


async def test_already_exists(backend: Backend) -> None:
    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "dup"}})
    response = await backend.request("POST", backend.cm_path(), {"metadata": {"name": "dup"}})
    assert response.status_code == 409
    assert response.json() == status(
        409,
        "AlreadyExists",
        'configmaps "dup" already exists',
        {"name": "dup", "kind": "configmaps"},
    )

    await backend.ok("POST", backend.widget_path(), backend.widget("dup"))
    response = await backend.request("POST", backend.widget_path(), backend.widget("dup"))
    assert response.status_code == 409
    assert response.json() == status(
        409,
        "AlreadyExists",
        f'widgets.{GROUP} "dup" already exists',
        {"name": "dup", "group": GROUP, "kind": "widgets"},
    )


async def test_not_found_shapes(backend: Backend) -> None:
    response = await backend.request("GET", backend.cm_path("nope"))
    assert response.status_code == 404
    assert response.json() == status(
        404, "NotFound", 'configmaps "nope" not found', {"name": "nope", "kind": "configmaps"}
    )

    response = await backend.request("GET", backend.widget_path("nope"))
    assert response.json() == status(
        404,
        "NotFound",
        f'widgets.{GROUP} "nope" not found',
        {"name": "nope", "group": GROUP, "kind": "widgets"},
    )

    missing_ns = f"missing-{uuid.uuid4().hex[:8]}"
    response = await backend.request(
        "POST", f"/api/v1/namespaces/{missing_ns}/configmaps", {"metadata": {"name": "x"}}
    )
    assert response.status_code == 404
    assert response.json() == status(
        404,
        "NotFound",
        f'namespaces "{missing_ns}" not found',
        {"name": missing_ns, "kind": "namespaces"},
    )
    # Listing in a namespace that does not exist is just empty.
    listing = await backend.ok("GET", f"/api/v1/namespaces/{missing_ns}/configmaps")
    assert listing["items"] == []

    for path in (
        backend.cm_path("x") + "/status",
        f"/api/v1/namespaces/{backend.namespace}/nothings",
    ):
        response = await backend.request("GET", path)
        assert response.status_code == 404
        assert response.json() == status(
            404, "NotFound", "the server could not find the requested resource", {}
        )

    response = await backend.request("GET", "/apis/no.such.group/v1/things")
    assert response.status_code == 404
    assert response.text == "404 page not found\n"

    response = await backend.request(
        "PATCH", backend.cm_path("nope"), {"data": {}}, content_type=MERGE
    )
    assert response.status_code == 404


# ------------------------------------------------------------------------------ patches


async def test_merge_patch_with_null_deletes(backend: Backend) -> None:
    await backend.ok(
        "POST",
        backend.widget_path(),
        backend.widget(
            "m",
            metadata={"labels": {"keep": "1", "drop": "1"}},
            spec={"a": {"b": 1, "c": 2}, "d": [1, 2]},
        ),
    )
    patched = await backend.patch(
        backend.widget_path("m"),
        {
            "metadata": {"labels": {"drop": None, "new": "2"}},
            "spec": {"a": {"b": None, "e": 3}, "d": [3]},
        },
    )
    assert patched["metadata"]["labels"] == {"keep": "1", "new": "2"}
    assert patched["spec"] == {"a": {"c": 2, "e": 3}, "d": [3]}
    assert patched["metadata"]["generation"] == 2


async def test_json_patch(backend: Backend) -> None:
    await backend.ok(
        "POST",
        backend.cm_path(),
        {"metadata": {"name": "jp", "labels": {"i": "1", "pg": "yes"}}, "data": {"x": "1"}},
    )
    patched = await backend.patch(
        backend.cm_path("jp"),
        [
            {"op": "add", "path": "/data", "value": {"a": "1"}},
            {"op": "copy", "from": "/data/a", "path": "/data/b"},
            {"op": "move", "from": "/data/a", "path": "/data/c"},
            {"op": "add", "path": "/metadata/labels/new", "value": "v"},
            {"op": "remove", "path": "/metadata/labels/i"},
            {"op": "replace", "path": "/data/b", "value": "2"},
            {"op": "test", "path": "/data/c", "value": "1"},
        ],
        content_type=JSON_PATCH,
    )
    assert patched["metadata"]["labels"] == {"new": "v", "pg": "yes"}
    assert patched["data"] == {"b": "2", "c": "1"}

    rejected = status(
        422, "Invalid", "the server rejected our request due to an error in our request", {}
    )
    for operations in (
        [{"op": "test", "path": "/data/c", "value": "9"}],
        [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"}],
        [{"op": "remove", "path": "/data/zzz"}],
        [{"op": "bogus", "path": "/data"}],
    ):
        response = await backend.request(
            "PATCH", backend.cm_path("jp"), operations, content_type=JSON_PATCH
        )
        assert response.status_code == 422, operations
        assert response.json() == rejected

    response = await backend.request(
        "PATCH", backend.cm_path("jp"), {"op": "add"}, content_type=JSON_PATCH
    )
    assert response.status_code == 400
    assert response.json() == status(
        400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
    )


async def test_unsupported_patch_types(backend: Backend) -> None:
    await backend.ok("POST", backend.widget_path(), backend.widget("s", spec={"a": 1}))
    # Custom resources have no strategic merge.
    for content_type in ("application/strategic-merge-patch+json", "text/plain"):
        response = await backend.request(
            "PATCH", backend.widget_path("s"), {"spec": {"a": 2}}, content_type=content_type
        )
        assert response.status_code == 415
        assert response.json() == status(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include:"
            " application/json-patch+json, application/merge-patch+json,"
            " application/apply-patch+yaml",
        )

    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "s"}, "data": {"a": "1"}})
    response = await backend.request(
        "PATCH", backend.cm_path("s"), {"data": {}}, content_type="application/json"
    )
    assert response.status_code == 415
    assert response.json() == status(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})

    # Built-in kinds accept strategic merge patches.
    patched = await backend.patch(
        backend.cm_path("s"),
        {"data": {"b": "2"}},
        content_type="application/strategic-merge-patch+json",
    )
    assert patched["data"] == {"a": "1", "b": "2"}


async def test_resource_version_conflicts(backend: Backend) -> None:
    created = await backend.ok("POST", backend.widget_path(), backend.widget("c", spec={"a": 1}))
    await backend.patch(backend.widget_path("c"), {"spec": {"a": 2}})
    conflict = status(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on widgets.{GROUP} "c": the object has been modified;'
        " please apply your changes to the latest version and try again",
        {"name": "c", "group": GROUP, "kind": "widgets"},
    )
    stale = created["metadata"]["resourceVersion"]
    response = await backend.request(
        "PATCH",
        backend.widget_path("c"),
        {"metadata": {"resourceVersion": stale}, "spec": {"a": 3}},
        content_type=MERGE,
    )
    assert response.status_code == 409
    assert response.json() == conflict

    response = await backend.request("PUT", backend.widget_path("c"), {**created, "spec": {"a": 4}})
    assert response.status_code == 409
    assert response.json() == conflict

    unconditional = backend.widget("c", spec={"a": 5})
    response = await backend.request("PUT", backend.widget_path("c"), unconditional)
    assert response.status_code == 422
    assert response.json() == status(
        422,
        "Invalid",
        f'widgets.{GROUP} "c" is invalid: metadata.resourceVersion:'
        " Invalid value: 0x0: must be specified for an update",
        {
            "name": "c",
            "group": GROUP,
            "kind": "widgets",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 0x0: must be specified for an update",
                    "field": "metadata.resourceVersion",
                }
            ],
        },
    )

    current = await backend.ok("GET", backend.widget_path("c"))
    replaced = await backend.ok("PUT", backend.widget_path("c"), {**current, "spec": {"a": 6}})
    assert replaced["spec"] == {"a": 6}
    assert replaced["metadata"]["generation"] == current["metadata"]["generation"] + 1

    # Built-in kinds allow unconditional updates.
    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "c"}})
    replaced = await backend.ok(
        "PUT", backend.cm_path("c"), {"metadata": {"name": "c"}, "data": {"z": "1"}}
    )
    assert replaced["data"] == {"z": "1"}


async def test_status_subresource_separation(backend: Backend) -> None:
    await backend.ok("POST", backend.widget_path(), backend.widget("st", spec={"a": 1}))

    # The main endpoint ignores .status; spec changes bump the generation.
    patched = await backend.patch(backend.widget_path("st"), {"spec": {"a": 2}, "status": {"s": 1}})
    assert "status" not in patched
    assert patched["spec"] == {"a": 2}
    assert patched["metadata"]["generation"] == 2

    # Label changes do not bump the generation.
    patched = await backend.patch(backend.widget_path("st"), {"metadata": {"labels": {"l": "1"}}})
    assert patched["metadata"]["generation"] == 2

    # The status endpoint changes .status only: spec and metadata are ignored.
    patched = await backend.patch(
        backend.widget_path("st", "status"),
        {"spec": {"a": 99}, "metadata": {"labels": {"other": "x"}}, "status": {"s": 2}},
    )
    assert patched["status"] == {"s": 2}
    assert patched["spec"] == {"a": 2}
    assert patched["metadata"]["labels"] == {"l": "1"}
    assert patched["metadata"]["generation"] == 2

    fetched = await backend.ok("GET", backend.widget_path("st", "status"))
    assert fetched["status"] == {"s": 2}

    replaced = await backend.ok(
        "PUT",
        backend.widget_path("st", "status"),
        {**fetched, "status": {"s": 3}, "spec": {"a": 0}},
    )
    assert (replaced["status"], replaced["spec"]) == ({"s": 3}, {"a": 2})


async def test_finalizers_and_deletion(backend: Backend) -> None:
    path = backend.widget_path("f")
    created = await backend.ok(
        "POST",
        backend.widget_path(),
        backend.widget("f", metadata={"finalizers": ["a.dev/x"]}, spec={"a": 1}),
    )

    response = await backend.request("DELETE", path)
    assert response.status_code == 200
    marked = response.json()
    assert marked["kind"] == "Widget"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", marked["metadata"]["deletionTimestamp"])
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 0
    assert marked["metadata"]["finalizers"] == ["a.dev/x"]
    assert marked["metadata"]["generation"] == created["metadata"]["generation"] + 1
    assert rv(marked) > rv(created)
    assert (await backend.ok("GET", path))["metadata"]["deletionTimestamp"] == marked["metadata"][
        "deletionTimestamp"
    ]

    # No new finalizers on an object being deleted.
    response = await backend.request(
        "PATCH", path, {"metadata": {"finalizers": ["a.dev/x", "b.dev/y"]}}, content_type=MERGE
    )
    assert response.status_code == 422
    message = (
        "Forbidden: no new finalizers can be added if the object is being deleted,"
        ' found new finalizers []string{"b.dev/y"}'
    )
    assert without_causes(response.json()) == status(
        422,
        "Invalid",
        f'Widget.{GROUP} "f" is invalid: metadata.finalizers: {message}',
        {"name": "f", "group": GROUP, "kind": "Widget"},
    )
    assert causes(response.json()) == {("FieldValueForbidden", "metadata.finalizers", message)}

    # Other changes are still allowed, and the deletion mark cannot be undone.
    updated = await backend.patch(path, {"spec": {"a": 2}, "metadata": {"deletionTimestamp": None}})
    assert updated["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]

    # Removing the last finalizer deletes the object; the response is the object as it was
    # last stored, minus the finalizers.
    final = await backend.patch(path, {"metadata": {"finalizers": None}})
    assert "finalizers" not in final["metadata"]
    assert rv(final) == rv(updated)
    assert (await backend.request("GET", path)).status_code == 404


async def test_delete_of_object_being_deleted_is_idempotent(backend: Backend) -> None:
    await backend.ok(
        "POST", backend.cm_path(), {"metadata": {"name": "d", "finalizers": ["a.dev/x"]}}
    )
    first = await backend.ok("DELETE", backend.cm_path("d"))
    second = await backend.ok("DELETE", backend.cm_path("d"))
    assert second["metadata"]["deletionTimestamp"] == first["metadata"]["deletionTimestamp"]
    assert "generation" not in first["metadata"]  # configmaps have no generation
    await backend.patch(backend.cm_path("d"), {"metadata": {"finalizers": []}})
    assert (await backend.request("GET", backend.cm_path("d"))).status_code == 404


async def test_namespace_deletion_blocks_new_content(backend: Backend) -> None:
    ns = f"contract-del-{uuid.uuid4().hex[:8]}"
    await backend.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    await backend.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        {"metadata": {"name": "held", "finalizers": ["a.dev/x"]}},
    )
    deleted = await backend.ok("DELETE", f"/api/v1/namespaces/{ns}")
    assert deleted["kind"] == "Namespace"
    assert deleted["metadata"]["deletionTimestamp"]
    assert deleted["spec"] == {"finalizers": ["kubernetes"]}
    assert deleted["status"] == {"phase": "Terminating"}

    response = await backend.request(
        "POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "new"}}
    )
    assert response.status_code == 403
    assert response.json() == status(
        403,
        "Forbidden",
        f'configmaps "new" is forbidden: unable to create new content in namespace {ns}'
        " because it is being terminated",
        {
            "name": "new",
            "kind": "configmaps",
            "causes": [
                {
                    "reason": "NamespaceTerminating",
                    "message": f"namespace {ns} is being terminated",
                    "field": "metadata.namespace",
                }
            ],
        },
    )
    # Let the (fake's) namespace controller finish; the real one has no controller-manager.
    await backend.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/held",
        {"metadata": {"finalizers": None}},
        content_type=MERGE,
    )


# ------------------------------------------------------------------------------ validation


async def test_validation_errors(backend: Backend) -> None:
    response = await backend.request("POST", backend.cm_path(), {"metadata": {}})
    assert response.status_code == 422
    assert response.json() == status(
        422,
        "Invalid",
        'ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required',
        {
            "kind": "ConfigMap",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: name or generateName is required",
                    "field": "metadata.name",
                }
            ],
        },
    )

    response = await backend.request("POST", backend.cm_path(), {"metadata": {"name": "Bad_Name"}})
    assert response.status_code == 422
    assert response.json()["message"].startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name":'
        " a lowercase RFC 1123 subdomain"
    )

    response = await backend.request(
        "POST", backend.cm_path(), {"metadata": {"name": "x", "namespace": "other"}}
    )
    assert response.json() == status(
        400,
        "BadRequest",
        "the namespace of the provided object does not match the namespace sent on the request",
    )

    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "x"}})
    response = await backend.request("PUT", backend.cm_path("x"), {"metadata": {"name": "y"}})
    assert response.json() == status(
        400, "BadRequest", "the name of the object (y) does not match the name on the URL (x)"
    )

    response = await backend.request(
        "POST", backend.widget_path(), {"metadata": {"name": "w"}, "spec": {}}
    )
    assert response.status_code == 400
    assert "Object 'Kind' is missing" in response.json()["message"]

    response = await backend.request(
        "POST", backend.widget_path(), {**backend.widget("w"), "kind": "Other"}
    )
    assert response.status_code == 422
    assert without_causes(response.json()) == status(
        422,
        "Invalid",
        f'Other.{GROUP} "w" is invalid: kind: Invalid value: "Other": must be Widget',
        {"name": "w", "group": GROUP, "kind": "Other"},
    )

    response = await backend.request(
        "POST", backend.widget_path(), {**backend.widget("w"), "apiVersion": "other.dev/v1"}
    )
    assert response.json() == status(
        400,
        "BadRequest",
        "the API version in the data (other.dev/v1) does not match the expected API version"
        f" ({GROUP}/v1)",
    )


# ------------------------------------------------------------------------------ lists


LABELLED = ["pg0", "pg1", "pg2", "pg3", "pg4", "plain"]


async def _labelled_configmaps(backend: Backend) -> None:
    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "plain"}})
    for i in range(5):
        await backend.ok(
            "POST",
            backend.cm_path(),
            {"metadata": {"name": f"pg{i}", "labels": {"pg": "yes", "i": str(i)}}},
        )


async def test_label_selectors_in_lists(backend: Backend) -> None:
    await _labelled_configmaps(backend)

    async def names(selector: str) -> list[str]:
        # What the server selected among the test's own objects (a real cluster adds others).
        listing = await backend.ok("GET", backend.cm_path(), params={"labelSelector": selector})
        return [item["metadata"]["name"] for item in ours(listing["items"], set(LABELLED))]

    assert await names("pg=yes") == ["pg0", "pg1", "pg2", "pg3", "pg4"]
    assert await names("pg==yes,i=2") == ["pg2"]
    assert await names("i in (1,3)") == ["pg1", "pg3"]
    assert await names("i notin (1, 3),pg") == ["pg0", "pg2", "pg4"]
    assert await names("!i") == ["plain"]
    assert await names("i!=2") == ["pg0", "pg1", "pg3", "pg4", "plain"]
    assert await names("i") == ["pg0", "pg1", "pg2", "pg3", "pg4"]
    assert await names("") == ["pg0", "pg1", "pg2", "pg3", "pg4", "plain"]

    response = await backend.request("GET", backend.cm_path(), params={"labelSelector": "app=(x"})
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"
    assert response.json()["message"].startswith("unable to parse requirement")


async def test_field_selectors(backend: Backend) -> None:
    await _labelled_configmaps(backend)

    async def names(params: dict[str, str]) -> list[str]:
        listing = await backend.ok("GET", backend.cm_path(), params=params)
        return [item["metadata"]["name"] for item in listing["items"]]

    assert await names({"fieldSelector": "metadata.name=pg1"}) == ["pg1"]
    assert await names(
        {
            "fieldSelector": f"metadata.name!=pg1,metadata.namespace={backend.namespace}",
            "labelSelector": "pg",
        }
    ) == ["pg0", "pg2", "pg3", "pg4"]
    everywhere = await backend.ok(
        "GET", "/api/v1/configmaps", params={"fieldSelector": "metadata.name=pg3"}
    )
    # Other (older) test namespaces may hold a pg3 too: only the name is certain.
    assert {i["metadata"]["name"] for i in everywhere["items"]} == {"pg3"}
    assert (backend.namespace, "pg3") in [
        (i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]
    ]

    response = await backend.request(
        "GET", backend.cm_path(), params={"fieldSelector": "spec.foo=bar"}
    )
    assert response.json() == status(
        400,
        "BadRequest",
        '"spec.foo" is not a known field selector: only "metadata.name", "metadata.namespace"',
    )
    response = await backend.request(
        "GET", backend.widget_path(), params={"fieldSelector": "spec.x=1"}
    )
    assert response.json() == status(400, "BadRequest", "field label not supported: spec.x")


async def test_pagination(backend: Backend) -> None:
    await _labelled_configmaps(backend)
    # A real cluster's controllers may have put objects of their own into the namespace (e.g.
    # `kube-root-ca.crt`): the pages are checked against the whole list, whatever it holds.
    everything = [
        i["metadata"]["name"] for i in (await backend.ok("GET", backend.cm_path()))["items"]
    ]
    assert [name for name in everything if name in LABELLED] == LABELLED
    pages: list[dict[str, Any]] = []
    params = {"limit": "2"}
    while True:
        page = await backend.ok("GET", backend.cm_path(), params=params)
        pages.append(page)
        token = page["metadata"].get("continue")
        if not token:
            break
        params = {"limit": "2", "continue": token}
    assert [[i["metadata"]["name"] for i in p["items"]] for p in pages] == [
        everything[start : start + 2] for start in range(0, len(everything), 2)
    ]
    assert [p["metadata"].get("remainingItemCount") for p in pages] == [
        *(len(everything) - 2 * (n + 1) for n in range(len(pages) - 1)),
        None,
    ]
    assert len({p["metadata"]["resourceVersion"] for p in pages}) == 1  # one consistent snapshot

    # With a selector the remaining count is unknown.
    page = await backend.ok("GET", backend.cm_path(), params={"limit": "2", "labelSelector": "pg"})
    assert page["metadata"]["continue"]
    assert "remainingItemCount" not in page["metadata"]

    # resourceVersion=0 is served from the watch cache, which ignores the limit.
    page = await backend.ok("GET", backend.cm_path(), params={"limit": "2", "resourceVersion": "0"})
    assert len(page["items"]) == len(everything)
    assert "continue" not in page["metadata"]

    response = await backend.request(
        "GET", backend.cm_path(), params={"limit": "2", "continue": "garbage"}
    )
    assert response.status_code == 400
    assert response.json()["message"].startswith("invalid continue token")


# ------------------------------------------------------------------------------ watches


async def test_watch_from_resource_version_replays_changes(backend: Backend) -> None:
    start = (await backend.ok("GET", backend.widget_path()))["metadata"]["resourceVersion"]
    path = backend.widget_path("w")
    await backend.ok(
        "POST",
        backend.widget_path(),
        backend.widget("w", metadata={"finalizers": ["a.dev/x"]}, spec={"a": 1}),
    )
    await backend.patch(path, {"spec": {"a": 2}})
    await backend.ok("DELETE", path)
    await backend.patch(path, {"metadata": {"finalizers": None}})

    events = await backend.watch(backend.widget_path(), {"resourceVersion": start}, count=4)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    assert all(
        (e["object"]["kind"], e["object"]["apiVersion"]) == ("Widget", f"{GROUP}/v1")
        for e in events
    )
    versions = [rv(e["object"]) for e in events]
    assert versions == sorted(versions)
    assert len(set(versions)) == 4
    assert [e["object"]["spec"]["a"] for e in events] == [1, 2, 2, 2]
    assert "deletionTimestamp" not in events[1]["object"]["metadata"]
    assert events[2]["object"]["metadata"]["deletionTimestamp"]
    # DELETED carries the last stored state (finalizers included) with the deletion's version.
    assert events[3]["object"]["metadata"]["finalizers"] == ["a.dev/x"]
    assert events[3]["object"]["metadata"]["generation"] == 3  # deletion counts as a change


async def test_watch_sees_live_changes(
    backend: Backend, clock: trio.testing.MockClock | None
) -> None:
    start = (await backend.ok("GET", backend.cm_path()))["metadata"]["resourceVersion"]

    async def writes() -> None:
        await backend.ok(
            "POST", backend.cm_path(), {"metadata": {"name": "live"}, "data": {"a": "1"}}
        )
        await backend.patch(backend.cm_path("live"), {"data": {"a": "2"}})
        await backend.ok("DELETE", backend.cm_path("live"))

    events = await backend.watch(
        backend.cm_path(), {"resourceVersion": start}, count=3, during=writes
    )
    assert [(e["type"], e["object"]["data"]["a"]) for e in events] == [
        ("ADDED", "1"),
        ("MODIFIED", "2"),
        ("DELETED", "2"),
    ]
    assert all(
        (e["object"]["kind"], e["object"]["apiVersion"]) == ("ConfigMap", "v1") for e in events
    )


@pytest.mark.parametrize("start", ["", "0"])
async def test_watch_without_resource_version_lists_first(
    backend: Backend, clock: trio.testing.MockClock | None, start: str
) -> None:
    # Labelled and watched by the label: a real cluster's own objects in the namespace (e.g.
    # `kube-root-ca.crt`) stay out of the initial listing.
    labels = {"listed-first": "yes"}
    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "b", "labels": labels}})
    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "a", "labels": labels}})

    async def change() -> None:
        await backend.patch(backend.cm_path("b"), {"data": {"x": "1"}})

    events = await backend.watch(
        backend.cm_path(),
        {"resourceVersion": start, "labelSelector": "listed-first=yes"},
        count=3,
        during=change,
    )
    assert sorted((e["type"], e["object"]["metadata"]["name"]) for e in events[:2]) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]
    assert (events[2]["type"], events[2]["object"]["metadata"]["name"]) == ("MODIFIED", "b")


async def test_watch_with_too_old_resource_version(
    backend: Backend, clock: trio.testing.MockClock | None
) -> None:
    # The custom resource's watch cache starts when its CRD is established, so "1" is too old.
    started = trio.current_time()
    events = await backend.watch(backend.widget_path(), {"resourceVersion": "1"}, seconds=10)
    assert trio.current_time() - started < 5  # the stream ends by itself, at once
    [event] = events
    assert event["type"] == "ERROR"
    message = event["object"].pop("message")
    assert re.fullmatch(r"too old resource version: 1 \(\d+\)", message)
    assert event["object"] == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
    }


async def test_watch_with_invalid_resource_version(backend: Backend) -> None:
    response = await backend.request(
        "GET", backend.cm_path(), params={"watch": "true", "resourceVersion": "abc"}
    )
    assert response.status_code == 500
    assert response.json() == status(
        500,
        None,
        'resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax',
    )


@pytest.mark.parametrize("resource", ["widgets", "configmaps"])
async def test_watch_bookmarks_before_timeout(
    backend: Backend, clock: trio.testing.MockClock | None, resource: str
) -> None:
    collection = backend.widget_path() if resource == "widgets" else backend.cm_path()
    start = (await backend.ok("GET", collection))["metadata"]["resourceVersion"]

    async def unseen_write() -> None:
        # 1.20 sends a bookmark only once the resource's watch cache has moved past the
        # watch's resourceVersion: write an object of the type that the watch filters out.
        body = backend.widget("bm") if resource == "widgets" else {"metadata": {"name": "bm"}}
        await backend.ok("POST", collection, body)

    began = trio.current_time()
    events = await backend.watch(
        collection,
        {
            "resourceVersion": start,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "3",
            "labelSelector": "selects=nothing",
        },
        seconds=10,
        during=unseen_write,
    )
    elapsed = trio.current_time() - began
    assert 2 <= elapsed < 6  # the server ended the stream at its timeout
    bookmarks = [e["object"] for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, events
    assert all(e["type"] == "BOOKMARK" for e in events)
    for bookmark in bookmarks:
        assert int(bookmark["metadata"].pop("resourceVersion")) > int(start)
        if resource == "widgets":
            assert bookmark == {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {}}
        else:
            assert bookmark == {
                "kind": "ConfigMap",
                "apiVersion": "v1",
                "metadata": {"creationTimestamp": None},
            }


async def test_watch_without_bookmarks_or_timeout_flags(
    backend: Backend, clock: trio.testing.MockClock | None
) -> None:
    start = (await backend.ok("GET", backend.cm_path()))["metadata"]["resourceVersion"]
    events = await backend.watch(
        backend.cm_path(), {"resourceVersion": start, "timeoutSeconds": "3"}, seconds=10
    )
    assert events == []


async def test_watch_label_selector_transitions(
    backend: Backend, clock: trio.testing.MockClock | None
) -> None:
    start = (await backend.ok("GET", backend.cm_path()))["metadata"]["resourceVersion"]
    path = backend.cm_path("l")
    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "l", "labels": {"app": "y"}}})
    entered = await backend.patch(path, {"metadata": {"labels": {"app": "x"}}})
    changed = await backend.patch(path, {"data": {"a": "b"}})
    left = await backend.patch(path, {"metadata": {"labels": {"app": "z"}}})
    await backend.ok("DELETE", path)

    events = await backend.watch(
        backend.cm_path(), {"resourceVersion": start, "labelSelector": "app=x"}, count=3
    )
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert [rv(e["object"]) for e in events] == [rv(entered), rv(changed), rv(left)]
    # Leaving the selection looks like a deletion of the last matching state.
    assert events[2]["object"]["metadata"]["labels"] == {"app": "x"}
    assert events[2]["object"]["data"] == {"a": "b"}


async def test_watch_of_one_object(backend: Backend, clock: trio.testing.MockClock | None) -> None:
    start = (await backend.ok("GET", backend.cm_path()))["metadata"]["resourceVersion"]
    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "other"}})
    await backend.ok("POST", backend.cm_path(), {"metadata": {"name": "one"}})
    await backend.patch(backend.cm_path("other"), {"data": {"a": "1"}})
    await backend.patch(backend.cm_path("one"), {"data": {"a": "1"}})
    events = await backend.watch(
        backend.cm_path(),
        {"resourceVersion": start, "fieldSelector": "metadata.name=one", "timeoutSeconds": "1"},
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "one"),
        ("MODIFIED", "one"),
    ]


# ------------------------------------------------------------------------------ discovery


async def test_discovery_of_the_test_crd(backend: Backend) -> None:
    groups = (await backend.ok("GET", "/apis"))["groups"]
    entry = {"groupVersion": f"{GROUP}/v1", "version": "v1"}
    assert {"name": GROUP, "versions": [entry], "preferredVersion": entry} in groups
    assert await backend.ok("GET", f"/apis/{GROUP}") == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [entry],
        "preferredVersion": entry,
    }
    resources = await backend.ok("GET", f"/apis/{GROUP}/v1")
    for resource in resources["resources"]:
        resource.pop("storageVersionHash", None)
    assert resources == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/v1",
        "resources": [
            {
                "name": "widgets",
                "singularName": "widget",
                "namespaced": True,
                "kind": "Widget",
                "verbs": [
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "create",
                    "update",
                    "watch",
                ],
                "shortNames": ["cwd"],
                "categories": ["contract"],
            },
            {
                "name": "widgets/status",
                "singularName": "",
                "namespaced": True,
                "kind": "Widget",
                "verbs": ["get", "patch", "update"],
            },
        ],
    }
    core = await backend.ok("GET", "/api/v1")
    assert (core["kind"], core["groupVersion"]) == ("APIResourceList", "v1")
    assert "apiVersion" not in core
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["configmaps"]["shortNames"] == ["cm"]
    assert by_name["namespaces"]["namespaced"] is False
    assert by_name["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert (await backend.ok("GET", "/api"))["versions"] == ["v1"]
    version = await backend.ok("GET", "/version")
    assert (version["major"], version["minor"]) == ("1", "20")


async def test_crd_lifecycle(backend: Backend, clock: trio.testing.MockClock | None) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.{GROUP}"
    crd = copy.deepcopy(CRD_BODY)
    crd["metadata"]["name"] = f"gizmos.{group}"
    crd["spec"]["group"] = group
    crd["spec"]["scope"] = "Cluster"
    crd["spec"]["names"] = {"plural": "gizmos", "kind": "Gizmo"}
    created = await backend.ok(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
    )
    assert created["metadata"]["generation"] == 1
    assert created["spec"]["names"] == {
        "plural": "gizmos",
        "singular": "gizmo",
        "kind": "Gizmo",
        "listKind": "GizmoList",
    }
    assert created["spec"]["conversion"] == {"strategy": "None"}
    crd_path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gizmos.{group}"
    try:
        with trio.fail_after(20):
            while True:  # the real server establishes the CRD and updates discovery shortly after
                current = await backend.ok("GET", crd_path)
                conditions = {
                    c["type"]: c["status"] for c in current["status"].get("conditions") or []
                }
                served = await backend.request("GET", f"/apis/{group}/v1")
                if conditions.get("Established") == "True" and served.status_code == 200:
                    break
                await trio.sleep(0.1)
        assert conditions["NamesAccepted"] == "True"
        assert current["status"]["acceptedNames"]["kind"] == "Gizmo"
        assert current["status"]["storedVersions"] == ["v1"]
        gizmo = {"apiVersion": f"{group}/v1", "kind": "Gizmo", "metadata": {"name": "one"}}
        made = await backend.ok("POST", f"/apis/{group}/v1/gizmos", gizmo)
        assert "namespace" not in made["metadata"]
    finally:
        deleted = await backend.ok("DELETE", crd_path)
    assert deleted["metadata"]["deletionTimestamp"]
    with trio.fail_after(20):  # the real server cleans up asynchronously
        for path in (f"/apis/{group}/v1/gizmos", crd_path):
            while (await backend.request("GET", path)).status_code != 404:  # noqa: ASYNC110
                await trio.sleep(0.1)
    response = await backend.request("GET", f"/apis/{group}/v1/gizmos")
    assert response.text == "404 page not found\n"


# ------------------------------------------------------------------------------ other kinds


async def test_events_and_leases(backend: Backend) -> None:
    ns = backend.namespace
    event = {
        "metadata": {"name": "ev1"},
        "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": ns},
        "reason": "Tested",
        "message": "hello",
        "type": "Normal",
    }
    created = await backend.ok("POST", f"/api/v1/namespaces/{ns}/events", event)
    assert (created["kind"], created["reason"], created["involvedObject"]["name"]) == (
        "Event",
        "Tested",
        "x",
    )
    listing = await backend.ok("GET", "/apis/events.k8s.io/v1/namespaces/" + ns + "/events")
    assert listing["kind"] == "EventList"

    lease = await backend.ok(
        "POST",
        f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
        {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}},
    )
    assert scrub(lease) == {
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"name": "l", "namespace": ns},
        "spec": {"holderIdentity": "me"},
    }


async def test_unauthorized(backend: Backend) -> None:
    if backend.api is not None:
        backend.api.tokens = {backend.token}
    response = await backend.client.get(
        backend.cm_path(), headers={"Authorization": "Bearer wrong"}
    )
    assert response.status_code == 401
    assert response.json() == status(401, "Unauthorized", "Unauthorized")
    assert (await backend.client.get(backend.cm_path())).status_code == 200
