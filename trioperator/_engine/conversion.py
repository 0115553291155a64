"""Conversion between the versions of a typed resource: answering a ConversionReview.

The API server sends a ``ConversionReview`` (``apiextensions.k8s.io/v1``) with objects in one
version and the version it wants them in; each object is decoded into its version's model,
passed through the chain of :func:`~trioperator._engine.models.conversion` functions, and
encoded again, with its metadata as it was (the API server refuses any other change to it).

Fields of the status that no model declares -- the framework's own records, the handlers'
results -- are carried over as they are: they would be lost on every conversion otherwise.

Pure: no I/O. The operator's webhook server (``_runtime/admission/admission.py``) answers reviews at
``<its URL>/conversion/<CRD name>`` for the resources that its handlers name by their model
(:func:`served_conversions`), and points the CRDs' ``spec.conversion`` there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from trioperator._engine.handlers import ResourceHandler
from trioperator._engine.models import (
    ResourceModel,
    SpecDecodeError,
    conversion_path,
    converted_crds,
    declared_models,
    decode,
    model_of,
    struct_type,
)

__all__ = [
    "CONVERSION_PATH",
    "REVIEW_API_VERSION",
    "ConversionError",
    "conversion_stanza",
    "convert_object",
    "convert_review",
    "served_conversions",
]

REVIEW_API_VERSION: Final = "apiextensions.k8s.io/v1"

CONVERSION_PATH: Final = "conversion/"
"""The webhook id prefix (the URL path under the server's root) of the conversion webhooks."""


def served_conversions(handlers: Iterable[object]) -> frozenset[str]:
    """The CRDs (by name) whose conversions an operator with these handlers serves: those with
    conversion functions that a resource handler names by group and plural (e.g. by model)."""
    selected = set()
    for handler in handlers:
        selector = handler.selector if isinstance(handler, ResourceHandler) else None
        if selector is not None and selector.group and selector.plural:
            selected.add(f"{selector.plural}.{selector.group}")
    return frozenset(selected & converted_crds())


def conversion_stanza(client_config: Mapping[str, Any]) -> dict[str, Any]:
    """The CRD's ``spec.conversion`` for a webhook at this client config (URL/service + CA)."""
    return {
        "strategy": "Webhook",
        "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": dict(client_config)},
    }


class ConversionError(ValueError):
    """An object cannot be converted (unknown version, no conversion, does not decode)."""


def find_model(api_version: str, kind: str) -> ResourceModel | None:
    for cls in declared_models():
        model = model_of(cls)
        if model is not None and model.api_version == api_version and model.kind == kind:
            return model
    return None


def convert_object(obj: Mapping[str, Any], desired_api_version: str) -> dict[str, Any]:
    """One object in the desired version (of the same group and kind)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise ConversionError("An object without apiVersion and kind cannot be converted.")
    if api_version == desired_api_version:
        return dict(obj)
    source = find_model(api_version, kind)
    target = find_model(desired_api_version, kind)
    if source is None or target is None:
        missing = api_version if source is None else desired_api_version
        raise ConversionError(f"No model of {kind} in {missing}.")
    try:
        path = conversion_path(source.crd_name, source.version, target.version)
    except LookupError as exc:
        raise ConversionError(str(exc)) from None
    name = (obj.get("metadata") or {}).get("name")
    try:
        value: Any = decode(
            {k: v for k, v in obj.items() if k in ("spec", "status")}, source.cls, what=kind
        )
    except SpecDecodeError as exc:
        raise ConversionError(f"{kind} {name!r} in {api_version}: {exc}") from None
    for src, dst, fn in path:
        try:
            value = fn(value)
        except Exception as exc:  # the user's function: its failure is the review's answer
            raise ConversionError(
                f"The conversion of {kind} {name!r} from {src} to {dst} failed: {exc!r}"
            ) from None
        expected = find_model(f"{source.group}/{dst}", kind)
        if expected is None or not isinstance(value, expected.cls):
            raise ConversionError(
                f"The conversion of {kind} from {src} to {dst} returned {type(value).__name__}, "
                f"not {expected.cls.__name__ if expected else dst}."
            )
    result: dict[str, Any] = {
        "apiVersion": desired_api_version,
        "kind": kind,
        "metadata": obj.get("metadata", {}),
    }
    result.update(msgspec.to_builtins(value))
    extra = _undeclared_status(obj.get("status"), source)
    if extra:
        result["status"] = {**extra, **(result.get("status") or {})}
    return result


def _undeclared_status(status: Any, model: ResourceModel) -> dict[str, Any]:
    if not isinstance(status, Mapping):
        return {}
    found = struct_type(model.status_type) if model.status_type is not None else None
    declared = {field.encode_name for field in msgspec.structs.fields(found[0])} if found else set()
    return {key: value for key, value in status.items() if key not in declared}


def convert_review(review: Mapping[str, Any]) -> dict[str, Any]:
    """The response to a ConversionReview: every object converted, or a failure saying why."""
    request = review.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise ValueError("Not a ConversionReview request: no request.uid.")
    desired = request.get("desiredAPIVersion")
    objects = request.get("objects") or []
    response: dict[str, Any] = {"uid": request["uid"]}
    try:
        if not isinstance(desired, str):
            raise ConversionError("The review has no desiredAPIVersion.")
        response["convertedObjects"] = [convert_object(obj, desired) for obj in objects]
        response["result"] = {"status": "Success"}
    except ConversionError as exc:
        response["convertedObjects"] = []
        response["result"] = {"status": "Failure", "message": str(exc)}
    return {
        "apiVersion": review.get("apiVersion", REVIEW_API_VERSION),
        "kind": "ConversionReview",
        "response": response,
    }
