"""The cause matrix: every combination of the inputs, against Kopf's decision order.

Each test below owns a disjoint slice of the matrix (the conditions of all earlier rules are
false in it), and the slices together cover every combination; ``test_the_matrix_is_covered``
checks that.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from typing import Any

import pytest
from trioperator._client.resources import Resource
from trioperator._engine.bodies import Body
from trioperator._engine.causes import (
    ChangingCause,
    IndexingCause,
    SpawningCause,
    WatchingCause,
    cause_initial,
    detect_changing_cause,
    is_deletion_blocked,
    is_deletion_ongoing,
)
from trioperator._engine.diffs import EMPTY, Diff, diff
from trioperator._engine.patches import Patch
from trioperator._engine.reasons import Reason

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"

EVENT_TYPES = ["ADDED", "MODIFIED", "DELETED", None, "FORWARD-COMPATIBILITY-PSEUDO-EVENT"]
NON_DELETED_TYPES = [t for t in EVENT_TYPES if t != "DELETED"]
FINALIZERS = {  # how "our finalizer present" looks on the object
    "ours": [FINALIZER],
    "ours-among-others": ["other/finalizer", FINALIZER],
    "none": None,
    "empty": [],
    "others-only": ["other/finalizer"],
}
OURS = ["ours", "ours-among-others"]
NOT_OURS = ["none", "empty", "others-only"]
DELETION = [True, False]
OLD = {"present": {"spec": {"field": "old"}}, "absent": None}
DIFFS = {"empty": EMPTY, "none": None, "non-empty": diff({"a": 1}, {"a": 2})}
INITIAL = [True, False]

# Every slice of the matrix that a test below is parametrised with, in file order.
_SLICES: list[list[tuple[Any, ...]]] = []


def _detect(
    event_type: str | None, finalizers: str, deletion: bool, old: str, d: str, initial: bool
) -> Reason:
    metadata: dict[str, Any] = {"name": "kex", "resourceVersion": "1"}
    if FINALIZERS[finalizers] is not None:
        metadata["finalizers"] = FINALIZERS[finalizers]
    if deletion:
        metadata["deletionTimestamp"] = "2020-12-31T23:59:59Z"
    return detect_changing_cause(
        event_type=event_type,
        body=Body({"metadata": metadata, "spec": {"field": "new"}}),
        old=OLD[old],
        new={"spec": {"field": "new"}},
        diff=DIFFS[d],
        initial=initial,
        finalizer=FINALIZER,
    )


def _cases(*axes: list[Any]) -> list[tuple[Any, ...]]:
    cases = list(itertools.product(*axes))
    _SLICES.append(cases)
    return cases


AXES = ("event_type", "finalizers", "deletion", "old", "d", "initial")


@pytest.mark.parametrize(
    AXES, _cases(["DELETED"], list(FINALIZERS), DELETION, list(OLD), list(DIFFS), INITIAL)
)
def test_gone_on_deleted_events_regardless_of_anything(
    event_type: str | None, finalizers: str, deletion: bool, old: str, d: str, initial: bool
) -> None:
    assert _detect(event_type, finalizers, deletion, old, d, initial) == Reason.GONE


@pytest.mark.parametrize(
    AXES, _cases(NON_DELETED_TYPES, NOT_OURS, [True], list(OLD), list(DIFFS), INITIAL)
)
def test_free_when_deleted_but_not_blocked_by_us(
    event_type: str | None, finalizers: str, deletion: bool, old: str, d: str, initial: bool
) -> None:
    assert _detect(event_type, finalizers, deletion, old, d, initial) == Reason.FREE


@pytest.mark.parametrize(
    AXES, _cases(NON_DELETED_TYPES, OURS, [True], list(OLD), list(DIFFS), INITIAL)
)
def test_delete_when_deleted_and_blocked_by_us(
    event_type: str | None, finalizers: str, deletion: bool, old: str, d: str, initial: bool
) -> None:
    assert _detect(event_type, finalizers, deletion, old, d, initial) == Reason.DELETE


@pytest.mark.parametrize(
    AXES, _cases(NON_DELETED_TYPES, list(FINALIZERS), [False], ["absent"], list(DIFFS), INITIAL)
)
def test_create_when_never_handled_even_on_initial_listing(
    event_type: str | None, finalizers: str, deletion: bool, old: str, d: str, initial: bool
) -> None:
    assert _detect(event_type, finalizers, deletion, old, d, initial) == Reason.CREATE


@pytest.mark.parametrize(
    AXES,
    _cases(NON_DELETED_TYPES, list(FINALIZERS), [False], ["present"], ["empty", "none"], [True]),
)
def test_resume_when_unchanged_and_initial(
    event_type: str | None, finalizers: str, deletion: bool, old: str, d: str, initial: bool
) -> None:
    assert _detect(event_type, finalizers, deletion, old, d, initial) == Reason.RESUME


@pytest.mark.parametrize(
    AXES,
    _cases(NON_DELETED_TYPES, list(FINALIZERS), [False], ["present"], ["empty", "none"], [False]),
)
def test_noop_when_unchanged_and_not_initial(
    event_type: str | None, finalizers: str, deletion: bool, old: str, d: str, initial: bool
) -> None:
    assert _detect(event_type, finalizers, deletion, old, d, initial) == Reason.NOOP


@pytest.mark.parametrize(
    AXES, _cases(NON_DELETED_TYPES, list(FINALIZERS), [False], ["present"], ["non-empty"], INITIAL)
)
def test_update_when_changed_initial_or_not(
    event_type: str | None, finalizers: str, deletion: bool, old: str, d: str, initial: bool
) -> None:
    assert _detect(event_type, finalizers, deletion, old, d, initial) == Reason.UPDATE


def test_the_matrix_is_covered_by_disjoint_slices() -> None:
    # The slices are recorded when the module is imported, so -k or xdist cannot shrink them.
    everything = set(itertools.product(EVENT_TYPES, FINALIZERS, DELETION, OLD, DIFFS, INITIAL))
    covered = [case for cases in _SLICES for case in cases]
    assert len(covered) == len(set(covered)), "two tests claim the same combination"
    assert set(covered) == everything


def test_unknown_event_types_behave_like_modified() -> None:
    for case in itertools.product(FINALIZERS, DELETION, OLD, DIFFS, INITIAL):
        assert _detect("SOMETHING-NEW", *case) == _detect("MODIFIED", *case)


def test_a_raw_dict_body_works_too() -> None:
    reason = detect_changing_cause(
        event_type="MODIFIED",
        body={"metadata": {"deletionTimestamp": "x", "finalizers": [FINALIZER]}},
        old=None,
        new=None,
        diff=EMPTY,
        initial=False,
        finalizer=FINALIZER,
    )
    assert reason == Reason.DELETE


def test_a_null_deletion_timestamp_is_no_deletion() -> None:
    body = Body({"metadata": {"deletionTimestamp": None, "finalizers": None}})
    assert not is_deletion_ongoing(body)
    assert not is_deletion_blocked(body, FINALIZER)
    assert not is_deletion_ongoing(Body({}))
    assert not is_deletion_blocked(Body({"metadata": None}), FINALIZER)


@pytest.mark.parametrize("reason", list(Reason))
@pytest.mark.parametrize("initial", [True, False])
def test_creation_never_mixes_with_resuming(reason: Reason, initial: bool) -> None:
    expected = False if reason == Reason.CREATE else initial
    assert cause_initial(reason, initial) is expected


# ------------------------------------------------------------------ cause dataclasses & kwargs


RESOURCE = Resource(group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample")
LOGGER = logging.getLogger("test")
RAW = {
    "metadata": {
        "uid": "uid1",
        "name": "kex",
        "namespace": "ns",
        "labels": {"l": "v"},
        "annotations": {"a": "v"},
    },
    "spec": {"field": 1},
    "status": {"s": 2},
}


def _common(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(
        logger=LOGGER,
        memo={"m": 1},
        indices={"idx": {"k": "v"}},
        resource=RESOURCE,
        patch=Patch(),
        body=Body(RAW),
    )
    kwargs.update(overrides)
    return kwargs


def test_resource_kwargs_of_all_causes() -> None:
    d = Diff([("change", ("spec", "field"), 0, 1)])
    causes = [
        WatchingCause(**_common(), type="ADDED", event={"type": "ADDED", "object": RAW}),
        IndexingCause(**_common()),
        SpawningCause(**_common(), reset=True),
        ChangingCause(**_common(), reason=Reason.UPDATE, initial=True, diff=d, old={}, new=RAW),
    ]
    for cause in causes:
        kwargs = cause.kwargs
        assert kwargs["logger"] is LOGGER
        assert kwargs["memo"] == {"m": 1}
        assert kwargs["resource"] is RESOURCE
        assert kwargs["patch"] is cause.patch
        assert kwargs["body"] is cause.body
        assert kwargs["spec"] == {"field": 1}
        assert kwargs["meta"]["name"] == "kex"
        assert kwargs["status"] == {"s": 2}
        assert (kwargs["uid"], kwargs["name"], kwargs["namespace"]) == ("uid1", "kex", "ns")
        assert kwargs["labels"] == {"l": "v"}
        assert kwargs["annotations"] == {"a": "v"}
        assert kwargs["idx"] == {"k": "v"}  # indices are spread into the kwargs
        assert "indices" not in kwargs
        assert "reset" not in kwargs
        assert "initial" not in kwargs


def test_specific_kwargs() -> None:
    event = {"type": "MODIFIED", "object": RAW}
    watching = WatchingCause(**_common(), type="MODIFIED", event=event)  # type: ignore[arg-type]
    assert watching.kwargs["type"] == "MODIFIED"
    assert watching.kwargs["event"] is event

    d = Diff([("add", ("spec",), None, {"field": 1})])
    changing = ChangingCause(**_common(), reason=Reason.CREATE, initial=False, diff=d, new=RAW)
    kwargs = changing.kwargs
    assert kwargs["reason"] == Reason.CREATE
    assert kwargs["diff"] == d
    assert kwargs["old"] is None
    assert kwargs["new"] is RAW


def test_changing_cause_defaults_and_deleted_flag() -> None:
    cause = ChangingCause(**_common(), reason=Reason.RESUME, initial=True)
    assert cause.diff == []
    assert cause.old is None
    assert cause.new is None
    assert not cause.deleted
    deleting = dataclasses.replace(
        cause, body=Body({"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"}})
    )
    assert deleting.deleted


def test_indices_override_framework_kwargs() -> None:
    cause = IndexingCause(**_common(indices={"name": "from-index"}))
    assert cause.kwargs["name"] == "from-index"


def test_causes_are_frozen() -> None:
    cause = SpawningCause(**_common(), reset=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cause.reset = True  # type: ignore[misc]


def test_kwargs_views_are_live() -> None:
    body = Body({"spec": {"field": 1}})
    cause = IndexingCause(**_common(body=body))
    spec = cause.kwargs["spec"]
    body.replace({"spec": {"field": 2}})
    assert spec == {"field": 2}
