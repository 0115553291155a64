"""``status.conditions`` by the Kubernetes API conventions (trioperator.conditions)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from trioperator import conditions
from trioperator._engine.patches import Patch

T1 = datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
T2 = T1 + datetime.timedelta(minutes=5)


def test_a_new_condition_has_every_field_and_the_transition_time() -> None:
    result = conditions.merge_condition(
        [], "Ready", True, reason="AllGood", message="fine", observed_generation=3, now=T1
    )
    assert result == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "AllGood",
            "message": "fine",
            "lastTransitionTime": "2024-01-02T03:04:05Z",
            "observedGeneration": 3,
        }
    ]


def test_the_transition_time_moves_only_when_the_status_changes() -> None:
    first = conditions.merge_condition([], "Ready", "False", reason="Waiting", now=T1)
    same = conditions.merge_condition(first, "Ready", "False", reason="StillWaiting", now=T2)
    assert same[0]["lastTransitionTime"] == "2024-01-02T03:04:05Z"
    assert same[0]["reason"] == "StillWaiting"
    flipped = conditions.merge_condition(same, "Ready", "True", reason="Done", now=T2)
    assert flipped[0]["lastTransitionTime"] == "2024-01-02T03:09:05Z"
    assert flipped[0]["status"] == "True"


def test_other_conditions_are_kept_in_order_and_duplicates_dropped() -> None:
    existing = [
        {"type": "A", "status": "True", "reason": "X", "lastTransitionTime": "t0"},
        {"type": "Ready", "status": "True", "reason": "X", "lastTransitionTime": "t0"},
        {"type": "Ready", "status": "False", "reason": "Dup", "lastTransitionTime": "t0"},
        {"type": "B", "status": "Unknown", "reason": "Y", "lastTransitionTime": "t0"},
    ]
    result = conditions.merge_condition(existing, "Ready", True, reason="Ok", now=T2)
    assert [c["type"] for c in result] == ["A", "Ready", "B"]
    assert result[1]["lastTransitionTime"] == "t0"  # the same status: kept
    assert result[0] == existing[0]


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("type", "not a type"),
        ("status", "yes"),
        ("reason", "two words"),
        ("reason", ""),
    ],
)
def test_invalid_values_are_refused_clearly(kind: str, value: str) -> None:
    args: dict[str, Any] = {"type": "Ready", "status": "True", "reason": "Ok"}
    args[kind] = value
    with pytest.raises(ValueError, match=kind):
        conditions.merge_condition([], args["type"], args["status"], reason=args["reason"], now=T1)


def test_set_condition_into_a_patch_builds_on_the_body_and_its_generation() -> None:
    body = {
        "metadata": {"name": "x", "generation": 7},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ok", "lastTransitionTime": "t0"},
                {"type": "Other", "status": "True", "reason": "Ok", "lastTransitionTime": "t0"},
            ]
        },
    }
    patch = Patch()
    conditions.set_condition(patch, "Ready", True, reason="StillOk", body=body, now=T2)
    conditions.set_condition(patch, "Degraded", False, reason="None", body=body, now=T2)
    written = patch["status"]["conditions"]
    assert [c["type"] for c in written] == ["Ready", "Other", "Degraded"]
    assert written[0]["lastTransitionTime"] == "t0"
    assert written[0]["observedGeneration"] == 7
    assert written[2]["lastTransitionTime"] == "2024-01-02T03:09:05Z"
    assert body["status"]["conditions"][0]["reason"] == "Ok"  # the body is not modified


def test_set_condition_in_place_on_a_status_and_reading_back() -> None:
    status: dict[str, Any] = {}
    conditions.set_condition(status, "Ready", False, reason="Waiting", now=T1)
    assert conditions.find_condition(status, "Ready") is not None
    assert not conditions.is_condition_true(status, "Ready")
    conditions.set_condition(status, "Ready", True, reason="Done", now=T2)
    assert conditions.is_condition_true({"status": status}, "Ready")
    assert conditions.get_conditions({"metadata": {}}) == []
    assert conditions.find_condition(status, "Missing") is None
