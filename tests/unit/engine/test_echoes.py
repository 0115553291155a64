"""When the echo of the operator's own write is known to be a no-op for the change handling."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from trioperator._engine.diffbase import (
    AnnotationsDiffBaseStorage,
    DiffBaseStorage,
    StatusDiffBaseStorage,
)
from trioperator._engine.echoes import echo_is_noop
from trioperator._engine.patches import Patch
from trioperator._engine.progress import (
    AnnotationsProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
)

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
PROGRESS = "kopf.zalando.org/create_fn"

BEFORE: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {
        "name": "obj",
        "namespace": "ns",
        "resourceVersion": "10",
        "labels": {"app": "x"},
        "annotations": {"user.example.com/note": "hi"},
    },
    "spec": {"field": "value"},
}


def settled_patch() -> Patch:
    """What a finished creation writes: the result, the diff-base, the progress purged."""
    patch = Patch()
    patch["status"] = {"create_fn": {"message": "hello"}}
    patch["metadata"] = {"annotations": {DIFFBASE: '{"spec":{"field":"value"}}\n', PROGRESS: None}}
    return patch


def written(before: dict[str, Any], patch: Patch, **changes: Any) -> dict[str, Any]:
    """The API server's answer: ``before`` with the patch (merged one level deep), new version."""
    body = copy.deepcopy(before)
    body["metadata"]["resourceVersion"] = "11"
    body.setdefault("status", {}).update(copy.deepcopy(patch.get("status", {})))
    annotations = body["metadata"].setdefault("annotations", {})
    for key, value in (patch.get("metadata", {}).get("annotations") or {}).items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = body
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return body


def noop(
    patch: Patch,
    after: dict[str, Any] | None = None,
    *,
    before: dict[str, Any] = BEFORE,
    diffbase: DiffBaseStorage | None = None,
    progress: ProgressStorage | None = None,
    extra_fields: tuple[Any, ...] = (),
) -> bool:
    return echo_is_noop(
        before=before,
        patch=patch,
        written=after if after is not None else written(before, patch),
        diffbase=diffbase or AnnotationsDiffBaseStorage(),
        progress=progress or SmartProgressStorage(),
        extra_fields=extra_fields,
    )


def test_results_and_marks_alone_are_a_noop() -> None:
    assert noop(settled_patch())


def test_the_status_alone_is_a_noop() -> None:
    assert noop(Patch({"status": {"x": 1}}))


def test_the_status_diffbase_storage_is_a_noop_too() -> None:
    patch = Patch({"status": {"kopf": {"last-handled-configuration": "{}"}}})
    assert noop(patch, diffbase=StatusDiffBaseStorage())


@pytest.mark.parametrize(
    "patch",
    [
        Patch({"spec": {"field": "other"}}),
        Patch({"metadata": {"labels": {"app": "y"}}}),
        Patch({"metadata": {"finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}}),
        Patch({"metadata": {"annotations": {"user.example.com/note": "bye"}}}),
        Patch({"metadata": {"annotations": None}}),
    ],
    ids=["spec", "labels", "finalizers", "a-user-annotation", "all-annotations"],
)
def test_writes_of_what_the_essence_or_the_finalizer_reads_are_not(patch: Patch) -> None:
    assert not noop(patch)


def test_a_rewritten_user_annotation_is_not_even_with_the_same_value() -> None:
    # Conservative: an annotation that counts was written; whether it changed is not asked.
    assert not noop(Patch({"metadata": {"annotations": {"user.example.com/note": "hi"}}}))


@pytest.mark.parametrize(
    "change",
    [
        {"spec__field": "someone else's"},
        {"metadata__labels": {"app": "y"}},
        {"metadata__finalizers": ["other/finalizer"]},
        {"metadata__deletionTimestamp": "2026-11-27T00:00:00Z"},
        {"metadata__annotations": {"user.example.com/note": "changed", DIFFBASE: "{}"}},
        {"data": {"new": "field"}},
    ],
    ids=["spec", "labels", "finalizers", "deletion", "annotations", "a-new-top-level-field"],
)
def test_a_write_that_landed_on_a_newer_state_is_not(change: dict[str, Any]) -> None:
    # Someone else changed the object between our read and our write: the echo shows it.
    patch = settled_patch()
    assert not noop(patch, written(BEFORE, patch, **change))


def test_a_status_changed_by_someone_else_meanwhile_is_still_a_noop() -> None:
    patch = settled_patch()
    assert noop(patch, written(BEFORE, patch, status__phase="Running"))


def test_transformation_functions_are_not() -> None:
    patch = settled_patch()
    patch.fns.append(lambda body: body)
    assert not noop(patch, written(BEFORE, settled_patch()))


def test_fields_watched_by_handlers_are_not() -> None:
    assert not noop(Patch({"status": {"phase": "Running"}}), extra_fields=(("status", "phase"),))


def test_users_own_diffbase_storages_are_not() -> None:
    class MyStorage(AnnotationsDiffBaseStorage):
        pass

    assert not noop(settled_patch(), diffbase=MyStorage())


def test_a_marker_that_makes_other_annotations_drop_out_is_not() -> None:
    # Under a custom prefix, the marker makes the prefix Kopf-managed: its other annotations
    # leave the essence, which is a change of the essence.
    before = copy.deepcopy(BEFORE)
    before["metadata"]["annotations"]["my.example.com/other"] = "x"
    patch = Patch({"metadata": {"annotations": {"my.example.com/kopf-managed": "yes"}}})
    assert not noop(patch, before=before)


def test_annotations_of_a_custom_progress_prefix_are_a_noop() -> None:
    progress = AnnotationsProgressStorage(prefix="my.example.com")
    patch = Patch({"metadata": {"annotations": {"my.example.com/create_fn": '{"success":true}'}}})
    assert noop(patch, progress=progress)


def test_the_same_names_give_the_same_answer_with_other_values() -> None:
    # The answer for a set of names is kept: values must not leak into it.
    assert noop(settled_patch())
    patch = settled_patch()
    patch["metadata"]["annotations"][DIFFBASE] = '{"spec":{"field":"v2"}}\n'
    assert noop(patch)
    assert not noop(Patch({"metadata": {"annotations": {"user.example.com/note": "v3"}}}))


def test_replicasets_are_asked_with_their_owner() -> None:
    before = copy.deepcopy(BEFORE)
    before["kind"] = "ReplicaSet"
    before["metadata"]["ownerReferences"] = [{"kind": "Deployment", "name": "d", "uid": "u"}]
    assert noop(settled_patch(), before=before)
    patch = Patch({"metadata": {"annotations": {"user.example.com/note": "bye"}}})
    assert not noop(patch, before=before)
