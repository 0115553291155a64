"""Admission webhooks: answering reviews, running the server, managing the configurations.

Task tree (a branch of the operator's serving nursery, started after the orchestrator, so the
served resources are known when the first review arrives)::

    run_admission
    ├── webhook server            settings.admission.server: trio-native ``serve()`` or
    │                             Kopf's async iterator of client configs (see _engine/webhooks)
    └── configuration manager     (with settings.admission.managed) client configs and served
                                  resources -> Validating/MutatingWebhookConfiguration

The server calls :class:`AdmissionServing` (the operator's ``WebhookFn``) for every review and sends
its client config (URL or service, CA bundle) whenever it changes; the manager patches both
configurations with one webhook per handler pointing at ``<url>/<handler id>``, and again whenever
the config or the served resources change. A configuration that does not exist (yet, or any more) is
created first; only ``create`` and ``patch`` permissions are needed. The server's task sees the
operator's API client and ``settings.serving`` as its
:class:`~trioperator._runtime.admission.webhook_serving.ServerSupport` (e.g. for the CA that the
replicas of a ``WebhookServiceServer`` share in a Secret, and for the limits of its connections).

Differences from Kopf: a review is cut off after ``settings.admission.timeout_seconds`` (the
API server has given up by then); ``namespace_selector`` and ``timeout_seconds`` reach the
managed webhooks; a ``subresource='*'`` webhook also covers the main resource (Kopf's rule
``plural/*`` covers only the subresources); the memos of objects that no watcher serves are
kept for at most ``MAX_KEPT_MEMOS`` objects (Kopf keeps them without a limit).

Stop order: on a graceful stop, the manager removes the non-persistent webhooks first (shielded,
for at most ``CLEANUP_TIMEOUT``), then the server is cancelled: so the API server does not call a
webhook that is no longer there (with ``failurePolicy: Fail`` that would block admissions).
"""

from __future__ import annotations

import collections
import contextlib
import math
from collections.abc import Mapping
from functools import partial
from typing import Any, Final, Protocol

import msgspec
import trio

from trioperator._client.api import APIClient
from trioperator._client.errors import (
    APIConflictError,
    APIConnectionError,
    APIError,
    APIForbiddenError,
    APINotFoundError,
)
from trioperator._client.resources import ALL_VERBS, Resource
from trioperator._engine.admission import (
    CaseInsensitiveHeaders,
    WebhookCause,
    build_webhooks,
    find_resource,
    handlers_of_type,
    judge,
    mutation_patch,
    resolve_webhook_id,
    select_handlers,
    url_with_handler_id,
)
from trioperator._engine.bodies import Body
from trioperator._engine.conversion import (
    CONVERSION_PATH,
    conversion_stanza,
    convert_review,
    served_conversions,
)
from trioperator._engine.diffs import diff
from trioperator._engine.errors import ErrorsMode, PermanentError
from trioperator._engine.handlers import WebhookHandler, WebhookType
from trioperator._engine.memos import copy_memo
from trioperator._engine.patches import Patch
from trioperator._engine.progression import HandlerState
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings, ServingSettings
from trioperator._engine.webhooks import (
    Headers,
    SSLPeer,
    WebhookClientConfig,
    WebhookFn,
    WebhookRejected,
)
from trioperator._runtime.admission.webhook_serving import ServerSupport, providing
from trioperator._runtime.handling.execution import Execution, run_handler_once
from trioperator._runtime.handling.loggers import LocalObjectLogger
from trioperator._runtime.support.metrics import OperatorMetrics
from trioperator._util.lognames import framework_logger
from trioperator._wire.admission import (
    AdmissionReview,
    ReviewDecodeError,
    build_response,
    decode_review,
)

__all__ = [
    "MUTATING_CONFIGURATIONS",
    "VALIDATING_CONFIGURATIONS",
    "AdmissionInsights",
    "AdmissionServing",
    "AdmissionSetupError",
    "run_admission",
]

logger = framework_logger("kopf._core.engines.admission", __name__)

DECODE_IN_THREAD: Final = 256 * 1024
"""Reviews larger than this (bytes) are decoded in a worker thread: a review of megabytes
takes milliseconds to decode, during which the event loop would serve nothing else (other
reviews, probes, watches)."""

CLEANUP_TIMEOUT: Final = 10.0
"""How long removing the non-persistent webhooks may take on exit (it runs shielded)."""

MAX_KEPT_MEMOS: Final = 10_000
"""How many memos of objects that no watcher serves are kept between their reviews."""

NO_SERVER_MESSAGE: Final = (
    "Admission handlers exist, but no admission server/tunnel is configured "
    "in `settings.admission.server`. "
    "More: https://docs.kopf.dev/en/stable/admission/"
)


def _configurations(kind: str) -> Resource:
    """The cluster-wide resource of the webhook configurations of one ``kind``."""
    return Resource(
        group="admissionregistration.k8s.io",
        version="v1",
        plural=f"{kind.lower()}s",
        kind=kind,
        singular=kind.lower(),
        namespaced=False,
        verbs=ALL_VERBS,
    )


VALIDATING_CONFIGURATIONS: Final = _configurations("ValidatingWebhookConfiguration")
MUTATING_CONFIGURATIONS: Final = _configurations("MutatingWebhookConfiguration")

_CONFIGURATIONS: Final = (
    (WebhookType.VALIDATING, VALIDATING_CONFIGURATIONS),
    (WebhookType.MUTATING, MUTATING_CONFIGURATIONS),
)


class AdmissionSetupError(Exception):
    """The operator cannot serve its admission handlers as configured."""


class AdmissionInsights(Protocol):
    """What admission needs to know about the cluster (the orchestrator provides it)."""

    @property
    def webhook_resources(self) -> frozenset[Resource]:
        """The discovered resources that admission handlers are declared for."""
        ...

    async def wait_webhook_resources_revised(self) -> None:
        """Return when ``webhook_resources`` change (after this call)."""
        ...

    def recall_memo(self, resource: Resource, body: Mapping[str, Any]) -> Any | None:
        """The memo of an object the operator already serves, or ``None``."""
        ...


# ----------------------------------------------------------------------------------- serving


class AdmissionServing:
    """The operator's ``WebhookFn``: a review in, the response review out.

    Requests that cannot be answered with a review raise ``WebhookRejected`` (400: not a
    review, or one without the data it needs; 404: an unknown webhook id or a resource without
    admission handlers; 500: a failure of the operator itself, never of a handler). Failures of
    handlers are answered as rejected admissions, as in Kopf.
    """

    def __init__(
        self,
        *,
        registry: OperatorRegistry,
        settings: OperatorSettings,
        memo: Any,
        indices: Mapping[str, Any],
        insights: AdmissionInsights,
        execution: Execution,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.memo = memo
        self.indices = indices
        self.insights = insights
        self.execution = execution
        self.metrics = metrics
        self._memos: collections.OrderedDict[str, Any] = collections.OrderedDict()
        """Memos of objects that no watcher serves, by uid, the least recently used first."""

    async def __call__(
        self,
        request: bytes | Mapping[str, Any],
        *,
        webhook: str | None = None,
        headers: Headers | None = None,
        sslpeer: SSLPeer | None = None,
    ) -> dict[str, Any]:
        try:
            return await self._serve(request, webhook=webhook, headers=headers, sslpeer=sslpeer)
        except WebhookRejected as exc:
            logger.warning(f"Admission request rejected with HTTP {exc.status}: {exc.message}")
            raise
        except Exception as exc:
            # A bug of the operator, not of a handler (those become rejected admissions): the
            # server must still answer, and the operator must go on serving.
            logger.exception(f"Admission request failed in the operator: {exc!r}")
            raise WebhookRejected(f"The operator failed: {exc!r}", status=500) from exc

    async def _serve(
        self,
        request: bytes | Mapping[str, Any],
        *,
        webhook: str | None,
        headers: Headers | None,
        sslpeer: SSLPeer | None,
    ) -> dict[str, Any]:
        if webhook is not None and webhook.startswith(CONVERSION_PATH):
            return await self._convert(request, crd=webhook[len(CONVERSION_PATH) :])
        try:
            if isinstance(request, bytes) and len(request) > DECODE_IN_THREAD:
                review = await trio.to_thread.run_sync(decode_review, request)
            else:
                review = decode_review(request)
        except ReviewDecodeError as exc:
            raise WebhookRejected(str(exc), status=400) from None
        handler_id = resolve_webhook_id(self.registry, webhook)
        payload = review.request
        resource = find_resource(
            self.insights.webhook_resources,
            group=payload.resource.group,
            version=payload.resource.version,
            plural=payload.resource.resource,
        )
        if payload.user_info is None:
            raise WebhookRejected("User info is missing from the admission request.", status=400)
        raw_body = payload.object if payload.object is not None else payload.old_object
        if raw_body is None:
            raise WebhookRejected(
                "Either old or new object is missing from the admission request.", status=400
            )

        cause = self._build_cause(review, resource, raw_body, headers=headers, sslpeer=sslpeer)
        handlers = select_handlers(
            self.registry, resource=resource, cause=cause, webhook=handler_id
        )
        errors: list[BaseException | None] = []
        # The API server gives up after timeoutSeconds: handlers running longer are of no use.
        timeout = self.settings.admission.timeout_seconds
        with trio.move_on_after(timeout) as scope:
            for handler in handlers:
                errors.append(await self._run(handler, cause))
        if scope.cancelled_caught:
            late = f"Admission handlers did not finish within {timeout} seconds."
            cause.logger.error(late)
            errors.append(PermanentError(late))
        allowed, message, code = judge(errors)
        if self.metrics is not None:
            self.metrics.review_done(handler_id or "", allowed)
        mutating = any(handler.reason == WebhookType.MUTATING for handler in handlers)
        json_patch = mutation_patch(raw_body, cause.patch) if mutating else []
        cause.logger.debug(
            f"Admission {payload.operation} ({len(handlers)} handler(s)): "
            f"{'allowed' if allowed else 'rejected'}"
            f"{f' with {len(json_patch)} patch op(s)' if json_patch else ''}."
        )
        return build_response(
            review,
            allowed=allowed,
            warnings=cause.warnings,
            json_patch=json_patch,
            message=message,
            code=code,
        )

    async def _convert(self, request: bytes | Mapping[str, Any], *, crd: str) -> dict[str, Any]:
        """A ConversionReview of a typed resource (docs/typed-resources.md)."""
        if crd not in served_conversions(self.registry.iter_all_handlers()):
            raise WebhookRejected(f"No conversions are served for {crd!r}.", status=404)
        try:
            review = msgspec.json.decode(request) if isinstance(request, bytes) else request
            if not isinstance(review, Mapping) or review.get("kind") != "ConversionReview":
                raise ValueError("not a ConversionReview")
            if isinstance(request, bytes) and len(request) > DECODE_IN_THREAD:
                response = await trio.to_thread.run_sync(convert_review, review)
            else:
                response = convert_review(review)
        except (msgspec.DecodeError, ValueError) as exc:
            raise WebhookRejected(f"Not a ConversionReview request: {exc}", status=400) from None
        result = response["response"]["result"]
        if result["status"] != "Success":
            logger.error(f"Conversion of {crd} failed: {result.get('message')}")
        return response

    def _build_cause(
        self,
        review: AdmissionReview,
        resource: Resource,
        raw_body: dict[str, Any],
        *,
        headers: Headers | None,
        sslpeer: SSLPeer | None,
    ) -> WebhookCause:
        payload = review.request
        body = Body(raw_body)
        old = Body(payload.old_object) if payload.old_object is not None else None
        new = Body(payload.object) if payload.object is not None else None
        return WebhookCause(
            # As in Kopf: never posted as events. The object under review may not exist (yet,
            # or ever: creations, dry runs), and an event per review would flood the cluster.
            logger=LocalObjectLogger(raw_body),
            memo=self._recall_memo(resource, body, payload.operation, bool(payload.dry_run)),
            indices=self.indices,
            resource=resource,
            patch=Patch(),
            body=body,
            operation=payload.operation,
            subresource=payload.sub_resource,
            dryrun=bool(payload.dry_run),
            userinfo=payload.user_info or {},
            headers=CaseInsensitiveHeaders(headers),
            sslpeer=sslpeer if sslpeer is not None else {},
            warnings=[],
            old=old,
            new=new,
            diff=diff(old, new),
        )

    def _recall_memo(self, resource: Resource, body: Body, operation: str, dryrun: bool) -> Any:
        """The object's memo, as in Kopf: a throw-away one for an object being created; the
        memo of the object as the operator serves it; else one kept here between reviews (the
        resource has admission handlers only), bounded, and forgotten when it is deleted."""
        if operation == "CREATE":
            return copy_memo(self.memo)
        memo = self.insights.recall_memo(resource, body)
        if memo is not None:
            return memo
        uid = body.metadata.uid
        if not uid:
            return copy_memo(self.memo)
        memo = self._memos.pop(uid, None)
        if memo is None:
            memo = copy_memo(self.memo)
        if operation != "DELETE" or dryrun:
            self._memos[uid] = memo  # the most recently used goes last
            while len(self._memos) > MAX_KEPT_MEMOS:
                self._memos.popitem(last=False)
        return memo

    async def _run(self, handler: WebhookHandler, cause: WebhookCause) -> BaseException | None:
        # No retries in admission: every error is final (Kopf's PERMANENT mode).
        outcome = await run_handler_once(
            handler,
            cause=cause,
            handler_state=HandlerState.from_scratch(now=self.execution.now()),
            execution=self.execution,
            logger=cause.logger,
            default_errors=ErrorsMode.PERMANENT,
        )
        return outcome.exception


# ----------------------------------------------------------------------------------- running


async def run_admission(
    *,
    api: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    fn: WebhookFn,
    insights: AdmissionInsights,
    stopping: trio.Event,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admission handlers until ``stopping`` is set; see the module's docstring.

    Reports started once the server accepts connections (trio-native servers say when; a
    Kopf-shaped one is assumed to from its start). Without admission handlers, nothing runs.
    """
    conversions = served_conversions(registry.iter_all_handlers())
    if not registry.get_handlers(WebhookHandler) and not conversions:
        if settings.admission.server is not None:
            logger.info("No admission handlers: the admission server is not started.")
        task_status.started()
        await stopping.wait()
        return
    server = settings.admission.server
    if server is None:
        raise AdmissionSetupError(NO_SERVER_MESSAGE)
    if not callable(getattr(server, "serve", None)) and not callable(server):
        raise AdmissionSetupError(
            f"settings.admission.server must be a webhook server or a callable returning an "
            f"async iterator of client configs; got {server!r}."
        )

    send, receive = trio.open_memory_channel[WebhookClientConfig](math.inf)
    async with trio.open_nursery() as serving:
        await serving.start(
            partial(_run_server, server, fn, send, api, settings.serving), name="admission server"
        )
        try:
            async with trio.open_nursery() as managing:
                if settings.admission.managed is not None:
                    managing.start_soon(
                        partial(
                            _manage_configurations,
                            api=api,
                            registry=registry,
                            settings=settings,
                            insights=insights,
                            configs=receive,
                            conversions=conversions,
                        ),
                        name="admission configurations",
                    )
                else:
                    managing.start_soon(_log_configs, receive, name="admission client configs")
                task_status.started()
                await stopping.wait()
                # The manager removes its webhooks while the server still answers.
                managing.cancel_scope.cancel()
        finally:
            serving.cancel_scope.cancel()


async def _run_server(
    server: Any,
    fn: WebhookFn,
    configs: trio.MemorySendChannel[WebhookClientConfig],
    api: APIClient,
    limits: ServingSettings,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with providing(ServerSupport(api=api, limits=limits)):
        await _serve_with(server, fn, configs, task_status=task_status)


async def _serve_with(
    server: Any,
    fn: WebhookFn,
    configs: trio.MemorySendChannel[WebhookClientConfig],
    *,
    task_status: trio.TaskStatus[None],
) -> None:
    serve = getattr(server, "serve", None)
    if callable(serve):
        await serve(fn, configs=configs, task_status=task_status)
        raise AdmissionSetupError(f"The admission server {server!r} stopped on its own.")
    task_status.started()
    async with contextlib.AsyncExitStack() as stack:
        if hasattr(server, "__aenter__") and hasattr(server, "__aexit__"):
            server = await stack.enter_async_context(server)
        iterator = server(fn)
        if hasattr(iterator, "aclose"):
            stack.push_async_callback(iterator.aclose)
        async for config in iterator:
            configs.send_nowait(config)
    # A finished iterator means that no new configs will come (e.g. a fixed tunnel's URL).
    logger.info("The admission server gave its last client config; it is kept as it is.")
    await trio.sleep_forever()


async def _log_configs(receive: trio.MemoryReceiveChannel[WebhookClientConfig]) -> None:
    async for config in receive:
        where = config.get("url") or config.get("service")
        logger.info(
            f"Admission webhooks are served at {where} "
            "(not managed: settings.admission.managed is not set)."
        )


async def _manage_configurations(
    *,
    api: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: AdmissionInsights,
    configs: trio.MemoryReceiveChannel[WebhookClientConfig],
    conversions: frozenset[str] = frozenset(),
) -> None:
    """Keep both configurations in step with the client config and the served resources, and
    the conversion of the CRDs in ``conversions`` pointed at the server."""
    name = settings.admission.managed
    assert name is not None
    latest: WebhookClientConfig | None = None
    wake = trio.Event()

    async def receive_configs() -> None:
        nonlocal latest
        async for config in configs:
            latest = config
            wake.set()

    async def follow_resources() -> None:
        while True:
            await insights.wait_webhook_resources_revised()
            wake.set()

    applied: tuple[WebhookClientConfig, frozenset[Resource]] | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive_configs, name="admission client configs")
            nursery.start_soon(follow_resources, name="admission resources")
            while True:
                await wake.wait()
                wake = trio.Event()
                if latest is None:
                    continue
                wanted = (latest, insights.webhook_resources)
                if applied is not None and wanted == applied:
                    continue
                if applied is None or applied[0] != latest:
                    await _patch_conversions(api, conversions, latest)
                if registry.get_handlers(WebhookHandler):
                    logger.info(f"Reconfiguring the admission webhooks {name!r}.")
                    await _patch_configurations(api, registry, settings, *wanted)
                applied = wanted
    finally:
        # The conversions stay: without them, objects could not be read in other versions.
        if applied is not None and registry.get_handlers(WebhookHandler):
            with trio.move_on_after(CLEANUP_TIMEOUT, shield=True) as scope:
                logger.info(f"Cleaning up the admission webhooks {name!r}.")
                try:
                    await _patch_configurations(
                        api, registry, settings, *applied, persistent_only=True
                    )
                except (APIError, APIConnectionError) as exc:
                    # Not raised: it would replace what ends the operator (e.g. the stop).
                    logger.error(f"The admission webhooks {name!r} were not cleaned up: {exc}")
            if scope.cancelled_caught:
                logger.error(
                    f"The admission webhooks {name!r} were not cleaned up within "
                    f"{CLEANUP_TIMEOUT:g} seconds: the non-persistent ones may remain."
                )


CRDS: Final = Resource(
    group="apiextensions.k8s.io",
    version="v1",
    plural="customresourcedefinitions",
    kind="CustomResourceDefinition",
    singular="customresourcedefinition",
    namespaced=False,
    verbs=ALL_VERBS,
)


async def _patch_conversions(
    api: APIClient, conversions: frozenset[str], client_config: WebhookClientConfig
) -> None:
    """Point the ``spec.conversion`` of each CRD at the server (its path for that CRD)."""
    for crd in sorted(conversions):
        stanza = conversion_stanza(url_with_handler_id(client_config, f"{CONVERSION_PATH}{crd}"))
        logger.info(f"Serving the conversions of {crd}.")
        try:
            await api.patch(CRDS, name=crd, payload={"spec": {"conversion": stanza}}, logger=logger)
        except APIForbiddenError:
            logger.error(
                f"Not enough RBAC permissions to set the conversion of {crd} "
                "(needed: patch on customresourcedefinitions)."
            )
            raise


async def _create_configuration(api: APIClient, resource: Resource, name: str) -> None:
    body = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": {"name": name}}
    try:
        await api.create(resource, body=body, logger=logger)
    except APIConflictError:
        pass  # created meanwhile (e.g. by another replica): patched next anyway


async def _patch_configurations(
    api: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    client_config: WebhookClientConfig,
    resources: frozenset[Resource],
    *,
    persistent_only: bool = False,
) -> None:
    name = settings.admission.managed
    assert name is not None
    for webhook_type, resource in _CONFIGURATIONS:
        webhooks = build_webhooks(
            handlers_of_type(registry, webhook_type),
            resources=resources,
            name_suffix=name,
            client_config=client_config,
            persistent_only=persistent_only,
            namespace_selector=settings.admission.namespace_selector,
            timeout_seconds=settings.admission.timeout_seconds,
        )
        # A merge-patch replaces the list as a whole: webhooks of removed handlers go too.
        payload = {"webhooks": webhooks}
        try:
            try:
                await api.patch(resource, name=name, payload=payload, logger=logger)
            except APINotFoundError:
                if persistent_only:
                    continue  # nothing of ours to clean up: it is gone already
                # Absent (first run, or deleted meanwhile): created, then patched as usual.
                await _create_configuration(api, resource, name)
                await api.patch(resource, name=name, payload=payload, logger=logger)
        except APIForbiddenError:
            logger.error(
                f"Not enough RBAC permissions to manage {resource.plural} {name!r} "
                "(needed: create, patch)."
            )
            raise
