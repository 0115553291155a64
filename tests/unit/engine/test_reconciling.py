"""Decisions of the reconcile handler kind: owners, mappers, results, backoff, coalescing."""

from __future__ import annotations

from typing import Any

import pytest
from trioperator._engine.diffs import diff
from trioperator._engine.reconciling import (
    Coalescer,
    DueTimes,
    ObjectKey,
    Requeue,
    backoff_delay,
    controller_owner,
    generation_changed,
    mapped_keys,
    requested_delay,
)


def _child(*refs: dict[str, Any], namespace: str | None = "ns") -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": namespace, "ownerReferences": list(refs)}}


OWNER_REF = {"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "name": "own", "uid": "u1"}


def test_the_controller_reference_names_the_owner_in_the_childs_namespace() -> None:
    child = _child({**OWNER_REF, "controller": True})
    assert controller_owner(child, group="kopf.dev", kind="KopfExample") == (
        ObjectKey("ns", "own"),
        "u1",
    )


@pytest.mark.parametrize(
    "refs",
    [
        [],
        [OWNER_REF],  # not the controller
        [{**OWNER_REF, "controller": False}],
        [{**OWNER_REF, "controller": True, "kind": "Other"}],
        [{**OWNER_REF, "controller": True, "apiVersion": "other.dev/v1"}],
        [{**OWNER_REF, "controller": True, "name": ""}],
    ],
)
def test_no_owner_without_a_controller_reference_to_the_kind(refs: list[dict[str, Any]]) -> None:
    assert controller_owner(_child(*refs), group="kopf.dev", kind="KopfExample") is None


def test_core_group_owner_and_a_non_controller_reference_first() -> None:
    refs = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "x"},
        {"apiVersion": "v1", "kind": "Service", "name": "svc", "uid": "u2", "controller": True},
    ]
    owner = controller_owner(_child(*refs), group="", kind="Service")
    assert owner == (ObjectKey("ns", "svc"), "u2")


def test_mapper_results_become_keys() -> None:
    body = {"metadata": {"name": "b", "namespace": "other"}}
    result = mapped_keys(
        ["a", "x/y", ("z", "w"), ObjectKey(None, "cluster"), body], default_namespace="ns"
    )
    assert result == [
        ObjectKey("ns", "a"),
        ObjectKey("x", "y"),
        ObjectKey("z", "w"),
        ObjectKey(None, "cluster"),
        ObjectKey("other", "b"),
    ]
    assert mapped_keys(None, default_namespace="ns") == []
    assert mapped_keys("one", default_namespace="ns") == [ObjectKey("ns", "one")]
    assert mapped_keys(("ns2", "two"), default_namespace="ns") == [ObjectKey("ns2", "two")]


@pytest.mark.parametrize("bad", [42, [42], ["ns/"], [{"metadata": {}}]])
def test_mapper_results_that_are_not_keys_are_refused(bad: object) -> None:
    with pytest.raises(TypeError, match="mapper"):
        mapped_keys(bad, default_namespace="ns")


def test_results_asking_for_a_delay() -> None:
    assert requested_delay(Requeue(after=5)) == 5.0
    assert requested_delay(2.5) == 2.5
    assert requested_delay(0) == 0.0
    assert requested_delay(None) is None
    assert requested_delay(True) is None  # a bool is not seconds
    assert requested_delay({"field": 1}) is None  # a status result
    assert requested_delay(-1) is None
    with pytest.raises(ValueError, match="Requeue"):
        Requeue(after=-1)
    with pytest.raises(TypeError, match="Requeue"):
        Requeue(after="soon")  # type: ignore[arg-type]


def test_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    delays = [backoff_delay(n, base=1.5, cap=20) for n in range(7)]
    assert delays == [0.0, 1.5, 3.0, 6.0, 12.0, 20.0, 20.0]
    assert backoff_delay(10_000, base=1, cap=300) == 300.0  # no overflow


def test_coalescer_one_run_at_a_time_and_one_more_after_many_requests() -> None:
    coalescer = Coalescer()
    assert not coalescer.start("a")  # nothing requested
    assert coalescer.request("a")
    assert not coalescer.request("a")  # already queued: coalesced
    assert coalescer.start("a")
    assert not coalescer.start("a")  # running: not twice
    for _ in range(5):
        assert not coalescer.request("a")
    assert not coalescer.is_queued("a")
    assert coalescer.finish("a")  # requests came: queued once more
    assert coalescer.is_queued("a")
    assert coalescer.start("a")
    assert not coalescer.finish("a")  # none this time
    assert not coalescer.is_queued("a")


def test_coalescer_forgets_gone_objects() -> None:
    coalescer = Coalescer()
    coalescer.request("a")
    coalescer.forget("a")
    assert not coalescer.start("a")


def test_due_times_keep_the_earliest_and_pop_in_order() -> None:
    due = DueTimes()
    assert due.schedule("a", 10.0)
    assert not due.schedule("a", 20.0)  # later than set: kept at 10
    assert due.schedule("b", 5.0)  # the new earliest
    assert not due.schedule("c", 7.0)
    due.cancel("c")
    assert due.next_time() == 5.0
    assert due.pop_due(9.0) == ["b"]
    assert due.pop_due(9.0) == []
    assert due.pop_due(10.0) == ["a"]
    assert due.next_time() is None
    assert len(due) == 0


def _body(generation: int, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x", "generation": generation}, **extra}


def test_generation_changed_on_whole_bodies_compares_generations() -> None:
    assert generation_changed(old=None, new=_body(1))
    assert generation_changed(old=_body(1), new=_body(2))
    assert not generation_changed(old=_body(2), new=_body(2, status={"x": 1}))
    deleted = _body(2)
    deleted["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert generation_changed(old=_body(2), new=deleted)


def test_generation_changed_on_kopf_essences_looks_at_the_diff() -> None:
    old = {"spec": {"a": 1}, "metadata": {"labels": {"x": "1"}}}
    labels_only = {"spec": {"a": 1}, "metadata": {"labels": {"x": "2"}}}
    spec_too = {"spec": {"a": 2}, "metadata": {"labels": {"x": "1"}}}
    kwargs = {"reason": "update", "body": {}}
    assert not generation_changed(old=old, new=labels_only, diff=diff(old, labels_only), **kwargs)
    assert generation_changed(old=old, new=spec_too, diff=diff(old, spec_too), **kwargs)
    assert generation_changed(old=old, new=old, diff=(), reason="resume")
