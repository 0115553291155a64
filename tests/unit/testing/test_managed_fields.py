"""Field sets, managers and server-side apply in the fake's object store (no HTTP)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from trioperator.testing._fakestore import StatusError, Store
from trioperator.testing._fakestore.fieldsets import (
    Shapes,
    compare,
    decode_fields,
    encode_fields,
    field_set,
    path_text,
)

BUILTIN = Shapes(custom=False)
CUSTOM = Shapes(custom=True)
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


@pytest.fixture
def store() -> Store:
    seconds = itertools.count()
    return Store(now=lambda: f"2026-01-01T00:00:{next(seconds) % 60:02d}Z")


def cm(name: str = "c", **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **fields}


def owners(obj: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """Each manager's owned paths, as conflict messages print them."""
    return {
        (e["manager"], e["operation"]): {path_text(p) for p in decode_fields(e["fieldsV1"])}
        for e in obj["metadata"].get("managedFields", [])
    }


# ------------------------------------------------------------------------------ field sets


def test_field_set_of_a_builtin_kind_owns_leaves_map_keys_and_list_items() -> None:
    config = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "labels": {"a": "1"}, "finalizers": ["x/y"]},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "ports": [{"containerPort": 80}], "resources": {}}
                    ],
                    "tolerations": [{"key": "k"}],
                }
            },
        },
    }
    fields = encode_fields(field_set(config, BUILTIN))
    assert fields == {
        "f:metadata": {"f:finalizers": {'v:"x/y"': {}}, "f:labels": {"f:a": {}}},
        "f:spec": {
            "f:selector": {},  # an atomic struct: owned whole
            "f:template": {
                "f:spec": {
                    "f:containers": {
                        'k:{"name":"c"}': {
                            ".": {},
                            "f:name": {},
                            "f:ports": {
                                # The protocol is part of the key even when defaulted.
                                'k:{"containerPort":80,"protocol":"TCP"}': {
                                    ".": {},
                                    "f:containerPort": {},
                                }
                            },
                            "f:resources": {},  # an empty map is owned itself
                        }
                    },
                    "f:tolerations": {},  # an atomic list
                }
            },
        },
    }
    assert decode_fields(fields) == field_set(config, BUILTIN)


def test_field_set_of_a_custom_resource_owns_every_map() -> None:
    config = {"apiVersion": "x/v1", "kind": "X", "spec": {"a": {"b": 1}, "l": [{"name": "n"}]}}
    assert encode_fields(field_set(config, CUSTOM)) == {
        "f:spec": {".": {}, "f:a": {".": {}, "f:b": {}}, "f:l": {}}
    }


def test_compare_reports_items_by_key_not_by_position() -> None:
    old = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}
    new = {"spec": {"containers": [{"name": "b", "image": "2"}, {"name": "c"}]}}
    diff = compare(old, new, BUILTIN)
    assert {path_text(p) for p in diff.added} == {
        '.spec.containers[name="c"]',
        '.spec.containers[name="c"].name',
    }
    assert {path_text(p) for p in diff.modified} == {'.spec.containers[name="b"].image'}
    assert {path_text(p) for p in diff.removed} == {
        '.spec.containers[name="a"]',
        '.spec.containers[name="a"].name',
        '.spec.containers[name="a"].image',
    }
    assert compare(old, old, BUILTIN).same


# ------------------------------------------------------------------------------ apply


def test_apply_creates_and_an_unchanged_apply_writes_nothing(store: Store) -> None:
    res = store.resolve("configmaps")
    created = store.apply(res, "default", "c", cm(data={"a": "1"}), manager="m")
    assert created["data"] == {"a": "1"}
    assert owners(created) == {("m", "Apply"): {".data.a"}}
    again = store.apply(res, "default", "c", b'{"apiVersion":"v1","kind":"ConfigMap"}', manager="m")
    # Applying less removes what the manager no longer applies.
    assert "data" not in again
    assert "managedFields" not in again["metadata"]
    same = store.apply(res, "default", "c", cm(), manager="m")
    assert same["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"]


def test_apply_reads_yaml(store: Store) -> None:
    res = store.resolve("configmaps")
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  a: 'yes'\n"
    assert store.apply(res, "default", "c", body, manager="m")["data"] == {"a": "yes"}
    with pytest.raises(StatusError) as raised:
        store.apply(res, "default", "c", b"a: [", manager="m")
    assert raised.value.code == 400
    assert raised.value.message.startswith("error decoding YAML:")


def test_apply_without_a_manager_is_refused_and_stores_nothing(store: Store) -> None:
    res = store.resolve("configmaps")
    with pytest.raises(StatusError) as raised:
        store.apply(res, "default", "c", cm(data={"a": "1"}), manager=None)
    assert (raised.value.code, raised.value.reason) == (422, "Invalid")
    assert store.peek(res, "default", "c") is None


def test_conflicts_name_every_field_and_force_takes_them(store: Store) -> None:
    res = store.resolve("configmaps")
    store.apply(res, "default", "c", cm(data={"a": "1", "b": "1"}), manager="one")
    before = store.get(res, "default", "c")
    with pytest.raises(StatusError) as raised:
        store.apply(res, "default", "c", cm(data={"a": "2", "b": "2"}), manager="two")
    assert raised.value.code == 409
    assert raised.value.details == {
        "causes": [
            {"reason": "FieldManagerConflict", "message": 'conflict with "one"', "field": f}
            for f in (".data.a", ".data.b")
        ]
    }
    assert store.get(res, "default", "c") is before

    forced = store.apply(res, "default", "c", cm(data={"a": "2"}), manager="two", force=True)
    assert forced["data"] == {"a": "2", "b": "1"}
    assert owners(forced) == {("one", "Apply"): {".data.b"}, ("two", "Apply"): {".data.a"}}


def test_pruning_keeps_what_another_manager_owns(store: Store) -> None:
    res = store.resolve("configmaps")
    store.apply(res, "default", "c", cm(data={"a": "1", "b": "1"}), manager="one")
    store.patch(res, "default", "c", MERGE, b'{"data":{"b":"2"}}', manager="editor")
    result = store.apply(res, "default", "c", cm(), manager="one")
    assert result["data"] == {"b": "2"}
    assert owners(result) == {("editor", "Update"): {".data.b"}}


def test_first_apply_to_an_object_nobody_manages(store: Store) -> None:
    res = store.resolve("configmaps")
    store.create(res, "default", cm(data={"a": "1"}))
    with pytest.raises(StatusError) as raised:
        store.apply(res, "default", "c", cm(data={"a": "2"}), manager="m")
    assert raised.value.message == (
        'Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.a'
    )


def test_apply_to_status_leaves_spec_alone(store: Store) -> None:
    res = store.resolve("deployments.apps")
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    store.apply(res, "default", "d", {**body, "spec": {"replicas": 1}}, manager="op")
    status = {**body, "status": {"replicas": 1}}
    # As in 1.20, the applied spec still counts for conflicts, though it is not written.
    with pytest.raises(StatusError) as raised:
        store.apply(
            res,
            "default",
            "d",
            {**status, "spec": {"replicas": 5}},
            manager="st",
            subresource="status",
        )
    assert raised.value.message.endswith('conflict with "op": .spec.replicas')
    result = store.apply(res, "default", "d", status, manager="st", subresource="status")
    assert result["spec"] == {"replicas": 1}
    assert result["status"] == {"replicas": 1}
    assert result["metadata"]["generation"] == 1


# ------------------------------------------------------------------------------ updates


def test_objects_written_without_managers_stay_untracked(store: Store) -> None:
    res = store.resolve("configmaps")
    store.create(res, "default", cm(data={"a": "1"}))
    patched = store.patch(res, "default", "c", MERGE, b'{"data":{"b":"2"}}')
    assert "managedFields" not in patched["metadata"]


def test_updates_of_tracked_objects_use_the_default_manager(store: Store) -> None:
    res = store.resolve("configmaps")
    store.create(res, "default", cm(data={"a": "1"}), manager="creator")
    patched = store.patch(
        res, "default", "c", MERGE, b'{"data":{"a":"2"}}', default_manager="kubectl"
    )
    assert owners(patched) == {("kubectl", "Update"): {".data.a"}, ("creator", "Update"): {".data"}}


def test_updates_may_replace_or_clear_the_managed_fields(store: Store) -> None:
    res = store.resolve("configmaps")
    created = store.create(res, "default", cm(data={"a": "1"}), manager="creator")
    cleared = store.replace(
        res, "default", "c", {**created, "metadata": {**created["metadata"], "managedFields": [{}]}}
    )
    assert "managedFields" not in cleared["metadata"]


def test_track_managed_fields_records_every_write(store: Store) -> None:
    store.track_managed_fields = True
    res = store.resolve("configmaps")
    created = store.create(res, "default", cm(data={"a": "1"}), default_manager="python-httpx")
    assert owners(created) == {("python-httpx", "Update"): {".data", ".data.a"}}


def test_managers_record_the_version_of_their_requests(store: Store) -> None:
    versions = [
        {"name": name, "served": True, "storage": name == "v1"} for name in ("v1", "v1beta1")
    ]
    crd = {
        "metadata": {"name": "things.x.dev"},
        "spec": {
            "group": "x.dev",
            "scope": "Namespaced",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": versions,
        },
    }
    store.create(store.resolve("customresourcedefinitions"), None, crd)
    res = store.resolve("things.x.dev")
    beta = {"apiVersion": "x.dev/v1beta1", "kind": "Thing", "metadata": {"name": "t"}}
    with pytest.raises(StatusError) as raised:
        store.apply(res, "default", "t", beta, manager="m")  # the request is for v1
    assert raised.value.message == (
        "Incorrect version specified in apply patch. Specified patch version: x.dev/v1beta1,"
        " expected: x.dev/v1"
    )
    store.apply(res, "default", "t", {**beta, "spec": {"a": 1}}, manager="m", version="v1beta1")
    patched = store.patch(
        res, "default", "t", MERGE, b'{"spec":{"b":2}}', manager="editor", version="v1beta1"
    )
    assert [(e["manager"], e["apiVersion"]) for e in patched["metadata"]["managedFields"]] == [
        ("m", "x.dev/v1beta1"),
        ("editor", "x.dev/v1beta1"),
    ]
    with pytest.raises(StatusError) as raised:
        store.apply(res, "default", "t", {**beta, "spec": {"b": 3}}, manager="m", version="v1beta1")
    assert raised.value.message.endswith('conflict with "editor" using x.dev/v1beta1: .spec.b')
