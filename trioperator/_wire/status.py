"""``metav1.Status``: what the API server returns for failures (and some successes).

Every field is optional and unknown fields are ignored: the Status is only read to explain an
error, so a partial or unusual one must still decode.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["Status", "StatusCause", "StatusDetails", "decode_status", "status_from_dict"]


class StatusCause(msgspec.Struct, kw_only=True, rename="camel"):
    reason: str | None = None
    message: str | None = None
    field: str | None = None


class StatusDetails(msgspec.Struct, kw_only=True, rename="camel"):
    name: str | None = None
    group: str | None = None
    kind: str | None = None
    uid: str | None = None
    causes: list[StatusCause] = msgspec.field(default_factory=list)
    # An int32 in Kubernetes; a float here costs nothing and tolerates fractional values.
    retry_after_seconds: float | None = None


class Status(msgspec.Struct, kw_only=True, rename="camel"):
    kind: str | None = None
    api_version: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    status: str | None = None
    """``"Success"`` or ``"Failure"``."""
    message: str | None = None
    reason: str | None = None
    """A machine-readable word: ``NotFound``, ``AlreadyExists``, ``Expired``, …"""
    details: StatusDetails | None = None
    code: int | None = None


_STATUS_DECODER: msgspec.json.Decoder[Status] = msgspec.json.Decoder(Status)


def decode_status(data: bytes) -> Status | None:
    """The Status in a response body, or ``None`` if the body is not a JSON object of that shape."""
    try:
        return _STATUS_DECODER.decode(data)
    except msgspec.DecodeError:
        return None


def status_from_dict(data: Any) -> Status | None:
    """The Status from an already decoded JSON value (e.g. the object of a watch ``ERROR``)."""
    try:
        return msgspec.convert(data, Status)
    except msgspec.ValidationError:
        return None
