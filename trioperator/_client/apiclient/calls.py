"""What the API client sends for each operation, and how it reads the answers (no I/O).

Both clients (async and sync) build the same :class:`Call` here and judge the same answers
here, so that they cannot drift apart; only the waiting differs between them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import msgspec

from trioperator._client.apiclient.conflicts import with_field_conflicts
from trioperator._client.apiclient.settings import ClientSettings
from trioperator._client.errors import (
    APIConnectionError,
    APIError,
    APIProtocolError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    error_from_response,
)
from trioperator._client.resources import Resource

__all__ = [
    "Attempts",
    "Call",
    "ObjectList",
    "Page",
    "PatchType",
    "Selector",
    "WatchEventType",
    "apply_call",
    "create_call",
    "decode_object",
    "delete_call",
    "error_of",
    "get_call",
    "list_call",
    "patch_call",
    "read_page",
    "replace_call",
    "retriable",
    "watch_call",
]

PatchType: TypeAlias = Literal["merge", "json", "strategic"]
"""A JSON merge patch (RFC 7386), a JSON patch (RFC 6902, a list of operations), or a
strategic merge patch (built-in resources only: lists merged by key)."""

WatchEventType: TypeAlias = str
"""``ADDED``, ``MODIFIED``, ``DELETED`` (and ``BOOKMARK`` when asked for)."""

Selector: TypeAlias = str | Mapping[str, str] | None
"""A label or field selector: the server's text (``app=web,tier!=db``), or a mapping of
names to the values they must equal."""

_PATCH_CONTENT_TYPES: Mapping[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
"""Server-side apply: the body is YAML to the server, and JSON is YAML."""

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()

logger = logging.getLogger(__name__)


class ObjectList(list[dict[str, Any]]):
    """The objects of a listing, with the listing's ``resourceVersion`` to watch from."""

    resource_version: str | None = None


@dataclasses.dataclass(frozen=True)
class Call:
    """One request: what to send, and whether sending it twice is harmless."""

    method: str
    path: str
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    content: bytes | None = None
    content_type: str | None = None
    idempotent: bool = False
    """Safe to send again after a connection failure or a 5xx (reads, applies)."""

    @property
    def what(self) -> str:
        return f"{self.method} {self.path}"


def _namespace(
    resource: Resource, namespace: str | None, body: Mapping[str, Any] | None = None
) -> str | None:
    """The namespace of an object request: given, else the body's; checked against the scope."""
    if namespace is None and body is not None:
        meta = body.get("metadata")
        found = meta.get("namespace") if isinstance(meta, Mapping) else None
        namespace = found if isinstance(found, str) and found else None
    if resource.namespaced and namespace is None:
        raise ValueError(
            f"{resource} is namespaced: give namespace= (or metadata.namespace in the body)."
        )
    if not resource.namespaced and namespace is not None:
        raise ValueError(f"{resource} is cluster-scoped: it has no namespace ({namespace!r}).")
    return namespace


def _name(name: str | None, body: Mapping[str, Any] | None = None) -> str:
    if name is None and body is not None:
        meta = body.get("metadata")
        found = meta.get("name") if isinstance(meta, Mapping) else None
        name = found if isinstance(found, str) else None
    if not name:
        raise ValueError("The object has no name: give one (or metadata.name in the body).")
    return name


def _selector(selector: Selector) -> str | None:
    if selector is None or isinstance(selector, str):
        return selector
    return ",".join(f"{key}={value}" for key, value in selector.items())


def _write_params(
    field_manager: str | None, dry_run: bool, force: bool | None = None
) -> dict[str, str]:
    params: dict[str, str] = {}
    if field_manager is not None:
        params["fieldManager"] = field_manager
    if dry_run:
        params["dryRun"] = "All"
    if force is not None:
        params["force"] = "true" if force else "false"
    return params


def _encode(body: object) -> bytes:
    try:
        return _ENCODER.encode(body)
    except (TypeError, msgspec.EncodeError) as exc:
        raise TypeError(f"The body cannot be sent as JSON: {exc}") from exc


def get_call(
    resource: Resource, name: str, *, namespace: str | None, subresource: str | None
) -> Call:
    ns = _namespace(resource, namespace)
    path = resource.get_url(namespace=ns, name=name, subresource=subresource)
    return Call("GET", path, idempotent=True)


def list_call(
    resource: Resource,
    *,
    namespace: str | None,
    label_selector: Selector,
    field_selector: Selector,
    limit: int | None,
    continue_: str | None,
) -> Call:
    """A listing: ``namespace=None`` lists a namespaced resource in all namespaces."""
    if not resource.namespaced and namespace is not None:
        raise ValueError(f"{resource} is cluster-scoped: it has no namespace ({namespace!r}).")
    params: dict[str, str] = {}
    labels, fields = _selector(label_selector), _selector(field_selector)
    if labels:
        params["labelSelector"] = labels
    if fields:
        params["fieldSelector"] = fields
    if limit is not None:
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit}.")
        params["limit"] = str(limit)
    if continue_:
        params["continue"] = continue_
    return Call("GET", resource.get_url(namespace=namespace), params, idempotent=True)


def watch_call(
    resource: Resource,
    *,
    namespace: str | None,
    label_selector: Selector,
    field_selector: Selector,
    resource_version: str | None,
    timeout_seconds: float,
) -> Call:
    listing = list_call(
        resource,
        namespace=namespace,
        label_selector=label_selector,
        field_selector=field_selector,
        limit=None,
        continue_=None,
    )
    params = dict(listing.params)
    params["watch"] = "true"
    params["allowWatchBookmarks"] = "true"
    params["timeoutSeconds"] = str(max(1, int(timeout_seconds)))
    if resource_version is not None:
        params["resourceVersion"] = resource_version
    return Call("GET", listing.path, params, idempotent=True)


def create_call(
    resource: Resource,
    body: Mapping[str, Any],
    *,
    namespace: str | None,
    subresource: str | None,
    field_manager: str | None,
    dry_run: bool,
) -> Call:
    ns = _namespace(resource, namespace, body)
    name = _name(None, body) if subresource is not None else None
    path = resource.get_url(namespace=ns, name=name, subresource=subresource)
    params = _write_params(field_manager, dry_run)
    return Call("POST", path, params, _encode(body), "application/json")


def replace_call(
    resource: Resource,
    body: Mapping[str, Any],
    *,
    name: str | None,
    namespace: str | None,
    subresource: str | None,
    field_manager: str | None,
    dry_run: bool,
) -> Call:
    ns = _namespace(resource, namespace, body)
    path = resource.get_url(namespace=ns, name=_name(name, body), subresource=subresource)
    params = _write_params(field_manager, dry_run)
    return Call("PUT", path, params, _encode(body), "application/json")


def patch_call(
    resource: Resource,
    name: str,
    patch: object,
    *,
    type: PatchType,
    namespace: str | None,
    subresource: str | None,
    field_manager: str | None,
    dry_run: bool,
) -> Call:
    content_type = _PATCH_CONTENT_TYPES.get(type)
    if content_type is None:
        choices = ", ".join(repr(key) for key in _PATCH_CONTENT_TYPES)
        raise ValueError(f"Unknown patch type {type!r}: one of {choices} (or use apply()).")
    if type == "json" and not isinstance(patch, list):
        raise TypeError("A JSON patch is a list of operations ({'op': ..., 'path': ...}).")
    if type != "json" and not isinstance(patch, Mapping):
        raise TypeError(f"A {type} patch is a mapping of fields, got {patch.__class__.__name__}.")
    ns = _namespace(resource, namespace)
    path = resource.get_url(namespace=ns, name=name, subresource=subresource)
    params = _write_params(field_manager, dry_run)
    return Call("PATCH", path, params, _encode(patch), content_type)


def apply_call(
    resource: Resource,
    body: Mapping[str, Any],
    *,
    field_manager: str,
    force: bool,
    namespace: str | None,
    subresource: str | None,
    dry_run: bool,
) -> Call:
    """Server-side apply: the body is the intent of ``field_manager`` (the fields it owns)."""
    if not field_manager:
        raise ValueError("Server-side apply needs a field manager: field_manager='my-operator'.")
    if not body.get("apiVersion") or not body.get("kind"):
        raise ValueError(
            f"An applied body needs apiVersion and kind (e.g. {resource.api_version!r}, "
            f"{resource.kind!r})."
        )
    ns = _namespace(resource, namespace, body)
    path = resource.get_url(namespace=ns, name=_name(None, body), subresource=subresource)
    params = _write_params(field_manager, dry_run, force)
    # The same intent sent twice gives the same object: safe to retry.
    return Call("PATCH", path, params, _encode(body), APPLY_CONTENT_TYPE, idempotent=True)


def delete_call(
    resource: Resource,
    name: str,
    *,
    namespace: str | None,
    propagation_policy: Literal["Foreground", "Background", "Orphan"] | None,
    grace_period_seconds: int | None,
    uid: str | None,
    resource_version: str | None,
    dry_run: bool,
) -> Call:
    """A deletion; ``uid``/``resource_version`` are preconditions (409 if the object differs)."""
    ns = _namespace(resource, namespace)
    options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
    if propagation_policy is not None:
        options["propagationPolicy"] = propagation_policy
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    preconditions = {
        key: value
        for key, value in (("uid", uid), ("resourceVersion", resource_version))
        if value is not None
    }
    if preconditions:
        options["preconditions"] = preconditions
    if dry_run:
        options["dryRun"] = ["All"]
    path = resource.get_url(namespace=ns, name=name)
    return Call("DELETE", path, {}, _encode(options), "application/json")


def decode_object(body: bytes, what: str) -> dict[str, Any]:
    """The JSON object of a response; :class:`APIProtocolError` if it is anything else."""
    try:
        decoded = _DECODER.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise APIProtocolError(f"{what}: the response is not JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise APIProtocolError(f"{what}: the response is not a JSON object")
    return decoded


def error_of(status: int, body: bytes, headers: Mapping[str, str]) -> APIError:
    """The typed error for a failed response (field conflicts of an apply included)."""
    return with_field_conflicts(error_from_response(status, body, headers))


def retriable(error: APIError | APIConnectionError, call: Call) -> bool:
    """Whether a failed call is worth sending again (after a delay).

    429 always (the server did nothing); server errors and connection failures only when
    sending twice is harmless. Timeouts are not retried: the caller's time is used up.
    """
    if isinstance(error, APITooManyRequestsError):
        return True
    if isinstance(error, APIServerError | APIConnectionError) and not isinstance(
        error, APIProtocolError | TimeoutError
    ):
        return call.idempotent
    return False


class Attempts:
    """What to do after a call failed, for both clients: log in again (a 401, at most
    ``settings.relogins`` times), send again after a delay (what :func:`retriable` allows, at
    most ``settings.retries`` times), or give up and raise."""

    __slots__ = ("relogins", "retries", "settings")

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self.relogins = 0
        self.retries = 0

    def relogin(self, failure: APIError | APIConnectionError, what: str) -> bool:
        """Whether to invalidate the credentials and send again (counted if so)."""
        if isinstance(failure, APIUnauthorizedError) and self.relogins < self.settings.relogins:
            self.relogins += 1
            logger.debug(f"{what}: {failure}; logging in again.")
            return True
        return False

    def retry_delay(self, failure: APIError | APIConnectionError, call: Call) -> float | None:
        """The delay before sending ``call`` again (counted), or ``None``: raise ``failure``."""
        if self.retries >= self.settings.retries or not retriable(failure, call):
            return None
        self.retries += 1
        retry_after = failure.retry_after if isinstance(failure, APIError) else None
        delay = self.settings.delay(self.retries, retry_after)
        logger.debug(f"{call.what}: {failure}; retry {self.retries} in {delay:g} s.")
        return delay


@dataclasses.dataclass
class Page:
    """One page of a listing: its objects, the token of the next page, the listing's version."""

    items: list[dict[str, Any]]
    token: str | None
    resource_version: str | None


def read_page(listing: Mapping[str, Any], resource: Resource) -> Page:
    """The page of a decoded listing. Items of a listing come without apiVersion and kind:
    they are put back, so that the objects can be sent again as they are (applied, adopted)."""
    meta = listing.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    token = meta.get("continue")
    version = meta.get("resourceVersion")
    items = listing.get("items")
    page = [item for item in items if isinstance(item, dict)] if items else []
    kind = listing.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and resource.kind:
        for item in page:
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
    return Page(
        items=page,
        token=token if isinstance(token, str) and token else None,
        resource_version=version if isinstance(version, str) else None,
    )
