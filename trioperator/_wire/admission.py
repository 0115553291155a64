"""AdmissionReview (``admission.k8s.io/v1`` and ``v1beta1``): requests decoded, responses built.

Both versions have the same shape for what the operator reads, so one Struct serves both; the
request's ``apiVersion`` is echoed in the response, as the API server requires. The objects under
review (``object``, ``oldObject``) stay plain dicts: they are handed to user code as bodies and
may carry any fields. Unknown fields are ignored everywhere, so that newer API servers (or
fields this module does not need, such as ``options``) never break decoding.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

__all__ = [
    "API_VERSIONS",
    "AdmissionRequest",
    "AdmissionReview",
    "GroupVersionKind",
    "GroupVersionResource",
    "ReviewDecodeError",
    "build_response",
    "decode_review",
]

API_VERSIONS: Final = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
"""The review versions understood here (and offered in managed configurations)."""

DEFAULT_API_VERSION: Final = API_VERSIONS[0]


class GroupVersionResource(msgspec.Struct, kw_only=True):
    group: str = ""
    version: str
    resource: str


class GroupVersionKind(msgspec.Struct, kw_only=True):
    group: str = ""
    version: str = ""
    kind: str = ""


class AdmissionRequest(msgspec.Struct, kw_only=True, rename="camel"):
    """``request`` of an AdmissionReview: what is being admitted, by whom, and how."""

    uid: str
    resource: GroupVersionResource
    operation: str
    kind: GroupVersionKind | None = None
    sub_resource: str | None = None
    request_kind: GroupVersionKind | None = None
    request_resource: GroupVersionResource | None = None
    request_sub_resource: str | None = None
    name: str | None = None
    namespace: str | None = None
    user_info: dict[str, Any] | None = None
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    dry_run: bool | None = None


class AdmissionReview(msgspec.Struct, kw_only=True, rename="camel"):
    api_version: str = DEFAULT_API_VERSION
    kind: str = "AdmissionReview"
    request: AdmissionRequest


class ReviewDecodeError(ValueError):
    """The payload is not an AdmissionReview request this operator can answer."""


# Built once and reused: a decoder compiles its type plan at construction.
_REVIEW_DECODER: msgspec.json.Decoder[AdmissionReview] = msgspec.json.Decoder(AdmissionReview)

_EXCERPT = 200

MAX_CONTAINERS: Final = 500_000
"""The most JSON objects and arrays a review may hold. Decoded, each costs ~60-100 bytes of
memory however few bytes it takes in JSON (``{}`` is two), so a review of a few MiB of empty
objects would take hundreds of MiB; half a million containers cost at most ~50 MiB. Real
objects (within the API server's 3 MiB) hold far fewer: even a list of 100,000 small items is
a fifth of this."""


def decode_review(payload: bytes | Mapping[str, Any]) -> AdmissionReview:
    """Decode a review from the raw JSON body (or an already decoded mapping).

    Raises :class:`ReviewDecodeError` with a short explanation for broken JSON, a wrong shape,
    or a review version other than :data:`API_VERSIONS`.
    """
    if isinstance(payload, bytes | bytearray) and len(payload) > MAX_CONTAINERS:
        # Braces inside strings count too: an overestimate, never an underestimate. Counting
        # runs at memory speed, well before any decoding.
        containers = payload.count(b"{") + payload.count(b"[")
        if containers > MAX_CONTAINERS:
            raise ReviewDecodeError(
                f"The review holds too many JSON objects and arrays to decode: {containers} "
                f"opening braces and brackets, over {MAX_CONTAINERS}."
            )
    try:
        if isinstance(payload, bytes | bytearray | memoryview):
            review = _REVIEW_DECODER.decode(payload)
        else:
            review = msgspec.convert(payload, AdmissionReview)
    except msgspec.ValidationError as exc:
        raise ReviewDecodeError(f"Not an AdmissionReview request: {exc}.") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        # Invalid UTF-8 in a string and nesting deeper than the interpreter's recursion limit
        # are broken input too, not failures of the operator.
        excerpt = bytes(payload[:_EXCERPT]) if not isinstance(payload, Mapping) else b""
        raise ReviewDecodeError(f"The review is not valid JSON ({exc}): {excerpt!r}") from None
    if review.kind != "AdmissionReview":
        raise ReviewDecodeError(f"Not an AdmissionReview but {review.kind!r}.")
    if review.api_version not in API_VERSIONS:
        raise ReviewDecodeError(
            f"Unsupported review version {review.api_version!r}; "
            f"supported: {', '.join(API_VERSIONS)}."
        )
    return review


def build_response(
    review: AdmissionReview,
    *,
    allowed: bool,
    warnings: Sequence[str] = (),
    json_patch: Sequence[Mapping[str, Any]] = (),
    message: str | None = None,
    code: int | None = None,
) -> dict[str, Any]:
    """The AdmissionReview response to ``review``, as a JSON-ready dict.

    The patch is a JSON-patch (RFC 6902) sent base64-encoded with ``patchType: JSONPatch``;
    ``message``/``code`` go to ``response.status`` (shown to the client on rejection).
    """
    response: dict[str, Any] = {"uid": review.request.uid, "allowed": allowed}
    if warnings:
        response["warnings"] = [str(warning) for warning in warnings]
    if json_patch:
        response["patch"] = base64.b64encode(msgspec.json.encode(list(json_patch))).decode("ascii")
        response["patchType"] = "JSONPatch"
    if message is not None or code is not None:
        status: dict[str, Any] = {}
        if message is not None:
            status["message"] = message
        if code is not None:
            status["code"] = code
        response["status"] = status
    return {"apiVersion": review.api_version, "kind": review.kind, "response": response}
