"""Progress storages: the exact on-cluster formats and patches (Kopf-compatible)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from trioperator._engine.bodies import Body
from trioperator._engine.ids import HandlerId
from trioperator._engine.patches import Patch
from trioperator._engine.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressRecord,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
    clear_owned,
)

ALL_STORAGES: list[type[ProgressStorage]] = [
    AnnotationsProgressStorage,
    StatusProgressStorage,
    SmartProgressStorage,
]
ANNOTATIONS_STORAGES: list[type[Any]] = [AnnotationsProgressStorage, SmartProgressStorage]
STATUS_READING_STORAGES: list[type[Any]] = [StatusProgressStorage, SmartProgressStorage]

PREFIX = "my-operator.example.com"
MARKER = f"{PREFIX}/kopf-managed"

RECORD_1 = ProgressRecord(
    started="2020-01-01T00:00:00.000000+00:00",
    stopped="2020-12-31T23:59:59.000000+00:00",
    delayed="3000-01-01T00:00:00.000000+00:00",
    purpose="create",
    retries=123,
    success=False,
    failure=False,
    message=None,
    subrefs=None,
)
RECORD_2 = ProgressRecord(
    started="2021-01-01T00:00:00.000000+00:00",
    retries=456,
    success=False,
    failure=True,
    message="Some error.",
    subrefs=["fn/sub1", "fn/sub2"],
)

JSON_1_COMPACT = (
    '{"started":"2020-01-01T00:00:00.000000+00:00","stopped":"2020-12-31T23:59:59.000000+00:00",'
    '"delayed":"3000-01-01T00:00:00.000000+00:00","purpose":"create","retries":123,'
    '"success":false,"failure":false}'
)
JSON_1_VERBOSE = JSON_1_COMPACT[:-1] + ',"message":null,"subrefs":null}'
JSON_2_COMPACT = (
    '{"started":"2021-01-01T00:00:00.000000+00:00","retries":456,"success":false,'
    '"failure":true,"message":"Some error.","subrefs":["fn/sub1","fn/sub2"]}'
)


X40_V1 = f"{PREFIX}/" + "x" * 32 + "-tEokcg"
X40_V2 = f"{PREFIX}/" + "x" * 40


def annotations_of(patch: dict[str, Any]) -> dict[str, Any]:
    return dict(patch.get("metadata", {}).get("annotations", {}))


# ------------------------------------------------------------------ construction


def test_annotations_storage_defaults() -> None:
    storage = AnnotationsProgressStorage()
    assert storage.prefix == "kopf.zalando.org"
    assert storage.verbose is False
    assert storage.touch_key == "touch-dummy"
    assert storage.v1 is True


def test_annotations_storage_with_prefix() -> None:
    assert AnnotationsProgressStorage(prefix=PREFIX).prefix == PREFIX


@pytest.mark.parametrize(
    ("kwargs", "field", "touch_field"),
    [
        ({}, ("status", "kopf", "progress"), ("status", "kopf", "dummy")),
        ({"name": "my-op"}, ("status", "my-op", "progress"), ("status", "my-op", "dummy")),
        (
            {"field": "status.my-op", "touch_field": "status.my-dummy"},
            ("status", "my-op"),
            ("status", "my-dummy"),
        ),
        (
            {"field": ("status", "a.b"), "touch_field": ["status", "c"]},
            ("status", "a.b"),
            ("status", "c"),
        ),
    ],
)
def test_status_storage_fields(
    kwargs: dict[str, Any], field: tuple[str, ...], touch_field: tuple[str, ...]
) -> None:
    storage = StatusProgressStorage(**kwargs)
    assert storage.field == field
    assert storage.touch_field == touch_field


def test_status_storage_fields_can_be_reassigned() -> None:
    storage = StatusProgressStorage(name="my-op")
    storage.field = "status.{name}.elsewhere"
    storage.touch_field = ["status", "x"]
    assert storage.field == ("status", "my-op", "elsewhere")
    assert storage.touch_field == ("status", "x")


@pytest.mark.parametrize(
    ("kwargs", "prefix", "field", "touch_field"),
    [
        ({}, "kopf.zalando.org", ("status", "kopf", "progress"), ("status", "kopf", "dummy")),
        (
            {"name": "my-op"},
            "kopf.zalando.org",
            ("status", "my-op", "progress"),
            ("status", "my-op", "dummy"),
        ),
        (
            {"field": "status.my-op", "touch_field": "status.my-dummy"},
            "kopf.zalando.org",
            ("status", "my-op"),
            ("status", "my-dummy"),
        ),
        ({"prefix": PREFIX}, PREFIX, ("status", "kopf", "progress"), ("status", "kopf", "dummy")),
    ],
)
def test_smart_storage_composition(
    kwargs: dict[str, Any], prefix: str, field: tuple[str, ...], touch_field: tuple[str, ...]
) -> None:
    storage = SmartProgressStorage(**kwargs)
    first, second = storage.storages
    assert isinstance(first, AnnotationsProgressStorage)
    assert isinstance(second, StatusProgressStorage)
    assert first.prefix == prefix
    assert second.field == field
    assert second.touch_field == touch_field


def test_smart_storage_passes_annotation_options() -> None:
    storage = SmartProgressStorage(touch_key="my-dummy", v1=False, verbose=True)
    first = storage.storages[0]
    assert isinstance(first, AnnotationsProgressStorage)
    assert (first.touch_key, first.v1, first.verbose) == ("my-dummy", False, True)


def test_base_class_is_abstract() -> None:
    with pytest.raises(TypeError):
        ProgressStorage()  # type: ignore[abstract]


# ------------------------------------------------------------------ common behaviour


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_fetching_from_empty_body_returns_none(cls: type[ProgressStorage]) -> None:
    assert cls().fetch(body=Body({}), key=HandlerId("id1")) is None


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_purging_an_empty_body_does_nothing(cls: type[ProgressStorage]) -> None:
    patch = Patch()
    cls().purge(body=Body({}), patch=patch, key=HandlerId("id1"))
    assert not patch


@pytest.mark.parametrize("cls", ALL_STORAGES)
def test_flush_keeps_what_was_stored(cls: type[ProgressStorage]) -> None:
    # The storages write into the patch as they go: a flush has nothing left to write or drop.
    storage = cls()
    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=RECORD_1)
    stored = copy.deepcopy(dict(patch))
    storage.flush()
    assert patch == stored
    assert storage.fetch(body=Body(stored), key=HandlerId("id1")) is not None


# ------------------------------------------------------------------ annotations


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_fetching_from_annotations(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    body = Body({"metadata": {"annotations": {f"{PREFIX}/id1": JSON_2_COMPACT}}})
    assert storage.fetch(body=body, key=HandlerId("id1")) == RECORD_2
    assert storage.fetch(body=body, key=HandlerId("id2")) is None


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
@pytest.mark.parametrize("value", ["null", "123", '"str"', "[]"])
def test_fetching_non_records_from_annotations_gives_none(cls: type[Any], value: str) -> None:
    storage = cls(prefix=PREFIX)
    body = Body({"metadata": {"annotations": {f"{PREFIX}/id1": value}}})
    assert storage.fetch(body=body, key=HandlerId("id1")) is None


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_fetching_prefers_v2_and_falls_back_to_v1(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    key = HandlerId("x" * 40)
    v1_key, v2_key = X40_V1, X40_V2
    only_v1 = Body({"metadata": {"annotations": {v1_key: JSON_1_COMPACT}}})
    both = Body({"metadata": {"annotations": {v1_key: JSON_1_COMPACT, v2_key: JSON_2_COMPACT}}})
    assert storage.fetch(body=only_v1, key=key)["retries"] == 123
    assert storage.fetch(body=both, key=key)["retries"] == 456


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_storing_compact_json_without_nones(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=RECORD_1)
    storage.store(body=Body({}), patch=patch, key=HandlerId("id2"), record=RECORD_2)
    assert annotations_of(patch) == {
        f"{PREFIX}/id1": JSON_1_COMPACT,
        f"{PREFIX}/id2": JSON_2_COMPACT,
        MARKER: "yes",
    }
    assert "status" not in patch


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_storing_verbose_json_keeps_nones(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX, verbose=True)
    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=RECORD_1)
    assert annotations_of(patch)[f"{PREFIX}/id1"] == JSON_1_VERBOSE


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_storing_an_all_none_record_stores_an_empty_object(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    patch = Patch()
    record = ProgressRecord(started=None, retries=None, success=None, message=None)
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=record)
    assert annotations_of(patch)[f"{PREFIX}/id1"] == "{}"


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_storing_overwrites_pending_content(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=RECORD_1)
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=RECORD_2)
    assert annotations_of(patch)[f"{PREFIX}/id1"] == JSON_2_COMPACT


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_storing_what_is_already_there_patches_nothing(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    body = Body({"metadata": {"annotations": {f"{PREFIX}/id1": JSON_1_COMPACT, MARKER: "yes"}}})
    patch = Patch()
    storage.store(body=body, patch=patch, key=HandlerId("id1"), record=RECORD_1)
    assert not patch


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_storing_what_is_there_overrides_a_pending_purge(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    body = Body({"metadata": {"annotations": {f"{PREFIX}/id1": JSON_1_COMPACT, MARKER: "yes"}}})
    patch = Patch()
    storage.purge(body=body, patch=patch, key=HandlerId("id1"))
    storage.store(body=body, patch=patch, key=HandlerId("id1"), record=RECORD_1)
    assert annotations_of(patch) == {f"{PREFIX}/id1": JSON_1_COMPACT}


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_storing_writes_both_key_versions_when_they_differ(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    key = HandlerId("x" * 40)
    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=key, record=RECORD_2)
    assert annotations_of(patch) == {
        f"{PREFIX}/" + "x" * 40: JSON_2_COMPACT,  # V2
        f"{PREFIX}/" + "x" * 32 + "-tEokcg": JSON_2_COMPACT,  # V1
        MARKER: "yes",
    }


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_storing_without_v1(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX, v1=False)
    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=HandlerId("x" * 40), record=RECORD_2)
    assert annotations_of(patch) == {f"{PREFIX}/" + "x" * 40: JSON_2_COMPACT, MARKER: "yes"}


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_default_prefix_stores_no_marker(cls: type[Any]) -> None:
    storage = cls()
    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=HandlerId("create_fn/item1"), record=RECORD_2)
    assert patch == {
        "metadata": {"annotations": {"kopf.zalando.org/create_fn.item1": JSON_2_COMPACT}}
    }


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_purging_nullifies_present_keys(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    body = Body({"metadata": {"annotations": {f"{PREFIX}/id1": JSON_1_COMPACT}}})
    patch = Patch()
    storage.purge(body=body, patch=patch, key=HandlerId("id1"))
    assert patch == {"metadata": {"annotations": {f"{PREFIX}/id1": None}}}


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_purging_nullifies_both_key_versions_if_present(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX)
    key = HandlerId("x" * 40)
    v1_key, v2_key = X40_V1, X40_V2
    body = Body({"metadata": {"annotations": {v1_key: JSON_1_COMPACT, v2_key: JSON_1_COMPACT}}})
    patch = Patch()
    storage.purge(body=body, patch=patch, key=key)
    assert annotations_of(patch) == {v1_key: None, v2_key: None}


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_purging_cancels_a_pending_write_of_an_absent_key(cls: type[Any]) -> None:
    storage = cls()
    patch = Patch({"metadata": {"annotations": {"kopf.zalando.org/id1": JSON_1_COMPACT}}})
    storage.purge(body=Body({}), patch=patch, key=HandlerId("id1"))
    assert not patch
    assert patch == {}


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
@pytest.mark.parametrize(
    "body_data",
    [
        pytest.param({}, id="absent"),
        pytest.param({"metadata": {"annotations": {f"{PREFIX}/my-dummy": "old"}}}, id="present"),
    ],
)
def test_touching_with_a_value(cls: type[Any], body_data: dict[str, Any]) -> None:
    storage = cls(prefix=PREFIX, touch_key="my-dummy")
    patch = Patch()
    storage.touch(body=Body(body_data), patch=patch, value="hello")
    assert annotations_of(patch) == {f"{PREFIX}/my-dummy": "hello", MARKER: "yes"}


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_touching_with_the_same_value_does_nothing(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX, touch_key="my-dummy")
    patch = Patch()
    body = Body({"metadata": {"annotations": {f"{PREFIX}/my-dummy": "hello"}}})
    storage.touch(body=body, patch=patch, value="hello")
    assert not patch


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_touching_with_none_when_absent_does_nothing(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX, touch_key="my-dummy")
    patch = Patch()
    storage.touch(body=Body({}), patch=patch, value=None)
    assert not patch


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_touching_with_none_when_present_removes_it(cls: type[Any]) -> None:
    storage = cls(prefix=PREFIX, touch_key="my-dummy")
    patch = Patch()
    body = Body({"metadata": {"annotations": {f"{PREFIX}/my-dummy": "x", MARKER: "yes"}}})
    storage.touch(body=body, patch=patch, value=None)
    assert patch == {"metadata": {"annotations": {f"{PREFIX}/my-dummy": None}}}


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_default_touch_dummy_key(cls: type[Any]) -> None:
    storage = cls()
    patch = Patch()
    storage.touch(body=Body({}), patch=patch, value="2020-01-01T00:00:00.000000+00:00")
    assert patch == {
        "metadata": {
            "annotations": {"kopf.zalando.org/touch-dummy": "2020-01-01T00:00:00.000000+00:00"}
        }
    }


@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_annotations_keys_for_replicasets_of_deployments(cls: type[Any]) -> None:
    storage = cls()
    body = Body({"kind": "ReplicaSet", "metadata": {"ownerReferences": [{"kind": "Deployment"}]}})
    patch = Patch()
    storage.store(body=body, patch=patch, key=HandlerId("fn"), record=RECORD_2)
    storage.touch(body=body, patch=patch, value="t")
    assert annotations_of(patch) == {
        "kopf.zalando.org/fn-ofDRS": JSON_2_COMPACT,
        "kopf.zalando.org/touch-dummy-ofDRS": "t",
    }
    stored = Body({**body.raw, "metadata": {**body.raw["metadata"], **patch["metadata"]}})
    assert storage.fetch(body=stored, key=HandlerId("fn")) == RECORD_2
    # A record copied by Kubernetes from the owning Deployment is not the ReplicaSet's own:
    drs = Body(
        {
            "kind": "ReplicaSet",
            "metadata": {
                "ownerReferences": [{"kind": "Deployment"}],
                "annotations": {"kopf.zalando.org/fn": JSON_1_COMPACT},
            },
        }
    )
    assert storage.fetch(body=drs, key=HandlerId("fn")) is None


# ------------------------------------------------------------------ keys hashed the same everywhere

HASHED_KEYS = [
    pytest.param(PREFIX, "a_b.c-d/e", f"{PREFIX}/a_b.c-d.e", id="replacements"),
    pytest.param(PREFIX, "x" * 40, f"{PREFIX}/" + "x" * 32 + "-tEokcg", id="v1-x40"),
    pytest.param(PREFIX, "x" * 40, f"{PREFIX}/" + "x" * 40, id="v2-x40"),
    pytest.param(PREFIX, "x" * 64, f"{PREFIX}/" + "x" * 56 + "-SItAqA", id="v2-x64"),
    pytest.param(PREFIX, "fn" * 323, f"{PREFIX}/" + "fn" * 16 + "-Az-r.g", id="v1-altchars"),
    pytest.param(PREFIX, "fn" * 323, f"{PREFIX}/" + "fn" * 28 + "-Az-r.g", id="v2-altchars"),
]


@pytest.mark.parametrize(("prefix", "key", "expected"), HASHED_KEYS)
@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_keys_hashed_on_fetching(cls: type[Any], prefix: str, key: str, expected: str) -> None:
    storage = cls(prefix=prefix)
    body = Body({"metadata": {"annotations": {expected: JSON_2_COMPACT}}})
    assert storage.fetch(body=body, key=HandlerId(key)) == RECORD_2


@pytest.mark.parametrize(("prefix", "key", "expected"), HASHED_KEYS)
@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_keys_hashed_on_storing(cls: type[Any], prefix: str, key: str, expected: str) -> None:
    storage = cls(prefix=prefix)
    patch = Patch()
    body = Body({"metadata": {"annotations": {expected: "null"}}})
    storage.store(body=body, patch=patch, key=HandlerId(key), record=RECORD_2)
    assert annotations_of(patch)[expected] == JSON_2_COMPACT


@pytest.mark.parametrize(("prefix", "key", "expected"), HASHED_KEYS)
@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_keys_hashed_on_purging(cls: type[Any], prefix: str, key: str, expected: str) -> None:
    storage = cls(prefix=prefix)
    patch = Patch()
    body = Body({"metadata": {"annotations": {expected: "null"}}})
    storage.purge(body=body, patch=patch, key=HandlerId(key))
    assert annotations_of(patch) == {expected: None}


@pytest.mark.parametrize(("prefix", "key", "expected"), HASHED_KEYS)
@pytest.mark.parametrize("cls", ANNOTATIONS_STORAGES)
def test_keys_hashed_on_touching(cls: type[Any], prefix: str, key: str, expected: str) -> None:
    storage = cls(prefix=prefix, touch_key=key)
    patch = Patch()
    storage.touch(body=Body({}), patch=patch, value="irrelevant")
    assert annotations_of(patch)[expected] == "irrelevant"


# ------------------------------------------------------------------ status


@pytest.mark.parametrize("cls", STATUS_READING_STORAGES)
def test_fetching_from_status(cls: type[Any]) -> None:
    storage = cls(field="status.my-op")
    body = Body({"status": {"my-op": {"id1": dict(RECORD_1), "id2": dict(RECORD_2)}}})
    assert storage.fetch(body=body, key=HandlerId("id1")) == RECORD_1
    assert storage.fetch(body=body, key=HandlerId("id2")) == RECORD_2
    assert storage.fetch(body=body, key=HandlerId("id3")) is None


@pytest.mark.parametrize("cls", STATUS_READING_STORAGES)
def test_fetching_from_the_default_legacy_status(cls: type[Any]) -> None:
    body = Body({"status": {"kopf": {"progress": {"create_fn/item1": {"success": True}}}}})
    assert cls().fetch(body=body, key=HandlerId("create_fn/item1")) == {"success": True}


@pytest.mark.parametrize("cls", STATUS_READING_STORAGES)
@pytest.mark.parametrize(
    "status",
    [
        {"kopf": "corrupted"},
        {"kopf": {"progress": "corrupted"}},
        {"kopf": {"progress": {"id1": "corrupted"}}},
        {"kopf": {"progress": {"id1": None}}},
    ],
)
def test_fetching_corrupted_status_gives_none(cls: type[Any], status: dict[str, Any]) -> None:
    assert cls().fetch(body=Body({"status": status}), key=HandlerId("id1")) is None


def test_storing_to_status() -> None:
    storage = StatusProgressStorage(field="status.my-op")
    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=RECORD_1)
    storage.store(body=Body({}), patch=patch, key=HandlerId("fn/sub.x"), record=RECORD_2)
    # Nones stay: in a merge-patch they delete stale fields of an older record.
    assert patch == {"status": {"my-op": {"id1": dict(RECORD_1), "fn/sub.x": dict(RECORD_2)}}}


def test_storing_to_status_overwrites_pending_content() -> None:
    storage = StatusProgressStorage(field="status.my-op")
    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=RECORD_1)
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=RECORD_2)
    assert patch == {"status": {"my-op": {"id1": dict(RECORD_2)}}}


def test_storing_to_status_what_is_already_there_patches_nothing() -> None:
    storage = StatusProgressStorage()
    stored = {k: v for k, v in RECORD_1.items() if v is not None}
    body = Body({"status": {"kopf": {"progress": {"id1": stored}}}})
    patch = Patch()
    storage.store(body=body, patch=patch, key=HandlerId("id1"), record=RECORD_1)
    assert not patch


@pytest.mark.parametrize("cls", STATUS_READING_STORAGES)
def test_purging_status_nullifies_present_records(cls: type[Any]) -> None:
    storage = cls(field="status.my-op")
    body = Body({"status": {"my-op": {"id1": dict(RECORD_1)}}})
    patch = Patch()
    storage.purge(body=body, patch=patch, key=HandlerId("id1"))
    assert patch == {"status": {"my-op": {"id1": None}}}


def test_purging_status_cancels_a_pending_write() -> None:
    storage = StatusProgressStorage()
    patch = Patch({"status": {"kopf": {"progress": {"id1": {"retries": 5}}}}})
    storage.purge(body=Body({}), patch=patch, key=HandlerId("id1"))
    assert patch == {}


@pytest.mark.parametrize(
    "body_data",
    [pytest.param({}, id="absent"), pytest.param({"status": {"my-dummy": "old"}}, id="present")],
)
def test_touching_status_with_a_value(body_data: dict[str, Any]) -> None:
    storage = StatusProgressStorage(touch_field="status.my-dummy")
    patch = Patch()
    storage.touch(body=Body(body_data), patch=patch, value="hello")
    assert patch == {"status": {"my-dummy": "hello"}}


def test_touching_status_with_none() -> None:
    storage = StatusProgressStorage(touch_field="status.my-dummy")
    absent, present = Patch(), Patch()
    storage.touch(body=Body({}), patch=absent, value=None)
    storage.touch(body=Body({"status": {"my-dummy": "x"}}), patch=present, value=None)
    assert absent == {}
    assert present == {"status": {"my-dummy": None}}


# ------------------------------------------------------------------ smart: annotations + old status


def test_smart_storage_never_writes_status() -> None:
    storage = SmartProgressStorage()
    patch = Patch()
    body = Body({"status": {"kopf": {"progress": {"id1": {"retries": 1}}, "dummy": "x"}}})
    storage.store(body=body, patch=patch, key=HandlerId("id1"), record=RECORD_2)
    storage.touch(body=body, patch=patch, value="hello")
    assert "status" not in patch
    assert annotations_of(patch) == {
        "kopf.zalando.org/id1": JSON_2_COMPACT,
        "kopf.zalando.org/touch-dummy": "hello",
    }


def test_smart_storage_prefers_annotations_over_status() -> None:
    storage = SmartProgressStorage()
    body = Body(
        {
            "metadata": {"annotations": {"kopf.zalando.org/id1": JSON_2_COMPACT}},
            "status": {"kopf": {"progress": {"id1": {"retries": 1}, "id2": {"retries": 2}}}},
        }
    )
    assert storage.fetch(body=body, key=HandlerId("id1")) == RECORD_2
    assert storage.fetch(body=body, key=HandlerId("id2")) == {"retries": 2}


def test_smart_storage_purges_both_places() -> None:
    storage = SmartProgressStorage()
    body = Body(
        {
            "metadata": {"annotations": {"kopf.zalando.org/id1": JSON_2_COMPACT}},
            "status": {"kopf": {"progress": {"id1": {"retries": 1}}}},
        }
    )
    patch = Patch()
    storage.purge(body=body, patch=patch, key=HandlerId("id1"))
    assert patch == {
        "metadata": {"annotations": {"kopf.zalando.org/id1": None}},
        "status": {"kopf": {"progress": {"id1": None}}},
    }


# ------------------------------------------------------------------ multi


def test_multi_storage_reads_the_first_found_and_writes_all() -> None:
    storage = MultiProgressStorage(
        [
            AnnotationsProgressStorage(prefix=PREFIX),
            StatusProgressStorage(field="status.my-op"),
        ]
    )
    only_status = Body({"status": {"my-op": {"id1": {"retries": 1}}}})
    both = Body(
        {
            "metadata": {"annotations": {f"{PREFIX}/id1": JSON_2_COMPACT}},
            "status": {"my-op": {"id1": {"retries": 1}}},
        }
    )
    assert storage.fetch(body=only_status, key=HandlerId("id1")) == {"retries": 1}
    assert storage.fetch(body=both, key=HandlerId("id1")) == RECORD_2
    assert storage.fetch(body=Body({}), key=HandlerId("id1")) is None

    patch = Patch()
    storage.store(body=Body({}), patch=patch, key=HandlerId("id1"), record=RECORD_2)
    storage.touch(body=Body({}), patch=patch, value="t")
    assert patch == {
        "metadata": {
            "annotations": {
                f"{PREFIX}/id1": JSON_2_COMPACT,
                MARKER: "yes",
                f"{PREFIX}/touch-dummy": "t",
            }
        },
        "status": {"my-op": {"id1": dict(RECORD_2)}, "kopf": {"dummy": "t"}},
    }

    purge_patch = Patch()
    storage.purge(body=both, patch=purge_patch, key=HandlerId("id1"))
    assert purge_patch == {
        "metadata": {"annotations": {f"{PREFIX}/id1": None}},
        "status": {"my-op": {"id1": None}},
    }


def test_multi_storage_flushes_all() -> None:
    flushed: list[str] = []

    class Recording(StatusProgressStorage):
        def flush(self) -> None:
            flushed.append(self.field[-1])

    storage = MultiProgressStorage([Recording(field="status.a"), Recording(field="status.b")])
    storage.flush()
    assert flushed == ["a", "b"]


# ------------------------------------------------------------------ clearing essences


def test_clearing_by_annotations_storage_removes_the_whole_prefix() -> None:
    storage = AnnotationsProgressStorage(prefix=PREFIX)
    essence: dict[str, Any] = {
        "spec": {"x": 1},
        "metadata": {"annotations": {f"{PREFIX}/fn": "{}", MARKER: "yes", "other/fn": "v"}},
    }
    cleared = storage.clear(essence=essence)
    assert cleared == {"spec": {"x": 1}, "metadata": {"annotations": {"other/fn": "v"}}}
    assert f"{PREFIX}/fn" in essence["metadata"]["annotations"]  # the original is intact


def test_clearing_by_annotations_storage_drops_emptied_stanzas() -> None:
    storage = AnnotationsProgressStorage()
    essence = {"spec": {}, "metadata": {"annotations": {"kopf.zalando.org/fn": "{}"}}}
    assert storage.clear(essence=essence) == {"spec": {}}


def test_clearing_by_status_storage_removes_its_field() -> None:
    storage = StatusProgressStorage()
    essence = {"spec": {"x": 1}, "status": {"kopf": {"progress": {"fn": {}}}}}
    assert storage.clear(essence=essence) == {"spec": {"x": 1}}
    kept = {"status": {"kopf": {"progress": {"fn": {}}, "other": 1}, "x": 2}}
    assert storage.clear(essence=kept) == {"status": {"kopf": {"other": 1}, "x": 2}}
    assert storage.clear(essence={"status": {"kopf": "str"}}) == {"status": {"kopf": "str"}}


def test_clearing_by_smart_storage_removes_both() -> None:
    storage = SmartProgressStorage()
    essence = {
        "spec": {"x": 1},
        "metadata": {"annotations": {"kopf.zalando.org/fn": "{}"}},
        "status": {"kopf": {"progress": {"fn": {}}}},
    }
    assert storage.clear(essence=essence) == {"spec": {"x": 1}}


def test_clearing_by_smart_storage_leaves_the_given_essence_intact() -> None:
    essence: dict[str, Any] = {
        "spec": {"deep": {"x": 1}},
        "metadata": {"annotations": {"kopf.zalando.org/fn": "{}", "other/a": "b"}},
        "status": {"kopf": {"progress": {"fn": {}}}},
    }
    original = json.loads(json.dumps(essence))
    cleared = SmartProgressStorage().clear(essence=essence)
    assert cleared == {"spec": {"deep": {"x": 1}}, "metadata": {"annotations": {"other/a": "b"}}}
    assert essence == original
    cleared["spec"]["deep"]["x"] = 2
    assert essence == original


def test_clearing_by_multi_storage_asks_storages_with_their_own_clear() -> None:
    class Hiding(AnnotationsProgressStorage):
        def clear(self, *, essence: dict[str, Any]) -> dict[str, Any]:
            essence = super().clear(essence=essence)
            essence.get("spec", {}).pop("hidden", None)
            return essence

    storage = MultiProgressStorage([Hiding(), StatusProgressStorage()])
    essence = {
        "spec": {"x": 1, "hidden": 2},
        "metadata": {"annotations": {"kopf.zalando.org/fn": "{}"}},
        "status": {"kopf": {"progress": {"fn": {}}}},
    }
    assert storage.clear(essence=essence) == {"spec": {"x": 1}}
    assert essence["spec"] == {"x": 1, "hidden": 2}


def test_base_clear_is_a_deep_copy() -> None:
    class Minimal(ProgressStorage):
        def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
            return None

        def store(
            self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch
        ) -> None:
            pass

        def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
            pass

        def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
            pass

    essence = {"spec": {"deep": {"x": 1}}}
    cleared = Minimal().clear(essence=essence)
    assert cleared == essence
    assert cleared["spec"]["deep"] is not essence["spec"]["deep"]


def test_json_matches_the_standard_library_compact_form() -> None:
    # The exact bytes are json.dumps(..., separators=(",", ":")) with non-ASCII escaped.
    storage = AnnotationsProgressStorage()
    patch = Patch()
    record = ProgressRecord(message='ошибка "quoted"', retries=1)
    storage.store(body=Body({}), patch=patch, key=HandlerId("fn"), record=record)
    encoded = annotations_of(patch)["kopf.zalando.org/fn"]
    assert encoded == json.dumps(
        {"message": 'ошибка "quoted"', "retries": 1}, separators=(",", ":")
    )
    assert encoded.isascii()


def _legacy_and_annotated_essence() -> dict[str, Any]:
    return {
        "spec": {"deep": {"x": 1}, "items": [1, {"y": 2}]},
        "metadata": {"annotations": {"kopf.zalando.org/fn": "{}", "other/a": "b"}},
        "status": {"kopf": {"progress": {"fn": {}}, "other": 1}},
    }


@pytest.mark.parametrize(
    "storage",
    [
        SmartProgressStorage(),
        AnnotationsProgressStorage(),
        StatusProgressStorage(),
        MultiProgressStorage([AnnotationsProgressStorage(), StatusProgressStorage()]),
    ],
    ids=["smart", "annotations", "status", "multi"],
)
def test_clearing_an_owned_essence_in_place_gives_what_clear_gives(
    storage: ProgressStorage,
) -> None:
    expected = storage.clear(essence=_legacy_and_annotated_essence())
    assert clear_owned(storage, _legacy_and_annotated_essence()) == expected


def test_clearing_an_owned_essence_asks_a_storage_with_its_own_clear() -> None:
    class Hiding(AnnotationsProgressStorage):
        def clear(self, *, essence: dict[str, Any]) -> dict[str, Any]:
            essence = super().clear(essence=essence)
            essence.get("spec", {}).pop("deep", None)
            return essence

    for storage in (Hiding(), MultiProgressStorage([Hiding(), StatusProgressStorage()])):
        cleared = clear_owned(storage, _legacy_and_annotated_essence())
        assert "deep" not in cleared["spec"]
        assert "kopf.zalando.org/fn" not in cleared.get("metadata", {}).get("annotations", {})
