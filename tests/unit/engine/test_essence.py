"""The essence of an object: what counts as a change (as Kopf 1.45 computes it)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trioperator._engine.bodies import Body
from trioperator._engine.diffbase import (
    AnnotationsDiffBaseStorage,
    DiffBaseStorage,
    MultiDiffBaseStorage,
    StatusDiffBaseStorage,
)
from trioperator._engine.progress import AnnotationsProgressStorage, SmartProgressStorage

ALL_STORAGES: list[type[DiffBaseStorage]] = [AnnotationsDiffBaseStorage, StatusDiffBaseStorage]

SYSTEM_FIELDS = [
    "uid",
    "name",
    "namespace",
    "selfLink",
    "generation",
    "finalizers",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "ownerReferences",
    "generateName",
    "any-unexpected-field",
]


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_resource_references_are_dropped(cls: type[DiffBaseStorage]) -> None:
    body = Body({"apiVersion": "group/version", "kind": "Kind"})
    assert cls().build(body=body) == {}


@pytest.mark.parametrize("field", SYSTEM_FIELDS)
@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_system_fields_are_dropped_with_emptied_parents(
    cls: type[DiffBaseStorage], field: str
) -> None:
    body = Body({"metadata": {field: "x"}})
    assert cls().build(body=body) == {}


@pytest.mark.parametrize("field", SYSTEM_FIELDS)
@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_system_fields_are_dropped_but_extra_fields_kept(
    cls: type[DiffBaseStorage], field: str
) -> None:
    body = Body({"metadata": {field: "x", "other": "y"}})
    assert cls().build(body=body, extra_fields=["metadata.other"]) == {"metadata": {"other": "y"}}


@pytest.mark.parametrize(
    "annotation",
    [
        pytest.param("kopf.zalando.org/last-handled-configuration", id="kopf-diffbase"),
        pytest.param("kopf.zalando.org/create_fn", id="kopf-progress"),
        pytest.param("kopf.zalando.org/touch-dummy", id="kopf-touch"),
        pytest.param("my-op.kopf.zalando.org/fn", id="kopf-subdomain"),
        pytest.param("kubectl.kubernetes.io/last-applied-configuration", id="kubectl"),
    ],
)
@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_garbage_annotations_are_dropped(cls: type[DiffBaseStorage], annotation: str) -> None:
    emptied = Body({"metadata": {"annotations": {annotation: "x"}}})
    mixed = Body({"metadata": {"annotations": {annotation: "x", "other": "y"}}})
    assert cls().build(body=emptied) == {}
    assert cls().build(body=mixed) == {"metadata": {"annotations": {"other": "y"}}}


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_other_kubectl_annotations_are_kept(cls: type[DiffBaseStorage]) -> None:
    body = Body({"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "t"}}})
    assert cls().build(body=body) == {
        "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "t"}}
    }


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_other_operators_marked_prefixes_are_dropped(cls: type[DiffBaseStorage]) -> None:
    body = Body(
        {
            "metadata": {
                "annotations": {
                    "other-op.example.com/kopf-managed": "yes",
                    "other-op.example.com/create_fn": "{}",
                    "other-op.example.com/last-handled-configuration": "{}",
                    "unmarked.example.com/create_fn": "{}",
                    "plain": "v",
                }
            }
        }
    )
    assert cls().build(body=body) == {
        "metadata": {"annotations": {"unmarked.example.com/create_fn": "{}", "plain": "v"}}
    }


def test_own_unmarked_diffbase_key_is_dropped() -> None:
    # Before its marker is written, a custom prefix is not recognised; its own key still goes.
    storage = AnnotationsDiffBaseStorage(prefix="my-op.example.com", key="diff-base")
    body = Body(
        {
            "metadata": {
                "annotations": {"my-op.example.com/diff-base": "{}", "my-op.example.com/fn": "{}"}
            }
        }
    )
    assert storage.build(body=body) == {"metadata": {"annotations": {"my-op.example.com/fn": "{}"}}}


def test_own_v1_and_v2_keys_are_dropped() -> None:
    storage = AnnotationsDiffBaseStorage(prefix="my-operator.example.com", key="x" * 40)
    body = Body(
        {
            "metadata": {
                "annotations": {
                    "my-operator.example.com/" + "x" * 40: "{}",
                    "my-operator.example.com/" + "x" * 32 + "-tEokcg": "{}",
                }
            }
        }
    )
    assert storage.build(body=body) == {}


def test_progress_clearing_drops_own_unmarked_records() -> None:
    # Before diffing, the progress storage strips its own prefix from both essences.
    diffbase = AnnotationsDiffBaseStorage(prefix="my-op.example.com", key="diff-base")
    progress = AnnotationsProgressStorage(prefix="my-op.example.com")
    body = Body({"spec": {"a": 1}, "metadata": {"annotations": {"my-op.example.com/fn": "{}"}}})
    assert progress.clear(essence=diffbase.build(body=body)) == {"spec": {"a": 1}}


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_status_is_dropped_with_emptied_parents(cls: type[DiffBaseStorage]) -> None:
    body = Body({"status": {"kopf": {"progress": "x", "anything": "y"}, "other": "z"}})
    assert cls().build(body=body) == {}


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_status_is_dropped_but_extra_fields_kept(cls: type[DiffBaseStorage]) -> None:
    body = Body({"status": {"kopf": {"progress": "x", "anything": "y"}, "other": "z"}})
    assert cls().build(body=body, extra_fields=["status.other"]) == {"status": {"other": "z"}}


@pytest.mark.parametrize("cls", ALL_STORAGES)
@pytest.mark.parametrize(
    "extra_fields",
    [["status.phase"], [("status", "phase")], [["status", "phase"]]],
)
def test_extra_fields_in_any_notation(cls: type[DiffBaseStorage], extra_fields: Any) -> None:
    body = Body({"status": {"phase": "Running", "other": 1}})
    assert cls().build(body=body, extra_fields=extra_fields) == {"status": {"phase": "Running"}}


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_extra_fields_as_an_iterator(cls: type[DiffBaseStorage]) -> None:
    body = Body({"status": {"phase": "Running", "other": 1}})
    extra_fields = (field for field in ["status.phase"])
    assert cls().build(body=body, extra_fields=extra_fields) == {"status": {"phase": "Running"}}


def test_extra_fields_as_an_iterator_in_a_multi_storage() -> None:
    storage = MultiDiffBaseStorage([AnnotationsDiffBaseStorage(), StatusDiffBaseStorage()])
    body = Body({"status": {"phase": "Running", "other": 1}})
    extra_fields = (field for field in ["status.phase"])
    assert storage.build(body=body, extra_fields=extra_fields) == {"status": {"phase": "Running"}}


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_absent_extra_fields_are_skipped(cls: type[DiffBaseStorage]) -> None:
    body = Body({"spec": {"a": 1}, "status": "corrupted"})
    assert cls().build(body=body, extra_fields=["status.x", "spec.zzz"]) == {"spec": {"a": 1}}


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_user_fields_and_labels_count(cls: type[DiffBaseStorage]) -> None:
    body = Body(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "n", "labels": {"l": "v"}, "annotations": {"a": "v"}},
            "data": {"k": "v"},
            "binaryData": {},
            "spec": {},
        }
    )
    assert cls().build(body=body) == {
        "data": {"k": "v"},
        "binaryData": {},
        "spec": {},
        "metadata": {"labels": {"l": "v"}, "annotations": {"a": "v"}},
    }


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_empty_labels_and_annotations_are_dropped(cls: type[DiffBaseStorage]) -> None:
    body = Body({"spec": {"a": 1}, "metadata": {"labels": {}, "annotations": {}}})
    assert cls().build(body=body) == {"spec": {"a": 1}}


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_the_body_is_deep_copied(cls: type[DiffBaseStorage]) -> None:
    raw: dict[str, Any] = {"spec": {"depth": {"field": "x"}}, "metadata": {"labels": {"l": "v"}}}
    essence = cls().build(body=Body(raw))
    raw["spec"]["depth"]["field"] = "y"
    raw["metadata"]["labels"]["l"] = "w"
    assert essence == {"spec": {"depth": {"field": "x"}}, "metadata": {"labels": {"l": "v"}}}


UNCHANGED = {"spec": {"a": 1, "b": 2}, "metadata": {"labels": {"l": "v"}}}


@pytest.mark.parametrize(
    ("ignored_fields", "expected"),
    [
        pytest.param(["spec.b"], {"spec": {"a": 1}, "metadata": {"labels": {"l": "v"}}}, id="one"),
        pytest.param(
            [("spec", "a"), ["spec", "b"]],
            {"metadata": {"labels": {"l": "v"}}},
            id="emptied-parent-goes",
        ),
        pytest.param(["metadata.labels"], {"spec": {"a": 1, "b": 2}}, id="labels"),
        pytest.param(
            ["spec.a.deeper"],
            {"spec": {"a": 1, "b": 2}, "metadata": {"labels": {"l": "v"}}},
            id="through-non-dict",
        ),
        pytest.param(
            ["spec.zzz"],
            {"spec": {"a": 1, "b": 2}, "metadata": {"labels": {"l": "v"}}},
            id="absent",
        ),
    ],
)
@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_ignored_fields(
    cls: type[Any], ignored_fields: list[Any], expected: dict[str, Any]
) -> None:
    body = Body({"spec": {"a": 1, "b": 2}, "metadata": {"labels": {"l": "v"}}})
    assert cls(ignored_fields=ignored_fields).build(body=body) == expected


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_ignored_fields_win_over_extra_fields(cls: type[Any]) -> None:
    body = Body({"status": {"phase": "Running", "conditions": []}})
    storage = cls(ignored_fields=["status.conditions"])
    extra = ["status.phase", "status.conditions"]
    assert storage.build(body=body, extra_fields=extra) == {"status": {"phase": "Running"}}


def test_multi_storage_essence_is_cleaned_by_every_storage() -> None:
    storage = MultiDiffBaseStorage(
        [
            AnnotationsDiffBaseStorage(prefix="a.example.com", key="base"),
            AnnotationsDiffBaseStorage(prefix="b.example.com", key="base"),
        ]
    )
    body = Body(
        {
            "spec": {"x": 1},
            "metadata": {
                "annotations": {"a.example.com/base": "{}", "b.example.com/base": "{}", "c": "v"}
            },
        }
    )
    assert storage.build(body=body) == {"spec": {"x": 1}, "metadata": {"annotations": {"c": "v"}}}


def test_key_order_of_the_stored_json_matches_kopf() -> None:
    # Kopf's essence keeps the body's order for user fields, then appends metadata (labels,
    # then annotations), then the restored extra fields; the JSON follows that order.
    storage = AnnotationsDiffBaseStorage()
    body = Body(
        {
            "metadata": {"annotations": {"z": "1", "a": "2"}, "name": "n", "labels": {"l": "v"}},
            "status": {"phase": "P"},
            "spec": {"b": 1, "a": 2},
            "apiVersion": "v1",
            "data": {"k": "v"},
            "kind": "K",
        }
    )
    essence = storage.build(body=body, extra_fields=["status.phase"])
    assert json.dumps(essence, separators=(",", ":")) == (
        '{"spec":{"b":1,"a":2},"data":{"k":"v"},'
        '"metadata":{"labels":{"l":"v"},"annotations":{"z":"1","a":"2"}},'
        '"status":{"phase":"P"}}'
    )


def test_smart_progress_storage_clears_an_essence_built_from_a_legacy_object() -> None:
    # An object handled by Kopf < 1.44 with a status field handler: both places are ours.
    diffbase = AnnotationsDiffBaseStorage()
    progress = SmartProgressStorage()
    body = Body(
        {
            "spec": {"a": 1},
            "metadata": {"annotations": {"kopf.zalando.org/fn": "{}"}},
            "status": {"kopf": {"progress": {"fn": {"retries": 1}}}, "x": 1},
        }
    )
    essence = diffbase.build(body=body, extra_fields=["status.kopf", "status.x"])
    assert progress.clear(essence=essence) == {"spec": {"a": 1}, "status": {"x": 1}}
