"""Diff-base storages: where and how the last-handled essence is kept (Kopf-compatible)."""

from __future__ import annotations

from typing import Any

import pytest
from trioperator._engine.bodies import Body
from trioperator._engine.diffbase import (
    AnnotationsDiffBaseStorage,
    BodyEssence,
    DiffBaseStorage,
    MultiDiffBaseStorage,
    StatusDiffBaseStorage,
)
from trioperator._engine.patches import Patch

ESSENCE_1: BodyEssence = {
    "spec": {
        "string-field": "value1",
        "integer-field": 123,
        "float-field": 123.456,
        "false-field": False,
        "true-field": True,
    },
    "metadata": {"labels": {"l": "v"}},
}
ESSENCE_2: BodyEssence = {"spec": {"hello": "world", "the-cake": False}}

JSON_1 = (
    '{"spec":{"string-field":"value1","integer-field":123,"float-field":123.456,'
    '"false-field":false,"true-field":true},"metadata":{"labels":{"l":"v"}}}'
)
JSON_2 = '{"spec":{"hello":"world","the-cake":false}}'

DEFAULT_KEY = "kopf.zalando.org/last-handled-configuration"


class DualDiffBaseStorage(MultiDiffBaseStorage):
    """The documented transition: the new status storage first, the old annotations second."""

    def __init__(self) -> None:
        super().__init__(
            [
                StatusDiffBaseStorage(field="status.diff-base"),
                AnnotationsDiffBaseStorage(
                    prefix="kopf.zalando.org", key="last-handled-configuration"
                ),
            ]
        )


ALL_STORAGES: list[type[DiffBaseStorage]] = [
    AnnotationsDiffBaseStorage,
    StatusDiffBaseStorage,
    DualDiffBaseStorage,
]


# ------------------------------------------------------------------ construction


def test_annotations_storage_defaults() -> None:
    storage = AnnotationsDiffBaseStorage()
    assert storage.prefix == "kopf.zalando.org"
    assert storage.key == "last-handled-configuration"
    assert storage.v1 is True
    assert storage.ignored_fields == []
    assert storage.make_keys(storage.key) == [DEFAULT_KEY]


def test_annotations_storage_with_prefix_and_key() -> None:
    storage = AnnotationsDiffBaseStorage(prefix="my-op.example.com", key="diff-base")
    assert storage.make_keys(storage.key) == ["my-op.example.com/diff-base"]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, ("status", "kopf", "last-handled-configuration")),
        ({"name": "my-op"}, ("status", "my-op", "last-handled-configuration")),
        ({"field": "status.diff-base"}, ("status", "diff-base")),
        ({"field": ("status", "a.b")}, ("status", "a.b")),
    ],
)
def test_status_storage_fields(kwargs: dict[str, Any], expected: tuple[str, ...]) -> None:
    assert StatusDiffBaseStorage(**kwargs).field == expected


def test_status_storage_field_can_be_reassigned() -> None:
    storage = StatusDiffBaseStorage(name="my-op")
    storage.field = "status.{name}.elsewhere"
    assert storage.field == ("status", "my-op", "elsewhere")


def test_ignored_fields_are_materialised() -> None:
    fields: list[str | tuple[str, ...]] = ["spec.a", ("spec", "b")]
    storage = StatusDiffBaseStorage(ignored_fields=(field for field in fields))
    assert storage.ignored_fields == ["spec.a", ("spec", "b")]


def test_base_class_is_abstract() -> None:
    with pytest.raises(TypeError):
        DiffBaseStorage()  # type: ignore[abstract]


# ------------------------------------------------------------------ common


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_fetching_from_an_empty_body_returns_none(cls: type[DiffBaseStorage]) -> None:
    assert cls().fetch(body=Body({})) is None


# ------------------------------------------------------------------ annotations


@pytest.mark.parametrize("suffix", ["", "\n"])
@pytest.mark.parametrize("prefix", ["", "\n"])
def test_fetching_from_annotations(prefix: str, suffix: str) -> None:
    storage = AnnotationsDiffBaseStorage()
    body = Body({"metadata": {"annotations": {DEFAULT_KEY: prefix + JSON_1 + suffix}}})
    assert storage.fetch(body=body) == ESSENCE_1


def test_fetching_a_non_object_gives_none_and_broken_json_fails() -> None:
    storage = AnnotationsDiffBaseStorage()
    assert storage.fetch(body=Body({"metadata": {"annotations": {DEFAULT_KEY: "null"}}})) is None
    with pytest.raises(ValueError, match=f"annotation {DEFAULT_KEY!r} is not valid JSON"):
        storage.fetch(body=Body({"metadata": {"annotations": {DEFAULT_KEY: "{broken"}}}))


def test_storing_to_annotations_is_compact_json_with_a_newline() -> None:
    storage = AnnotationsDiffBaseStorage()
    patch = Patch()
    storage.store(body=Body({}), patch=patch, essence=ESSENCE_1)
    assert patch == {"metadata": {"annotations": {DEFAULT_KEY: JSON_1 + "\n"}}}


def test_storing_to_annotations_overwrites_pending_content() -> None:
    storage = AnnotationsDiffBaseStorage()
    patch = Patch()
    storage.store(body=Body({}), patch=patch, essence=ESSENCE_1)
    storage.store(body=Body({}), patch=patch, essence=ESSENCE_2)
    assert patch == {"metadata": {"annotations": {DEFAULT_KEY: JSON_2 + "\n"}}}


def test_storing_the_same_essence_patches_nothing() -> None:
    storage = AnnotationsDiffBaseStorage()
    patch = Patch()
    body = Body({"metadata": {"annotations": {DEFAULT_KEY: JSON_1 + "\n"}}})
    storage.store(body=body, patch=patch, essence=ESSENCE_1)
    assert not patch


def test_storing_with_a_custom_prefix_adds_the_marker() -> None:
    storage = AnnotationsDiffBaseStorage(prefix="my-op.example.com", key="diff-base")
    patch = Patch()
    storage.store(body=Body({}), patch=patch, essence=ESSENCE_2)
    assert patch == {
        "metadata": {
            "annotations": {
                "my-op.example.com/diff-base": JSON_2 + "\n",
                "my-op.example.com/kopf-managed": "yes",
            }
        }
    }


def test_storing_with_a_long_key_writes_both_versions() -> None:
    storage = AnnotationsDiffBaseStorage(prefix="my-operator.example.com", key="x" * 40)
    patch = Patch()
    storage.store(body=Body({}), patch=patch, essence=ESSENCE_2)
    assert patch["metadata"]["annotations"] == {
        "my-operator.example.com/" + "x" * 40: JSON_2 + "\n",
        "my-operator.example.com/" + "x" * 32 + "-tEokcg": JSON_2 + "\n",
        "my-operator.example.com/kopf-managed": "yes",
    }
    v1_only = Body(
        {"metadata": {"annotations": {"my-operator.example.com/" + "x" * 32 + "-tEokcg": JSON_1}}}
    )
    assert storage.fetch(body=v1_only) == ESSENCE_1


def test_storing_for_a_replicaset_of_a_deployment() -> None:
    storage = AnnotationsDiffBaseStorage()
    body = Body({"kind": "ReplicaSet", "metadata": {"ownerReferences": [{"kind": "Deployment"}]}})
    patch = Patch()
    storage.store(body=body, patch=patch, essence=ESSENCE_2)
    assert patch == {"metadata": {"annotations": {f"{DEFAULT_KEY}-ofDRS": JSON_2 + "\n"}}}
    # The Deployment's own diff-base, copied to the ReplicaSet by Kubernetes, is not ours:
    copied = Body(
        {
            "kind": "ReplicaSet",
            "metadata": {
                "ownerReferences": [{"kind": "Deployment"}],
                "annotations": {DEFAULT_KEY: JSON_1},
            },
        }
    )
    assert storage.fetch(body=copied) is None


# ------------------------------------------------------------------ status


@pytest.mark.parametrize("suffix", ["", "\n"])
@pytest.mark.parametrize("prefix", ["", "\n"])
def test_fetching_from_status(prefix: str, suffix: str) -> None:
    storage = StatusDiffBaseStorage(field="status.my-op.diff-base")
    body = Body({"status": {"my-op": {"diff-base": prefix + JSON_1 + suffix}}})
    assert storage.fetch(body=body) == ESSENCE_1


@pytest.mark.parametrize("value", [None, 123, {"spec": {}}, ["x"]])
def test_fetching_non_strings_from_status_gives_none(value: Any) -> None:
    storage = StatusDiffBaseStorage()
    body = Body({"status": {"kopf": {"last-handled-configuration": value}}})
    assert storage.fetch(body=body) is None


def test_storing_to_status_is_a_json_string_without_newline() -> None:
    storage = StatusDiffBaseStorage(field="status.my-op.diff-base")
    patch = Patch()
    storage.store(body=Body({}), patch=patch, essence=ESSENCE_1)
    assert patch == {"status": {"my-op": {"diff-base": JSON_1}}}


def test_storing_to_status_overwrites_and_skips_the_same() -> None:
    storage = StatusDiffBaseStorage()
    patch = Patch()
    storage.store(body=Body({}), patch=patch, essence=ESSENCE_1)
    storage.store(body=Body({}), patch=patch, essence=ESSENCE_2)
    assert patch == {"status": {"kopf": {"last-handled-configuration": JSON_2}}}
    same = Patch()
    body = Body({"status": {"kopf": {"last-handled-configuration": JSON_2}}})
    storage.store(body=body, patch=same, essence=ESSENCE_2)
    assert not same


# ------------------------------------------------------------------ multi (storage transition)


def test_multi_reads_the_first_found() -> None:
    storage = DualDiffBaseStorage()
    only_old = Body({"metadata": {"annotations": {DEFAULT_KEY: JSON_1 + "\n"}}})
    both = Body(
        {
            "metadata": {"annotations": {DEFAULT_KEY: JSON_1 + "\n"}},
            "status": {"diff-base": JSON_2},
        }
    )
    assert storage.fetch(body=only_old) == ESSENCE_1
    assert storage.fetch(body=both) == ESSENCE_2


def test_multi_writes_all() -> None:
    storage = DualDiffBaseStorage()
    patch = Patch()
    storage.store(body=Body({}), patch=patch, essence=ESSENCE_2)
    assert patch == {
        "status": {"diff-base": JSON_2},
        "metadata": {"annotations": {DEFAULT_KEY: JSON_2 + "\n"}},
    }


def test_multi_builds_without_any_of_its_storages_fields() -> None:
    storage = DualDiffBaseStorage()
    body = Body(
        {
            "spec": {"x": 1},
            "metadata": {"annotations": {DEFAULT_KEY: JSON_1, "other": "v"}},
            "status": {"diff-base": JSON_2, "phase": "Running"},
        }
    )
    essence = storage.build(body=body, extra_fields=["status.diff-base", "status.phase"])
    assert essence == {
        "spec": {"x": 1},
        "metadata": {"annotations": {"other": "v"}},
        "status": {"phase": "Running"},
    }


def test_status_storage_excludes_its_own_field_even_if_asked_for() -> None:
    storage = StatusDiffBaseStorage()
    body = Body({"spec": {}, "status": {"kopf": {"last-handled-configuration": JSON_1}}})
    assert storage.build(body=body, extra_fields=["status.kopf"]) == {"spec": {}}


def test_round_trip_through_the_annotation() -> None:
    storage = AnnotationsDiffBaseStorage()
    body = Body(
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "metadata": {"name": "kopf-example-1", "labels": {"somelabel": "somevalue"}},
            "spec": {"duration": "1m", "field": "value", "items": ["item1", "item2"]},
        }
    )
    essence = storage.build(body=body)
    patch = Patch()
    storage.store(body=body, patch=patch, essence=essence)
    stored = patch["metadata"]["annotations"][DEFAULT_KEY]
    assert stored == (
        '{"spec":{"duration":"1m","field":"value","items":["item1","item2"]},'
        '"metadata":{"labels":{"somelabel":"somevalue"}}}\n'
    )
    handled = Body(
        {**body.raw, "metadata": {**body.raw["metadata"], "annotations": {DEFAULT_KEY: stored}}}
    )
    assert storage.fetch(body=handled) == essence
    assert storage.build(body=handled) == essence  # its own annotation is not part of it
