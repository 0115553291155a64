"""Finalizers: presence checks, and adding/removing them as patch transformation functions."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from trioperator._engine.finalizers import (
    AddFinalizer,
    RemoveFinalizer,
    allow_deletion,
    block_deletion,
    is_deletion_blocked,
    is_deletion_ongoing,
)
from trioperator._engine.patches import Patch, build_json_patch
from trioperator._engine.settings import PersistenceSettings

FIN = "kopf.zalando.org/KopfFinalizerMarker"


def applied(body: dict[str, Any], patch: Patch) -> dict[str, Any]:
    """What the object becomes: the patch fns run on a copy, as the patch applier does."""
    result = copy.deepcopy(body)
    for fn in patch.fns:
        fn(result)
    return result


def test_default_finalizer_is_kopfs_fqdn() -> None:
    assert PersistenceSettings().finalizer == FIN


@pytest.mark.parametrize(
    ("expected", "body"),
    [
        pytest.param(True, {"metadata": {"deletionTimestamp": "2020-12-31T23:59:59Z"}}, id="time"),
        pytest.param(False, {"metadata": {"deletionTimestamp": None}}, id="none"),
        pytest.param(False, {"metadata": {}}, id="no-field"),
        pytest.param(False, {"metadata": None}, id="null-metadata"),
        pytest.param(False, {}, id="no-metadata"),
    ],
)
def test_is_deletion_ongoing(expected: bool, body: dict[str, Any]) -> None:
    assert is_deletion_ongoing(body) is expected
    assert is_deletion_ongoing(body=body) is expected


@pytest.mark.parametrize(
    ("expected", "body"),
    [
        pytest.param(False, {}, id="no-metadata"),
        pytest.param(False, {"metadata": {}}, id="no-finalizers"),
        pytest.param(False, {"metadata": {"finalizers": None}}, id="null"),
        pytest.param(False, {"metadata": {"finalizers": []}}, id="empty"),
        pytest.param(False, {"metadata": {"finalizers": ["other"]}}, id="others"),
        pytest.param(True, {"metadata": {"finalizers": [FIN]}}, id="normal"),
        pytest.param(True, {"metadata": {"finalizers": ["other", FIN]}}, id="mixed"),
    ],
)
def test_is_deletion_blocked(expected: bool, body: dict[str, Any]) -> None:
    assert is_deletion_blocked(body, FIN) is expected
    assert is_deletion_blocked(body=body, finalizer=FIN) is expected


# ------------------------------------------------------------------ blocking


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({}, {"metadata": {"finalizers": [FIN]}}, id="no-metadata"),
        pytest.param(
            {"metadata": {"name": "n"}},
            {"metadata": {"name": "n", "finalizers": [FIN]}},
            id="no-finalizers",
        ),
        pytest.param(
            {"metadata": {"finalizers": []}}, {"metadata": {"finalizers": [FIN]}}, id="empty"
        ),
        pytest.param(
            {"metadata": {"finalizers": ["other1", "other2"]}},
            {"metadata": {"finalizers": ["other1", "other2", FIN]}},
            id="others",
        ),
    ],
)
def test_blocking_appends_the_finalizer(body: dict[str, Any], expected: dict[str, Any]) -> None:
    patch = Patch()
    block_deletion(body=body, patch=patch, finalizer=FIN)
    assert dict(patch) == {}  # never a merge-patch: it would replace others' finalizers
    assert patch.fns == [AddFinalizer(FIN)]
    assert applied(body, patch) == expected


def test_blocking_when_present_does_nothing() -> None:
    patch = Patch()
    body = {"metadata": {"finalizers": ["other1", FIN, "other2"]}}
    block_deletion(body=body, patch=patch, finalizer=FIN)
    assert not patch


def test_blocking_twice_schedules_once() -> None:
    patch = Patch()
    block_deletion(body={}, patch=patch, finalizer=FIN)
    block_deletion(body={}, patch=patch, finalizer=FIN)
    assert patch.fns == [AddFinalizer(FIN)]
    assert applied({}, patch) == {"metadata": {"finalizers": [FIN]}}


def test_adding_fn_is_idempotent_on_a_fresher_body() -> None:
    # The fns run against the freshest body: someone may have added it meanwhile.
    body = {"metadata": {"finalizers": [FIN, "other"]}}
    result = copy.deepcopy(body)
    AddFinalizer(FIN)(result)
    AddFinalizer(FIN)(result)
    assert result == body


# ------------------------------------------------------------------ releasing


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            {"metadata": {"name": "n", "finalizers": [FIN]}},
            {"metadata": {"name": "n"}},
            id="only-ours-list-removed",
        ),
        pytest.param({"metadata": {"finalizers": [FIN]}}, {}, id="emptied-metadata-removed"),
        pytest.param(
            {"metadata": {"finalizers": ["other1", FIN, "other2"]}},
            {"metadata": {"finalizers": ["other1", "other2"]}},
            id="others-kept",
        ),
        pytest.param(
            {"metadata": {"finalizers": [FIN, "other", FIN]}},
            {"metadata": {"finalizers": ["other"]}},
            id="duplicates",
        ),
    ],
)
def test_allowing_removes_the_finalizer(body: dict[str, Any], expected: dict[str, Any]) -> None:
    patch = Patch()
    allow_deletion(body=body, patch=patch, finalizer=FIN)
    assert dict(patch) == {}
    assert patch.fns == [RemoveFinalizer(FIN)]
    assert applied(body, patch) == expected


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({}, id="no-metadata"),
        pytest.param({"metadata": {}}, id="no-finalizers"),
        pytest.param({"metadata": {"finalizers": ["other1", "other2"]}}, id="absent"),
    ],
)
def test_allowing_when_absent_does_nothing(body: dict[str, Any]) -> None:
    patch = Patch()
    allow_deletion(body=body, patch=patch, finalizer=FIN)
    assert not patch


def test_allowing_twice_schedules_once() -> None:
    patch = Patch()
    body = {"metadata": {"finalizers": [FIN]}}
    allow_deletion(body=body, patch=patch, finalizer=FIN)
    allow_deletion(body=body, patch=patch, finalizer=FIN)
    assert patch.fns == [RemoveFinalizer(FIN)]


@pytest.mark.parametrize(
    "fresher",
    [
        pytest.param({}, id="no-metadata"),
        pytest.param({"metadata": None}, id="null-metadata"),
        pytest.param({"metadata": {"finalizers": None}}, id="null-finalizers"),
        pytest.param({"metadata": {"finalizers": ["other"]}}, id="already-removed"),
    ],
)
def test_removing_fn_is_idempotent_on_a_fresher_body(fresher: dict[str, Any]) -> None:
    result = copy.deepcopy(fresher)
    RemoveFinalizer(FIN)(result)
    assert result == fresher


def test_fns_keep_other_patch_content_and_fns() -> None:
    def other_fn(body: dict[str, Any]) -> None:
        body.setdefault("spec", {})["x"] = 1

    patch = Patch({"status": {"a": 1}}, fns=[other_fn])
    block_deletion(body={}, patch=patch, finalizer=FIN)
    assert patch == {"status": {"a": 1}}
    assert patch.fns == [other_fn, AddFinalizer(FIN)]


# ------------------------------------------------------------------ the atomic JSON-patch


def test_removal_of_the_only_finalizer_amounts_to_removing_the_list() -> None:
    body = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {
            "name": "kopf-example-1",
            "resourceVersion": "1234567890",
            "deletionTimestamp": "2020-01-01T00:00:00Z",
            "finalizers": [FIN],
        },
    }
    patch = Patch()
    allow_deletion(body=body, patch=patch, finalizer=FIN)
    result = applied(body, patch)
    # No "finalizers": [] left: a JSON-patch diff then removes the whole list in one op.
    assert "finalizers" not in result["metadata"]
    assert result["metadata"] == {
        "name": "kopf-example-1",
        "resourceVersion": "1234567890",
        "deletionTimestamp": "2020-01-01T00:00:00Z",
    }

    ops = build_json_patch(body, patch.fns, resource_version="1234567890")
    assert ops == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "1234567890"},
        {"op": "remove", "path": "/metadata/finalizers"},
    ]
