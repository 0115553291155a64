"""Server-side apply's field conflicts: who else manages the fields that an apply would change.

A conflicting apply is answered with HTTP 409 and a ``Status`` whose ``details.causes`` name
each field and its manager, e.g. ``{"reason": "FieldManagerConflict", "field": ".data.key",
"message": "conflict with \\"kubectl-edit\\" using v1"}``. The manager is only in that message
(the API has no field for it), so it is parsed from there, and left empty if the text differs.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from trioperator._client.errors import APIConflictError, APIError

__all__ = ["APIFieldConflictError", "FieldConflict", "field_conflicts", "with_field_conflicts"]

_MANAGER = re.compile(
    r'conflict with "(?P<manager>(?:[^"\\]|\\.)*)"'
    r'(?: with subresource "(?P<subresource>[^"]*)")?'
    r"(?: using (?P<version>\S+))?"
)


@dataclasses.dataclass(frozen=True)
class FieldConflict:
    """One field that an apply would take from another field manager."""

    field: str
    """The field's path as the server writes it, e.g. ``.spec.replicas``."""
    manager: str
    """The field manager that owns it now (empty if the server's message could not be read)."""
    version: str = ""
    """The API version the other manager wrote it through, if the server said."""
    subresource: str = ""
    """The subresource it was written through (e.g. ``status``), if any."""
    message: str = ""
    """The server's own words for this conflict."""


class APIFieldConflictError(APIConflictError):
    """HTTP 409 for a server-side apply: fields are managed by other field managers.

    ``conflicts`` lists them. Apply again with ``force=True`` to take the fields over, or leave
    them out of the applied body to let the other manager keep them.
    """

    conflicts: tuple[FieldConflict, ...]

    @property
    def managers(self) -> frozenset[str]:
        """The other field managers in conflict."""
        return frozenset(conflict.manager for conflict in self.conflicts)


def field_conflicts(payload: dict[str, Any] | None) -> tuple[FieldConflict, ...]:
    """The field-manager conflicts listed in a ``Status`` (none if it lists none)."""
    details = payload.get("details") if isinstance(payload, dict) else None
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return ()
    found: list[FieldConflict] = []
    for cause in causes:
        # The Go field is `Type`, but its JSON name is "reason".
        if not isinstance(cause, dict) or cause.get("reason") != "FieldManagerConflict":
            continue
        message = cause.get("message")
        field = cause.get("field")
        text = message if isinstance(message, str) else ""
        match = _MANAGER.search(text)
        found.append(
            FieldConflict(
                field=field if isinstance(field, str) else "",
                manager=match.group("manager").replace('\\"', '"') if match else "",
                version=(match.group("version") or "") if match else "",
                subresource=(match.group("subresource") or "") if match else "",
                message=text,
            )
        )
    return tuple(found)


def with_field_conflicts(error: APIError) -> APIError:
    """The error as an :class:`APIFieldConflictError` if it is a 409 listing field conflicts."""
    if not isinstance(error, APIConflictError):
        return error
    conflicts = field_conflicts(error.payload)
    if not conflicts:
        return error
    specific = APIFieldConflictError(
        error.message,
        status=error.status,
        code=error.code,
        reason=error.reason,
        details=error.details,
        retry_after=error.retry_after,
        payload=error.payload,
    )
    specific.conflicts = conflicts
    return specific
