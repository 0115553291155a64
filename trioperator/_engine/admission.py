"""Admission decisions without I/O: which handlers answer a review, with which kwargs, and how
their outcomes become the response; and the contents of the managed webhook configurations.

The runtime (``_runtime/admission/admission.py``) decodes a review, calls :func:`find_resource`,
:func:`select_handlers` and :class:`WebhookCause`, invokes the handlers, and turns their errors
into the response with :func:`judge` and :func:`mutation_patch`. Requests that cannot be
answered with a review at all raise ``WebhookRejected`` (servers answer with an HTTP error).

Behaviour follows Kopf: handlers of one review run one after another; every failure rejects the
admission and the reported one is the most specific (``AdmissionError`` first, then permanent,
then temporary, then arbitrary errors); mutating handlers are not called for DELETE unless
declared for DELETE alone; ``patch`` (a merge-patch) is returned as a JSON-patch against the
object under review.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import re
import urllib.parse
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from trioperator._client.resources import Resource
from trioperator._engine.bodies import Body
from trioperator._engine.causes import ResourceCause
from trioperator._engine.diffs import Diff
from trioperator._engine.errors import AdmissionError, PermanentError, TemporaryError
from trioperator._engine.filters import MetaFilter, MetaFilterToken
from trioperator._engine.handlers import WebhookHandler, WebhookType
from trioperator._engine.patches import JSONPatch, Patch, apply_merge_patch, build_json_patch
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.webhooks import Headers, SSLPeer, WebhookClientConfig, WebhookRejected

__all__ = [
    "REVIEW_VERSIONS",
    "CaseInsensitiveHeaders",
    "WebhookCause",
    "build_webhooks",
    "find_resource",
    "handlers_of_type",
    "judge",
    "labels_selector",
    "mutation_patch",
    "resolve_webhook_id",
    "select_handlers",
    "url_with_handler_id",
    "webhook_name",
]

REVIEW_VERSIONS: Final = ("v1", "v1beta1")
"""``admissionReviewVersions`` of the managed webhooks: the versions the operator decodes."""


# ----------------------------------------------------------------------------------- reviews


@dataclasses.dataclass(frozen=True)
class WebhookCause(ResourceCause):
    """One admission review, as the handlers see it (the kwargs Kopf gives them)."""

    operation: str | None
    subresource: str | None
    dryrun: bool
    userinfo: Mapping[str, Any]
    headers: Headers
    sslpeer: SSLPeer
    warnings: list[str]
    """Mutable: handlers append to it; the strings are returned to the client."""
    old: Body | None = None
    new: Body | None = None
    diff: Diff | None = None

    def _own_kwargs(self) -> dict[str, Any]:
        return {
            **super()._own_kwargs(),
            "operation": self.operation,
            "subresource": self.subresource,
            "dryrun": self.dryrun,
            "userinfo": self.userinfo,
            "headers": self.headers,
            "sslpeer": self.sslpeer,
            "warnings": self.warnings,
            "old": self.old,
            "new": self.new,
            "diff": self.diff,
        }


class CaseInsensitiveHeaders(Mapping[str, str]):
    """HTTP headers as handlers get them: names match in any case (``headers['User-Agent']``).

    Kopf's servers give handlers aiohttp's case-insensitive headers; Kopf's own examples look
    them up by their usual capitalisation, while servers here pass lower-case names.
    """

    __slots__ = ("_items",)

    def __init__(self, headers: Mapping[str, str] | None = None) -> None:
        self._items: dict[str, tuple[str, str]] = {
            name.lower(): (name, value) for name, value in (headers or {}).items()
        }

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()][1]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def find_resource(
    resources: Iterable[Resource], *, group: str, version: str, plural: str
) -> Resource:
    """The served resource a review is about (its ``request.resource``), or a 404 rejection.

    With ``matchPolicy: Equivalent`` the API server converts the object to the version the
    webhook registered for and names that version here, so an exact match is what to look for.
    """
    for resource in resources:
        if (resource.group, resource.version, resource.plural) == (group, version, plural):
            return resource
    gvr = f"{plural}.{version}.{group}" if group else f"{plural}.{version}"
    raise WebhookRejected(f"No admission handlers for the resource {gvr}.", status=404)


def resolve_webhook_id(registry: OperatorRegistry, webhook: str | None) -> str | None:
    """The handler id a URL path addresses (``None``: all handlers), or a 404 rejection.

    Servers pass the path's remainder; it may still be URL-quoted (ids may hold ``/``).
    """
    if not webhook:
        return None
    ids = {handler.id for handler in registry.get_handlers(WebhookHandler)}
    for candidate in (webhook, urllib.parse.unquote(webhook)):
        if candidate in ids:
            return candidate
    raise WebhookRejected(
        f"Unknown webhook {webhook!r}: no admission handler has this id.", status=404
    )


def select_handlers(
    registry: OperatorRegistry,
    *,
    resource: Resource,
    cause: WebhookCause,
    webhook: str | None,
) -> list[WebhookHandler]:
    """The handlers to call for one review, in their order of registration.

    ``webhook`` (a handler id from the URL path) narrows them to that handler; ``None`` means
    every matching handler (e.g. a manually configured webhook without per-handler paths).
    """
    handlers = registry.iter_webhook_handlers(
        resource=resource,
        body=cause.body,
        kwargs=lambda: cause.kwargs,
        webhook_id=webhook,
        operation=cause.operation,
        subresource=cause.subresource,
    )
    if cause.operation == "DELETE":
        # A mutation of an object being deleted makes no sense, unless asked for explicitly.
        handlers = [
            handler
            for handler in handlers
            if handler.reason != WebhookType.MUTATING or handler.operations == frozenset({"DELETE"})
        ]
    return handlers


def mutation_patch(body: Mapping[str, Any], patch: Patch) -> JSONPatch:
    """The JSON-patch that turns the object under review into what the handlers' patch says.

    Merge-patch first (``None`` removes a key, lists are replaced whole), then the patch's
    transformation functions. No ``test`` ops: the API server applies the patch to the very
    object it sent. Changes that are no-ops against the object produce no ops at all.
    """
    if not patch:
        return []
    merged = dict(patch)

    def merge(raw: dict[str, Any]) -> None:
        result = apply_merge_patch(raw, merged)
        raw.clear()
        raw.update(result)

    return build_json_patch(copy.deepcopy(dict(body)), [merge, *patch.fns], resource_version=None)


def _priority(error: BaseException) -> int:
    if isinstance(error, AdmissionError):
        return 0
    if isinstance(error, PermanentError):
        return 1
    if isinstance(error, TemporaryError):
        return 2
    return 9


def judge(errors: Iterable[BaseException | None]) -> tuple[bool, str | None, int | None]:
    """``(allowed, message, code)`` of a review from its handlers' errors (``None``: success).

    Any error rejects the admission. One error is reported: the most specific one, the first
    of equal ones. Its code is the ``AdmissionError``'s (500 if it has none), else 500.
    """
    failures = sorted((e for e in errors if e is not None), key=_priority)  # stable: first wins
    if not failures:
        return True, None, None
    error = failures[0]
    code = error.code if isinstance(error, AdmissionError) else None
    return False, str(error) or repr(error), code or 500


# ---------------------------------------------------------------------- managed configurations

_BAD_NAME_CHARS: Final = re.compile(r"[^a-z0-9.-]")
_MAX_NAME: Final = 253
_MAX_SEGMENT: Final = 63


def webhook_name(handler_id: str, suffix: str) -> str:
    """The name of a handler's webhook in a managed configuration: ``<id>.<suffix>``.

    As in Kopf, ``/`` becomes ``.`` and ``_`` becomes ``-``, other unacceptable characters
    their UTF-8 hex codes. Beyond Kopf, the result is made valid for the API (a lower-case
    DNS subdomain of at most 253 characters, every segment 1..63 characters starting and ending
    alphanumerically): letters are lower-cased, and an id that does not fit is shortened and
    made unique again with a hash of the full id.
    """
    name = handler_id.replace("/", ".").replace("_", "-").lower()
    name = _BAD_NAME_CHARS.sub(lambda m: m.group(0).encode("utf-8").hex(), name)
    segments = [segment.strip("-") for segment in name.split(".")]
    segments = [segment for segment in segments if segment]
    digest = hashlib.sha256(handler_id.encode("utf-8")).hexdigest()[:8]
    tail = f".{suffix}" if suffix else ""
    if any(len(segment) > _MAX_SEGMENT for segment in segments) or not segments:
        segments = [
            segment[: _MAX_SEGMENT - 9].rstrip("-") + f"-{digest}"
            if len(segment) > _MAX_SEGMENT
            else segment
            for segment in segments
        ] or [f"webhook-{digest}"]
    name = ".".join(segments)
    if len(name) + len(tail) > _MAX_NAME:
        room = max(_MAX_NAME - len(tail) - 9, 1)
        name = name[:room].rstrip(".-") + f"-{digest}"
    return f"{name}{tail}"


def url_with_handler_id(config: WebhookClientConfig, handler_id: str) -> WebhookClientConfig:
    """The server's client config with ``/<quoted handler id>`` appended to its URL or path."""
    result: WebhookClientConfig = copy.deepcopy(config)
    quoted = urllib.parse.quote(handler_id)  # as Kopf: "/" of sub-handler ids stays as it is
    url = result.get("url")
    if url is not None:
        result["url"] = f"{url.rstrip('/')}/{quoted}"
    service = result.get("service")
    if service is not None:
        service["path"] = f"{service.get('path', '').rstrip('/')}/{quoted}"
    return result


def labels_selector(labels: MetaFilter | None) -> dict[str, Any] | None:
    """An ``objectSelector`` from a handler's ``labels=`` filter (callables are checked later,
    by the operator itself, as they cannot be expressed as a selector)."""
    expressions: list[dict[str, Any]] = []
    for key, value in (labels or {}).items():
        if value is MetaFilterToken.PRESENT:
            expressions.append({"key": key, "operator": "Exists"})
        elif value is MetaFilterToken.ABSENT:
            expressions.append({"key": key, "operator": "DoesNotExist"})
        elif not callable(value):
            expressions.append({"key": key, "operator": "In", "values": [str(value)]})
    return {"matchExpressions": expressions} if expressions else None


def _rules(handler: WebhookHandler, resources: Iterable[Resource]) -> list[dict[str, Any]]:
    operations = sorted(handler.operations) if handler.operations else ["*"]
    rules: list[dict[str, Any]] = []
    for resource in sorted(resources, key=lambda r: (r.group, r.plural, r.version)):
        if handler.selector is None or not handler.selector.check(resource):
            continue
        if handler.subresource is None:
            plurals = [resource.plural]
        elif handler.subresource == "*":
            # "plural/*" alone would be only the subresources; the main body is meant too.
            plurals = [resource.plural, f"{resource.plural}/*"]
        else:
            plurals = [f"{resource.plural}/{handler.subresource}"]
        rules.append(
            {
                "apiGroups": [resource.group],
                "apiVersions": [resource.version],
                "resources": plurals,
                "operations": operations,
                "scope": "*",  # the resource itself already determines the scope
            }
        )
    return rules


def build_webhooks(
    handlers: Iterable[WebhookHandler],
    *,
    resources: Collection[Resource],
    name_suffix: str,
    client_config: WebhookClientConfig,
    persistent_only: bool = False,
    namespace_selector: Mapping[str, Any] | None = None,
    timeout_seconds: int = 30,
) -> list[dict[str, Any]]:
    """The ``webhooks`` of a Validating/MutatingWebhookConfiguration: one per handler.

    Handlers whose resources are not served (no rules) get no webhook. ``persistent_only``
    keeps only ``persistent=True`` handlers: what stays when the operator exits.
    """
    webhooks: list[dict[str, Any]] = []
    names: set[str] = set()
    for handler in handlers:
        if persistent_only and not handler.persistent:
            continue
        rules = _rules(handler, resources)
        if not rules:
            continue
        name = webhook_name(handler.id, name_suffix)
        if name in names:  # e.g. ids differing only in case: names must be unique
            digest = hashlib.sha256(handler.id.encode("utf-8")).hexdigest()[:8]
            name = webhook_name(f"{handler.id}-{digest}", name_suffix)
        names.add(name)
        webhook: dict[str, Any] = {
            "name": name,
            "sideEffects": "NoneOnDryRun" if handler.side_effects else "None",
            "failurePolicy": "Ignore" if handler.ignore_failures else "Fail",
            "matchPolicy": "Equivalent",
            "rules": rules,
            "clientConfig": url_with_handler_id(client_config, handler.id),
            "timeoutSeconds": timeout_seconds,
            "admissionReviewVersions": list(REVIEW_VERSIONS),
        }
        object_selector = labels_selector(handler.labels)
        if object_selector is not None:
            webhook["objectSelector"] = object_selector
        if namespace_selector is not None:
            webhook["namespaceSelector"] = dict(namespace_selector)
        webhooks.append(webhook)
    return webhooks


def handlers_of_type(
    registry: OperatorRegistry, webhook_type: WebhookType
) -> Sequence[WebhookHandler]:
    return [h for h in registry.get_handlers(WebhookHandler) if h.reason == webhook_type]
