"""API errors as the kube-apiserver 1.20 sends them (``metav1.Status`` bodies and texts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trioperator.testing._fakestore.catalogue import ResourceDef
from trioperator.testing._fakestore.values import Obj


class StatusError(Exception):
    """An API error, carried as the ``metav1.Status`` body that the real server would send."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details) if details is not None else None

    @property
    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def resource_details(res: ResourceDef, name: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name is not None:
        details["name"] = name
    if res.group:
        details["group"] = res.group
    details["kind"] = res.plural
    return details


def not_found(res: ResourceDef, name: str) -> StatusError:
    return StatusError(
        404, "NotFound", f'{res.qualified} "{name}" not found', resource_details(res, name)
    )


def resource_not_found() -> StatusError:
    """A known API group version but an unknown resource or subresource."""
    return StatusError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(res: ResourceDef, name: str) -> StatusError:
    return StatusError(
        409,
        "AlreadyExists",
        f'{res.qualified} "{name}" already exists',
        resource_details(res, name),
    )


def conflict(res: ResourceDef, name: str) -> StatusError:
    message = (
        f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has been modified;'
        " please apply your changes to the latest version and try again"
    )
    return StatusError(409, "Conflict", message, resource_details(res, name))


def invalid(
    res: ResourceDef,
    name: str,
    causes: list[tuple[str, str, str]],
    *,
    kind: str | None = None,
    by_resource: bool = False,
) -> StatusError:
    """A 422 for field errors; ``causes`` are ``(reason, field, message)``.

    The real server names the object by ``Kind.group`` for validation errors and by
    ``plural.group`` for the update preconditions; ``by_resource`` picks the latter.
    """
    kind = kind or res.kind
    if by_resource:
        qualified = res.qualified
        details: dict[str, Any] = resource_details(res, name or None)
    else:
        qualified = f"{kind}.{res.group}" if res.group else kind
        details = {}
        if name:
            details["name"] = name
        if res.group:
            details["group"] = res.group
        details["kind"] = kind
    texts = [f"{field}: {message}" for _, field, message in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details["causes"] = [
        {"reason": reason, "message": message, "field": field} for reason, field, message in causes
    ]
    return StatusError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def namespace_mismatch() -> StatusError:
    return bad_request(
        "the namespace of the provided object does not match the namespace sent on the request"
    )


def name_mismatch(body_name: Any, url_name: str) -> StatusError:
    return bad_request(
        f"the name of the object ({body_name}) does not match the name on the URL ({url_name})"
    )


def expired(message: str) -> StatusError:
    return StatusError(410, "Expired", message)
