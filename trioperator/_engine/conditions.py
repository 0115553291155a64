"""``status.conditions`` as the Kubernetes API conventions define them (trioperator's own).

A condition is a dict with ``type`` (CamelCase, unique in the list), ``status`` (``"True"``,
``"False"`` or ``"Unknown"``), ``reason`` (CamelCase, one word), ``message`` (for humans),
``lastTransitionTime`` (RFC 3339, seconds precision, UTC ``Z``) and ``observedGeneration`` (the
``metadata.generation`` the condition was computed from). ``lastTransitionTime`` moves only when
the status changes: a new reason or message alone keeps it, so ``kubectl wait`` and GitOps health
checks see a stable transition.

The functions here are pure: they read conditions from a body or a status and compute the new
list; :func:`set_condition` writes it into a patch (a merge-patch replaces a list as a whole, so
the whole new list goes into ``patch["status"]["conditions"]``).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, Final, Literal

from trioperator._util import clock

__all__ = [
    "ConditionStatus",
    "find_condition",
    "format_transition_time",
    "get_conditions",
    "is_condition_true",
    "merge_condition",
    "set_condition",
]

ConditionStatus = Literal["True", "False", "Unknown"]
_STATUSES: Final[frozenset[str]] = frozenset({"True", "False", "Unknown"})

# The conventions' (and metav1.Condition's validation) patterns.
_TYPE_RE: Final = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_REASON_RE: Final = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
MAX_TYPE_LENGTH: Final = 316
MAX_REASON_LENGTH: Final = 1024
MAX_MESSAGE_LENGTH: Final = 32768


def format_transition_time(value: datetime.datetime) -> str:
    """RFC 3339 in UTC with seconds precision (``2024-01-02T03:04:05Z``), as metav1.Time is."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status_of(source: Mapping[str, Any]) -> Mapping[str, Any]:
    """The status stanza, given a whole body (has ``metadata``/``spec``/``status``) or a status."""
    if "status" in source and isinstance(source.get("status"), Mapping):
        return source["status"]  # type: ignore[no-any-return]
    if "metadata" in source or "spec" in source or "apiVersion" in source:
        return {}
    return source


def get_conditions(source: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conditions of a body or of a status (copies; entries that are not dicts skipped)."""
    conditions = _status_of(source).get("conditions")
    if not isinstance(conditions, Sequence) or isinstance(conditions, str):
        return []
    return [dict(item) for item in conditions if isinstance(item, Mapping)]


def find_condition(source: Mapping[str, Any], type: str) -> dict[str, Any] | None:
    """The condition of that type in a body or status, or ``None``."""
    for condition in get_conditions(source):
        if condition.get("type") == type:
            return condition
    return None


def is_condition_true(source: Mapping[str, Any], type: str) -> bool:
    """Whether the condition of that type is there with ``status: "True"``."""
    condition = find_condition(source, type)
    return condition is not None and condition.get("status") == "True"


def _check(type: str, status: str, reason: str, message: str) -> None:
    if not isinstance(type, str) or len(type) > MAX_TYPE_LENGTH or not _TYPE_RE.match(type):
        raise ValueError(f"A condition type must be CamelCase (optionally prefixed): {type!r}")
    if status not in _STATUSES:
        raise ValueError(f"A condition status is 'True', 'False' or 'Unknown', not {status!r}")
    if (
        not isinstance(reason, str)
        or len(reason) > MAX_REASON_LENGTH
        or not _REASON_RE.match(reason)
    ):
        raise ValueError(f"A condition reason must be one CamelCase word: {reason!r}")
    if not isinstance(message, str) or len(message) > MAX_MESSAGE_LENGTH:
        raise ValueError(f"A condition message is a string up to {MAX_MESSAGE_LENGTH} chars.")


def _status_text(status: ConditionStatus | bool | str) -> str:
    if status is True:
        return "True"
    if status is False:
        return "False"
    return status


def merge_condition(
    conditions: Sequence[Mapping[str, Any]],
    type: str,
    status: ConditionStatus | bool,
    *,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
    now: datetime.datetime | None = None,
) -> list[dict[str, Any]]:
    """A new list of conditions with ``type`` set; the others kept as they are, in order.

    ``lastTransitionTime`` is ``now`` (default: the operator's clock) if the condition is new or
    its status differs; otherwise the old one is kept. ``status`` may be a bool.
    """
    text = _status_text(status)
    _check(type, text, reason, message)
    result: list[dict[str, Any]] = []
    found = False
    for old in conditions:
        if old.get("type") != type:
            result.append(dict(old))
            continue
        if found:
            continue  # a duplicate of the type (invalid by the conventions): dropped
        found = True
        result.append(_updated(old, type, text, reason, message, observed_generation, now))
    if not found:
        result.append(_updated(None, type, text, reason, message, observed_generation, now))
    return result


def _updated(
    old: Mapping[str, Any] | None,
    type: str,
    status: str,
    reason: str,
    message: str,
    observed_generation: int | None,
    now: datetime.datetime | None,
) -> dict[str, Any]:
    new: dict[str, Any] = {"type": type, "status": status}
    if old is not None:
        new.update(old)
    if old is None or old.get("status") != status or not old.get("lastTransitionTime"):
        new["lastTransitionTime"] = format_transition_time(now if now is not None else clock.now())
    new["status"] = status
    new["reason"] = reason
    new["message"] = message
    if observed_generation is not None:
        new["observedGeneration"] = observed_generation
    return new


def set_condition(
    target: MutableMapping[str, Any],
    type: str,
    status: ConditionStatus | bool,
    *,
    reason: str,
    message: str = "",
    body: Mapping[str, Any] | None = None,
    observed_generation: int | None = None,
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """Set a condition in ``target`` and return it.

    ``target`` is a patch (``patch`` kwarg: give the current ``body`` too, whose conditions are
    the base and whose ``metadata.generation`` becomes ``observedGeneration`` unless given), or
    a status/body dict to modify in place (without ``body``: its own conditions are the base).
    """
    base = body if body is not None else target
    if observed_generation is None and body is not None:
        generation = (body.get("metadata") or {}).get("generation")
        observed_generation = generation if isinstance(generation, int) else None
    # Already written into this patch earlier in the same run: build on that.
    status_stanza = target.get("status") if body is not None or "metadata" in target else target
    pending = status_stanza.get("conditions") if isinstance(status_stanza, Mapping) else None
    conditions = (
        [dict(item) for item in pending if isinstance(item, Mapping)]
        if isinstance(pending, list)
        else get_conditions(base)
    )
    merged = merge_condition(
        conditions,
        type,
        status,
        reason=reason,
        message=message,
        observed_generation=observed_generation,
        now=now,
    )
    if body is not None or "metadata" in target or "spec" in target:
        stanza = target.setdefault("status", {})
        if not isinstance(stanza, MutableMapping):
            raise TypeError(f"status must be a dict to set conditions in, not {stanza!r}")
        stanza["conditions"] = merged
    else:
        target["conditions"] = merged
    return next(item for item in merged if item["type"] == type)
