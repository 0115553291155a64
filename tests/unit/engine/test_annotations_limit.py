"""The storages never grow an object's annotations past the API server's limit (256 KiB)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from trioperator._engine.bodies import Body
from trioperator._engine.conventions import ANNOTATIONS_LIMIT, annotations_size_after
from trioperator._engine.diffbase import AnnotationsDiffBaseStorage
from trioperator._engine.ids import HandlerId
from trioperator._engine.patches import Patch
from trioperator._engine.progress import AnnotationsProgressStorage, SmartProgressStorage

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
FALLBACK = "last-handled-configuration"


def body_with(filler: int, **extra: Any) -> Body:
    """An object whose other annotations take ``filler`` bytes (key and value)."""
    key = "example.com/filler"
    return Body(
        {
            "metadata": {
                "name": "big",
                "namespace": "ns",
                "annotations": {key: "x" * (filler - len(key))},
            },
            **extra,
        }
    )


def test_the_size_counts_keys_and_values_after_the_patch() -> None:
    body = Body({"metadata": {"annotations": {"a/b": "123", "c/d": "4567"}}})
    patch = {"metadata": {"annotations": {"c/d": None, "e/f": "8"}}}
    assert annotations_size_after(body=body, patch=patch, changes={"g/h": "90"}) == 6 + 4 + 5


def test_a_diffbase_that_fits_goes_to_the_annotations() -> None:
    storage = AnnotationsDiffBaseStorage()
    body = body_with(ANNOTATIONS_LIMIT - 1000)
    patch = Patch()
    storage.store(body=body, patch=patch, essence={"spec": {"a": 1}})
    assert patch["metadata"]["annotations"][DIFFBASE] == '{"spec":{"a":1}}\n'
    assert "status" not in patch


def test_a_diffbase_over_the_limit_goes_to_the_status_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage = AnnotationsDiffBaseStorage()
    body = body_with(ANNOTATIONS_LIMIT - 100)
    patch = Patch()
    essence = {"spec": {"a": "y" * 200}}
    with caplog.at_level(logging.WARNING, logger="trioperator"):
        storage.store(body=body, patch=patch, essence=essence)
    assert DIFFBASE not in patch.get("metadata", {}).get("annotations", {})
    assert json.loads(patch["status"]["kopf"][FALLBACK]) == essence
    assert "The diff-base of ns/big does not fit into its annotations" in caplog.text
    assert "stored in the status field status.kopf.last-handled-configuration" in caplog.text

    # And it is read from there, as from the annotation.
    stored = Body({**body, "status": patch["status"]})
    assert storage.fetch(body=stored) == essence


def test_an_oversized_diffbase_replaces_an_older_annotation() -> None:
    storage = AnnotationsDiffBaseStorage()
    body = body_with(ANNOTATIONS_LIMIT - 100)
    body.raw["metadata"]["annotations"][DIFFBASE] = '{"spec":{}}\n'
    patch = Patch()
    storage.store(body=body, patch=patch, essence={"spec": {"a": "y" * 200}})
    assert patch["metadata"]["annotations"][DIFFBASE] is None  # removed, not left stale


def test_progress_over_the_limit_is_kept_only_in_the_status_of_the_smart_storage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    record: Any = {"started": "2020-01-01T00:00:00.000000+00:00", "retries": 1, "message": "m"}
    body = body_with(ANNOTATIONS_LIMIT - 20)
    patch = Patch()
    with caplog.at_level(logging.WARNING, logger="trioperator"):
        SmartProgressStorage().store(key=HandlerId("fn"), record=record, body=body, patch=patch)
    assert "kopf.zalando.org/fn" not in patch.get("metadata", {}).get("annotations", {})
    assert patch["status"]["kopf"]["progress"]["fn"]["retries"] == 1
    assert "The progress of handler 'fn' does not fit into the annotations" in caplog.text

    patch = Patch()
    AnnotationsProgressStorage().store(
        key=HandlerId("fn"), record=record, body=body_with(1000), patch=patch
    )
    assert "kopf.zalando.org/fn" in patch["metadata"]["annotations"]  # it fits: stored
