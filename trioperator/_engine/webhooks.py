"""The contract between admission webhook servers and the operator that answers their reviews.

A *server* (``settings.admission.server``) receives AdmissionReview requests over HTTP(S) from
the API server, hands each one to the operator's ``WebhookFn`` and tells the operator where it
can be reached (a ``WebhookClientConfig``) so that the managed webhook configurations point to
it. Two shapes of server are accepted:

* trio-native (every server in ``trioperator._kits.webhooks``): an object with
  ``async def serve(fn, *, configs, task_status)``. It serves until cancelled, sends a new
  client config into ``configs`` whenever its address or CA bundle changes (e.g. after a
  certificate rotation) and calls ``task_status.started()`` once it accepts connections. Its
  listening tasks live in the operator's nursery tree like every other activity.
* Kopf-shaped: a callable that takes ``fn`` and returns an async iterator of client configs
  (e.g. a user's async generator that yields the URL of an existing tunnel). The operator
  iterates it in a task of its own; such a generator must not open nurseries across yields.

This module holds only types and errors; it does no I/O, so servers (``_kits``) and the
operator (``_runtime``) can both import it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal, Protocol, TypeAlias, TypedDict

import trio

__all__ = [
    "Headers",
    "Operation",
    "SSLPeer",
    "UserInfo",
    "WebhookClientConfig",
    "WebhookClientConfigService",
    "WebhookFn",
    "WebhookRejected",
    "WebhookServerProtocol",
    "TrioWebhookServer",
]

Headers: TypeAlias = Mapping[str, str]
"""The HTTP request headers of a review, names in lower case."""

SSLPeer: TypeAlias = Mapping[str, Any]
"""The verified client certificate of a review's connection (as ``ssl`` gives it), or empty."""

Operation: TypeAlias = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class UserInfo(TypedDict, total=False):
    """Who sent the request under admission (the review's ``userInfo``): the ``userinfo`` kwarg."""

    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class WebhookClientConfigService(TypedDict, total=False):
    """The in-cluster Service a webhook configuration sends reviews to (instead of a URL)."""

    namespace: str
    name: str
    path: str
    port: int


class WebhookClientConfig(TypedDict, total=False):
    """Where the API server sends reviews: a URL or an in-cluster service, and the CA bundle."""

    caBundle: str  # base64 of the PEM bundle, as the API stores it
    url: str
    service: WebhookClientConfigService


class WebhookRejected(Exception):
    """A request a server must answer with an HTTP error instead of a review response.

    Raised by ``WebhookFn`` for an unparsable review, an unknown webhook id or a resource
    nothing serves; servers send ``status`` with ``message`` as the body.
    """

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class WebhookFn(Protocol):
    """The operator's side of a review: the request body in, the response review out.

    ``request`` is the raw JSON body (decoded here with msgspec) or an already decoded mapping
    (Kopf-shaped servers may pass either); ``webhook`` is the handler id taken from the URL path
    (``None`` runs every matching handler). The result is the AdmissionReview to send back.
    """

    async def __call__(
        self,
        request: bytes | Mapping[str, Any],
        *,
        webhook: str | None = None,
        headers: Headers | None = None,
        sslpeer: SSLPeer | None = None,
    ) -> dict[str, Any]: ...


WebhookServerProtocol: TypeAlias = Callable[[WebhookFn], AsyncIterator[WebhookClientConfig]]
"""Kopf's shape of a server: called with the operator's function, yields client configs."""


class TrioWebhookServer(Protocol):
    """The trio-native shape of a server (see the module's docstring)."""

    async def serve(
        self,
        fn: WebhookFn,
        *,
        configs: trio.MemorySendChannel[WebhookClientConfig],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None: ...
