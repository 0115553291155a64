"""``status.conditions`` helpers (trioperator's own, not part of Kopf).

Set and read conditions the way the Kubernetes API conventions define them, so that
``kubectl wait --for=condition=Ready`` and GitOps health checks work::

    import trioperator.conditions as conditions

    @trioperator.on.reconcile("example.com", "v1", "widgets")
    def reconcile(body, patch, **_):
        conditions.set_condition(patch, "Ready", True, reason="ChildrenReady", body=body)

See docs/reconcile.md. The implementations live in the engine; this is their public home.
"""

from __future__ import annotations

from trioperator._engine.conditions import ConditionStatus as ConditionStatus
from trioperator._engine.conditions import find_condition as find_condition
from trioperator._engine.conditions import format_transition_time as format_transition_time
from trioperator._engine.conditions import get_conditions as get_conditions
from trioperator._engine.conditions import is_condition_true as is_condition_true
from trioperator._engine.conditions import merge_condition as merge_condition
from trioperator._engine.conditions import set_condition as set_condition

__all__ = [
    "ConditionStatus",
    "find_condition",
    "format_transition_time",
    "get_conditions",
    "is_condition_true",
    "merge_condition",
    "set_condition",
]
