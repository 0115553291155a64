"""The ``scale`` subresource: an ``autoscaling/v1`` Scale view of an object's replicas."""

from __future__ import annotations

from typing import Any

from trioperator.testing._fakestore.catalogue import ResourceDef
from trioperator.testing._fakestore.errors import StatusError, invalid
from trioperator.testing._fakestore.values import Obj

SCALE_API_VERSION = "autoscaling/v1"


def scale_of(obj: Obj) -> Obj:
    """The Scale of a stored object (a fresh dict: the caller may change it)."""
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    scale_meta = {
        k: meta[k]
        for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if k in meta
    }
    return {
        "kind": "Scale",
        "apiVersion": SCALE_API_VERSION,
        "metadata": scale_meta,
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": {
            "replicas": status.get("replicas", 0),
            "selector": selector_text(spec.get("selector")),
        },
    }


def scale_not_found(res: ResourceDef, name: str) -> StatusError:
    return StatusError(
        404,
        "NotFound",
        f'{res.plural}/scale.{res.group} "{name}" not found',
        {"name": name, "group": res.group, "kind": f"{res.plural}/scale"},
    )


def replicas_of(res: ResourceDef, scale: Any, name: str) -> int:
    """The replicas a written Scale asks for, validated as the apiserver does."""
    if not isinstance(scale, dict) or not isinstance(scale.get("metadata"), dict):
        raise StatusError(
            400, "BadRequest", "the object provided is unrecognized (must be a Scale)"
        )
    if not scale["metadata"].get("namespace"):
        raise _scale_invalid(name, "metadata.namespace", "FieldValueRequired", "Required value")
    replicas = (scale.get("spec") or {}).get("replicas", 0)
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise StatusError(400, "BadRequest", f"invalid replicas: {replicas!r}")
    if replicas < 0:
        raise _scale_invalid(
            name,
            "spec.replicas",
            "FieldValueInvalid",
            f"Invalid value: {replicas}: must be greater than or equal to 0",
        )
    return replicas


def _scale_invalid(name: str, field: str, reason: str, message: str) -> StatusError:
    scale = ResourceDef("autoscaling", ["v1"], "scales", "Scale")
    return invalid(scale, name, [(reason, field, message)])


def selector_text(selector: Any) -> str:
    """A label selector in its text form (``a=b,c in (d,e)``), as the Scale's status shows it."""
    if not isinstance(selector, dict):
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key = expression.get("key", "")
        operator = expression.get("operator", "")
        values = ",".join(sorted(expression.get("values") or []))
        if operator == "In":
            parts.append(f"{key} in ({values})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({values})")
        elif operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(sorted(parts))
