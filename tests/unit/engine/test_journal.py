"""The journal of the body write in the status write (``_engine/journal.py``)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from trioperator._engine.diffbase import AnnotationsDiffBaseStorage, StatusDiffBaseStorage
from trioperator._engine.journal import annotation_prefixes, base_of, pending_write, prepare
from trioperator._engine.patches import Patch, apply_merge_patch
from trioperator._engine.progress import (
    AnnotationsProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)

PREFIXES = ("kopf.zalando.org/",)
DIFFBASE = "kopf.zalando.org/last-handled-configuration"
RECORD = "kopf.zalando.org/create_fn"


def body(**annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {
            "name": "kex",
            "namespace": "ns1",
            "generation": 1,
            "annotations": {"other.example.com/x": "y", **annotations},
        },
        "spec": {"field": "value"},
    }


def written(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The object after both writes of ``patch`` (the status part and the body part)."""
    return apply_merge_patch(obj, dict(patch))


def status_written(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The object after the status write only (the crash comes before the body write)."""
    return apply_merge_patch(obj, {"status": patch["status"]})


def test_prefixes_of_the_default_storages() -> None:
    assert annotation_prefixes(SmartProgressStorage(), AnnotationsDiffBaseStorage()) == PREFIXES
    assert annotation_prefixes(
        AnnotationsProgressStorage(prefix="my.example.com"), AnnotationsDiffBaseStorage()
    ) == ("my.example.com/", "kopf.zalando.org/")
    assert annotation_prefixes(StatusProgressStorage(), StatusDiffBaseStorage()) == ()


def test_a_status_and_a_body_write_get_the_journal_of_the_body_write() -> None:
    obj = body()
    patch = Patch({"status": {"create_fn": {"x": 1}}, "metadata": {"annotations": {DIFFBASE: "e"}}})
    prepare(obj, patch, PREFIXES)
    journal = patch["status"]["kopf"]["journal"]
    assert journal["base"] == base_of(obj, PREFIXES)
    assert json.loads(journal["patch"]) == {"metadata": patch["metadata"]}


def test_the_interrupted_write_is_found_and_completes_the_object() -> None:
    obj = body()
    patch = Patch(
        {
            "status": {"create_fn": {"x": 1}},
            "metadata": {"annotations": {DIFFBASE: "e", RECORD: None}, "labels": {"l": "v"}},
        }
    )
    prepare(obj, patch, PREFIXES)
    crashed = status_written(obj, copy.deepcopy(patch))
    missing = pending_write(crashed, PREFIXES)
    assert missing == {
        "metadata": {"annotations": {DIFFBASE: "e", RECORD: None}, "labels": {"l": "v"}}
    }
    completed = apply_merge_patch(crashed, missing)
    assert completed["metadata"] == written(obj, patch)["metadata"]


def test_a_landed_write_leaves_nothing_pending() -> None:
    obj = body()
    patch = Patch({"status": {"create_fn": {"x": 1}}, "metadata": {"annotations": {DIFFBASE: "e"}}})
    prepare(obj, patch, PREFIXES)
    assert pending_write(written(obj, copy.deepcopy(patch)), PREFIXES) is None


@pytest.mark.parametrize(
    "change",
    [
        {"annotations": {RECORD: '{"retries":1}'}},  # someone wrote the marks meanwhile
        {"generation": 2},  # the spec changed meanwhile
    ],
)
def test_a_journal_whose_base_moved_on_is_not_replayed(change: dict[str, Any]) -> None:
    obj = body()
    patch = Patch({"status": {"create_fn": {"x": 1}}, "metadata": {"annotations": {DIFFBASE: "e"}}})
    prepare(obj, patch, PREFIXES)
    crashed = status_written(obj, copy.deepcopy(patch))
    crashed = apply_merge_patch(crashed, {"metadata": change})
    assert pending_write(crashed, PREFIXES) is None


def test_other_annotations_do_not_move_the_base() -> None:
    obj = body()
    patch = Patch({"status": {"create_fn": {"x": 1}}, "metadata": {"annotations": {DIFFBASE: "e"}}})
    prepare(obj, patch, PREFIXES)
    crashed = status_written(obj, copy.deepcopy(patch))
    crashed = apply_merge_patch(
        crashed, {"metadata": {"annotations": {"other.example.com/x": "z"}}}
    )
    assert pending_write(crashed, PREFIXES) is not None


def test_no_journal_without_a_body_write_of_the_marks() -> None:
    obj = body()
    only_status = Patch({"status": {"create_fn": {"x": 1}}})
    prepare(obj, only_status, PREFIXES)
    assert only_status == {"status": {"create_fn": {"x": 1}}}
    # A body write of other things (e.g. a resume handler's label) needs none either: a crash
    # before it repeats such a handler, as at every restart anyway.
    labels = Patch({"status": {"create_fn": {"x": 1}}, "metadata": {"labels": {"l": "v"}}})
    prepare(obj, labels, PREFIXES)
    assert "kopf" not in labels["status"]
    # A value that is there already is no change.
    same = Patch({"status": {"a": 1}, "metadata": {"annotations": {DIFFBASE: "e"}}})
    prepare(body(**{DIFFBASE: "e"}), same, PREFIXES)
    assert "kopf" not in same["status"]


def test_no_journal_without_annotation_storages() -> None:
    obj = body()
    patch = Patch({"status": {"create_fn": {"x": 1}}, "metadata": {"annotations": {DIFFBASE: "e"}}})
    prepare(obj, patch, ())
    assert "kopf" not in patch["status"]


def test_a_status_write_removes_an_earlier_journal() -> None:
    obj = body()
    first = Patch({"status": {"a": 1}, "metadata": {"annotations": {DIFFBASE: "e"}}})
    prepare(obj, first, PREFIXES)
    obj = written(obj, first)
    second = Patch({"status": {"b": 2}})
    prepare(obj, second, PREFIXES)
    assert second["status"]["kopf"] == {"journal": None}


def test_a_body_write_alone_leaves_an_earlier_journal_that_stays_stale() -> None:
    obj = body()
    first = Patch({"status": {"a": 1}, "metadata": {"annotations": {RECORD: '{"retries":1}'}}})
    prepare(obj, first, PREFIXES)
    obj = written(obj, first)
    second = Patch({"metadata": {"annotations": {DIFFBASE: "e", RECORD: None}}})
    prepare(obj, second, PREFIXES)
    assert "status" not in second  # no extra write: the marks do not return to the base
    assert pending_write(written(obj, second), PREFIXES) is None


def test_a_body_write_that_returns_the_marks_to_the_base_removes_the_journal() -> None:
    # E.g. a resume over two cycles: records written with a result, then purged at the end.
    obj = body(**{DIFFBASE: "e"})
    first = Patch({"status": {"a": 1}, "metadata": {"annotations": {RECORD: '{"retries":1}'}}})
    prepare(obj, first, PREFIXES)
    obj = written(obj, first)
    second = Patch({"metadata": {"annotations": {RECORD: None}}})
    prepare(obj, second, PREFIXES)
    assert second["status"] == {"kopf": {"journal": None}}
    assert pending_write(written(obj, second), PREFIXES) is None


def test_removing_all_annotations_counts_as_a_change_of_the_marks() -> None:
    obj = body(**{DIFFBASE: "e"})
    patch = Patch({"status": {"a": 1}, "metadata": {"annotations": None}})
    prepare(obj, patch, PREFIXES)
    assert json.loads(patch["status"]["kopf"]["journal"]["patch"]) == {
        "metadata": {"annotations": None}
    }


@pytest.mark.parametrize(
    "journal",
    [None, "text", {"base": "x"}, {"base": "x", "patch": "text"}, {"patch": "{}"}],
)
def test_broken_journals_are_ignored(journal: Any) -> None:
    obj = body()
    obj["status"] = {"kopf": {"journal": journal}}
    assert pending_write(obj, PREFIXES) is None
