"""The orchestrator: one watcher per served (resource, namespace), kept in step with the cluster.

Task tree::

    Orchestration.run                owns the watchers' nursery
    ├── observers (inner nursery; cancelled once a graceful stop begins)
    │   ├── stop relay               context.stopping -> leave the control loop
    │   ├── namespace observer       list + watch v1/namespaces (namespaced mode, if scanning)
    │   ├── CRD observer             list + watch CRDs (unless settings.scanning.disabled)
    │   ├── rescanner                CRD changes -> discovery again (debounced, re-checked)
    │   └── the control loop (this task): any change -> start/stop watchers
    └── run_watcher per (resource, namespace), each under its own cancel scope

What is served is ``resources x namespaces``: the resources come from discovery resolved
against the registry's selectors; the namespaces are ``None`` (the cluster-wide endpoints) with
``clusterwide``, or else the existing namespaces that match the patterns. Cluster-scoped
resources are always served once, cluster-wide.

Dynamics, as in Kopf:

- A namespace that appears and matches gets a watcher for every namespaced resource; one that is
  deleted or Terminating has them stopped. If namespaces cannot be listed (HTTP 403), only the
  literal names among the patterns are served, assumed to exist; globs are ignored, with a
  warning. With ``settings.scanning.disabled``, the same literal names are served without asking.
- Any CRD change (or a watcher whose resource answers 404) triggers a rescan of the discovery,
  shortly after the last change; newly served resources get watchers, vanished ones are stopped.
  The rescan is repeated a few times while the discovery does not yet show what the CRDs say
  (the API server publishes a new group with a delay). A resource of a deleted CRD is stopped at
  once, without waiting for the discovery.

A watcher stopped alone (its namespace or resource went away) is stopped gracefully like on
the operator's own stop: its stream ends and its workers finish what is queued within
``settings.queueing.exit_timeout`` (with ``ResourceContext.stopping``; without it, it can only be
cancelled). A new watcher for the same (resource, namespace) waits until its predecessor is
gone, so one object is never processed by two workers at once. As in Kopf, a Terminating
namespace is not served any more: objects there that still carry the operator's finalizer keep
it (and keep the namespace Terminating) until the operator serves that namespace again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any, Final

import trio

from trioperator._client.api import APIClient
from trioperator._client.errors import (
    APIConnectionError,
    APIError,
    APIForbiddenError,
    APINotFoundError,
)
from trioperator._client.resources import ALL_VERBS, DiscoveryScope, Resource
from trioperator._client.watching import (
    RawWatchEvent,
    WatchHealth,
)
from trioperator._engine.namespaces import literal_namespaces
from trioperator._engine.peering import PEERING_GROUPS
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.serving import (
    CRDBook,
    CRDInfo,
    CRDKey,
    WatcherKey,
    describe_crd,
    describe_watcher,
    desired_watchers,
    served_namespace,
    watcher_order,
)
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.coordination.peering import Peering
from trioperator._runtime.objects.memories import Memories
from trioperator._runtime.pipeline.contexts import OperatorContext, ResourceContext
from trioperator._runtime.pipeline.watcher import run_watcher
from trioperator._runtime.support.discovering import discover_resources
from trioperator._runtime.support.observing import observe_resource
from trioperator._util.lognames import framework_logger
from trioperator._util.ordering import OrderedSlots

__all__ = [
    "CRDS",
    "NAMESPACES",
    "Orchestration",
    "WatcherKey",
]

# Kopf's names: what is served is found by "observation" (namespaces, resources, CRDs); the
# watchers are started and stopped by "orchestration".
logger = framework_logger("kopf._core.reactor.observation", __name__)
watchers_logger = framework_logger("kopf._core.reactor.orchestration")

NAMESPACES: Final = Resource(
    group="",
    version="v1",
    plural="namespaces",
    kind="Namespace",
    singular="namespace",
    shortcuts=frozenset({"ns"}),
    namespaced=False,
    verbs=ALL_VERBS,
)

CRDS: Final = Resource(
    group="apiextensions.k8s.io",
    version="v1",
    plural="customresourcedefinitions",
    kind="CustomResourceDefinition",
    singular="customresourcedefinition",
    shortcuts=frozenset({"crd", "crds"}),
    namespaced=False,
    verbs=ALL_VERBS,
)

RESCAN_DELAY: Final = 0.5
"""Seconds after a CRD change before the discovery is scanned: a burst of changes (a CRD's
creation, then its names accepted, then established) costs one scan."""

RESCAN_RETRY_DELAYS: Final = (1.0, 2.0, 4.0, 8.0, 15.0)
"""Delays of repeated scans while the discovery lags behind the CRDs (or a scan failed)."""

_NAMESPACES_OBSERVER: Final = "namespaces observer"
_CRDS_OBSERVER: Final = "CRDs observer"
# Names of the observers' health signals (next to the watchers', for the liveness probe).


class _Watcher:
    """One running watcher: its context, its cancel scope, and how it ends.

    It is the watcher's ``task_status`` too: ``run_watcher`` reports here when its initial
    listing is routed, without being moved between nurseries.
    """

    def __init__(
        self, key: WatcherKey, ctx: ResourceContext, on_started: Callable[[_Watcher], None]
    ) -> None:
        self.key = key
        self.ctx = ctx
        self._on_started = on_started
        # Stopping one watcher alone is graceful, as the operator's stop is for all of them.
        self.stop_event: trio.Event = ctx.stopping
        self.scope = trio.CancelScope()
        self.stop_requested = False
        self.settled = trio.Event()
        """Set when the initial listing is routed, or when the watcher ended before that."""
        self.finished = trio.Event()

    def started(self, value: None = None) -> None:
        self.settled.set()
        self._on_started(self)

    def stop(self) -> None:
        self.stop_requested = True
        self.stop_event.set()


class Orchestration:
    """What the orchestrator serves right now (``task_status.started()`` gives it to the caller).

    Read-only for everyone but the orchestrator's own tasks.
    """

    def __init__(
        self,
        context: OperatorContext,
        *,
        api: APIClient,
        registry: OperatorRegistry,
        settings: OperatorSettings,
        namespaces_patterns: Sequence[str | re.Pattern[str]],
        clusterwide: bool,
        health: MutableMapping[str, WatchHealth] | None = None,
        peering: Peering | None = None,
    ) -> None:
        self._context = context
        self._peering = peering
        self._health: MutableMapping[str, WatchHealth] = health if health is not None else {}
        self._api = api
        self._registry = registry
        self._settings = settings
        self._patterns = tuple(namespaces_patterns)
        self.clusterwide = clusterwide

        self.resources: frozenset[Resource] = frozenset()
        """The resources served now (discovered, selected by handlers, watchable)."""
        self.namespaces: frozenset[str] = frozenset()
        """The namespaces served now (always empty in the cluster-wide mode)."""
        self.webhook_resources: frozenset[Resource] = frozenset()
        """The discovered resources with admission handlers (served by webhooks, not watched)."""
        self._webhooks_revised = trio.Event()

        self._watchers: dict[WatcherKey, _Watcher] = {}
        self._retiring: dict[WatcherKey, _Watcher] = {}
        self._nursery: trio.Nursery | None = None
        self._changed = trio.Event()
        self._stopping = False
        self._rescan_wanted = trio.Event()
        self._warned: set[str] = set()
        self._crds = CRDBook()
        self._gone: set[Resource] = set()
        self._discovered: Sequence[Resource] = ()
        self._scope: DiscoveryScope | None = None
        """What the last discovery scanned (``None``: every group)."""

    @property
    def serving(self) -> frozenset[WatcherKey]:
        """The (resource, namespace) pairs with a watcher running (and not being stopped)."""
        return frozenset(self._watchers)

    # ------------------------------------------------------------------------ the control loop

    async def run(
        self, *, task_status: trio.TaskStatus[Orchestration] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve every (resource, namespace) pair that should be served, until a graceful stop.

        ``task_status.started()`` reports this :class:`Orchestration` once the initial
        resources and namespaces are known and every initial watcher has routed its initial
        listing. On a graceful stop (``context.stopping``), the observers are cancelled, every
        watcher finishes its queued work, and this returns. API errors other than those handled
        here (namespaces or CRDs forbidden, a resource gone) escalate and stop the operator.

        ``health`` (e.g. for the liveness probe) gets the :class:`WatchHealth` of every running
        watcher (named like ``"pods.v1 in 'ns1'"`` or ``"pods.v1 cluster-wide"``) and of the
        namespace and CRD observers, and loses them when they stop on purpose.

        ``peering`` (if given) peers via the peering CRDs among the discovered resources, in
        the served namespaces (or cluster-wide), following them as they come and go.
        """
        async with trio.open_nursery() as watchers:
            self._nursery = watchers
            try:
                async with trio.open_nursery() as observers:
                    observers.start_soon(self._relay_stop, name="orchestrator stop relay")
                    # The discovery and the namespaces' first listing at once: the first
                    # watchers need both, and neither needs the other.
                    async with trio.open_nursery() as startup:
                        if not self.clusterwide:
                            startup.start_soon(observers.start, self._observe_namespaces)
                        self._apply_resources(await self._discover())
                    if not self._settings.scanning.disabled:
                        observers.start_soon(self._observe_crds, name="CRD observer")
                        observers.start_soon(self._rescan_when_asked, name="resource rescanner")
                    for watcher in self._reconcile():
                        await watcher.settled.wait()
                    task_status.started(self)
                    while not self._stopping:
                        await self._changed.wait()
                        self._changed = trio.Event()
                        if not self._stopping:
                            self._reconcile()
                    observers.cancel_scope.cancel()
            finally:
                # A graceful stop: every watcher sees the operator's stop as well; this only
                # makes sure that none which is waiting for its predecessor starts afterwards.
                # On an error or a cancellation, the nursery cancels them anyway.
                self._forget_all_health()
                for watcher in [*self._watchers.values(), *self._retiring.values()]:
                    watcher.stop()
                self._watchers.clear()

    async def _relay_stop(self) -> None:
        await self._context.stopping.wait()
        self._stopping = True
        # At once, before any stream ends: everything ends on purpose now, which the liveness
        # probe must not report as dead watchers.
        self._forget_all_health()
        self._changed.set()

    def _forget_all_health(self) -> None:
        for watcher in [*self._watchers.values(), *self._retiring.values()]:
            self._forget_health(watcher)
        for name in (_NAMESPACES_OBSERVER, _CRDS_OBSERVER):
            self._health.pop(name, None)

    def _touch(self) -> None:
        self._changed.set()

    def _reconcile(self) -> list[_Watcher]:
        """Stop what is no longer wanted, start what is missing; return the started ones."""
        if self._peering is not None:
            # Before any watcher starts: a mandatory peering pauses it before its first listing.
            served = [None] if self.clusterwide else sorted(self.namespaces)
            self._peering.adjust(self._discovered, served)
        desired = desired_watchers(
            self.resources,
            namespaces=self.namespaces,
            clusterwide=self.clusterwide,
            crds=self._crds,
            gone=self._gone,
        )
        for key in sorted(self._watchers.keys() - desired, key=watcher_order):
            self._stop(key)
        return [
            self._start(key) for key in sorted(desired - self._watchers.keys(), key=watcher_order)
        ]

    def _start(self, key: WatcherKey) -> _Watcher:
        assert self._nursery is not None
        resource, namespace = key
        limit = self._settings.queueing.worker_limit
        ctx = ResourceContext(
            operator=self._context,
            resource=resource,
            namespace=namespace,
            memories=Memories(self._context.memo),
            worker_slots=OrderedSlots(limit) if limit else None,
        )
        watcher = _Watcher(key, ctx, self._watcher_started)
        predecessor = self._retiring.get(key)
        self._watchers[key] = watcher
        watchers_logger.info(f"Serving {describe_watcher(key)}.")
        self._nursery.start_soon(
            self._run_watcher, watcher, predecessor, name=f"watcher {describe_watcher(key)}"
        )
        return watcher

    def _stop(self, key: WatcherKey) -> None:
        watcher = self._watchers.pop(key)
        watchers_logger.info(f"Stopping {describe_watcher(key)}.")
        self._forget_health(watcher)  # it ends on purpose: not a failure to report
        watcher.stop()
        self._retiring[key] = watcher

    def _watcher_started(self, watcher: _Watcher) -> None:
        # Only now: until its stream has started, a watcher is not alive yet.
        if self._watchers.get(watcher.key) is watcher and not self._stopping:
            self._health[describe_watcher(watcher.key)] = watcher.ctx.health

    def _forget_health(self, watcher: _Watcher) -> None:
        name = describe_watcher(watcher.key)
        if self._health.get(name) is watcher.ctx.health:
            del self._health[name]

    async def _run_watcher(self, watcher: _Watcher, predecessor: _Watcher | None) -> None:
        try:
            with watcher.scope:
                if predecessor is not None:
                    await predecessor.finished.wait()
                if not watcher.stop_requested:
                    await self._serve(watcher)
        finally:
            watcher.finished.set()
            watcher.settled.set()
            key = watcher.key
            if self._retiring.get(key) is watcher:
                del self._retiring[key]
            if self._watchers.get(key) is watcher:
                # It ended on its own (its resource is gone): forget it, so that it can start
                # again if the next scan still shows its resource.
                del self._watchers[key]
                self._forget_health(watcher)
                self._touch()

    async def _serve(self, watcher: _Watcher) -> None:
        gone = False
        try:
            await run_watcher(watcher.ctx, task_status=watcher)
        except* APINotFoundError as group:
            # The resource vanished under the watcher (its CRD was deleted, or a version is no
            # longer served) before the discovery told us. Not a failure of the operator.
            gone = True
            watchers_logger.log(
                logging.DEBUG if watcher.stop_requested else logging.WARNING,
                f"Stopped serving {describe_watcher(watcher.key)}: the resource is gone "
                f"({group.exceptions[0]}).",
            )
        if gone and not watcher.stop_requested:
            self._gone.add(watcher.key[0])
            self._rescan_wanted.set()

    # ------------------------------------------------------------------------ namespaces

    def _set_namespaces(self, namespaces: Iterable[str]) -> None:
        new = frozenset(namespaces)
        if new != self.namespaces:
            for name in sorted(new - self.namespaces):
                logger.debug(f"Namespace {name!r} is served.")
            for name in sorted(self.namespaces - new):
                logger.debug(f"Namespace {name!r} is not served any more.")
            self.namespaces = new
            self._touch()

    async def _observe_namespaces(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Keep ``namespaces`` equal to the existing namespaces that match the patterns."""
        literal = literal_namespaces(self._patterns)
        if self._settings.scanning.disabled:
            self._set_namespaces(literal)
            task_status.started()
            return

        ready = False
        health = WatchHealth()

        def served(event: RawWatchEvent) -> str | None:
            return served_namespace(event, self._patterns)

        async def listed(names: list[str]) -> None:
            nonlocal ready
            self._set_namespaces(names)
            if not ready:
                ready = True
                self._health[_NAMESPACES_OBSERVER] = health
                task_status.started()

        async def changed(event: RawWatchEvent) -> None:
            name = (event["object"].get("metadata") or {}).get("name")
            if not isinstance(name, str):
                return
            if served(event) is not None:
                self._set_namespaces(self.namespaces | {name})
            else:
                self._set_namespaces(self.namespaces - {name})

        try:
            await observe_resource(
                self._api,
                NAMESPACES,
                None,
                settings=self._settings.watching,
                keep=served,
                on_listing=listed,
                on_event=changed,
                health=health,
            )
        except* APIForbiddenError:
            self._health.pop(_NAMESPACES_OBSERVER, None)  # not observing: nothing to report
            if not ready:
                logger.warning(
                    "Not enough permissions to list namespaces: serving only the namespaces "
                    "given by name, assumed to exist; namespace patterns are ignored: "
                    f"{sorted(literal)!r}"
                )
                self._set_namespaces(literal)
                task_status.started()
            else:
                logger.warning(
                    "Not enough permissions to watch namespaces: namespaces created or "
                    "deleted from now on are not noticed until the operator restarts."
                )

    # ------------------------------------------------------------------------ resources

    def _apply_resources(self, discovered: Sequence[Resource]) -> None:
        served = self._registry.resolve_resources(discovered)
        for warning in served.warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                logger.warning(warning)
        self._discovered = discovered
        self._gone.clear()
        if served.watched != self.resources:
            self.resources = served.watched
        if served.webhooks != self.webhook_resources:
            self.webhook_resources = served.webhooks
            self._webhooks_revised.set()
            self._webhooks_revised = trio.Event()
        self._touch()

    async def wait_webhook_resources_revised(self) -> None:
        """Return when ``webhook_resources`` change (for the admission configurations)."""
        await self._webhooks_revised.wait()

    def recall_memo(self, resource: Resource, body: Mapping[str, Any]) -> Any | None:
        """The memo of an object that a running watcher knows (for admission reviews)."""
        metadata = body.get("metadata") or {}
        uid = metadata.get("uid")
        if not uid:
            return None
        for namespace in (metadata.get("namespace"), None):
            watcher = self._watchers.get((resource, namespace))
            memory = watcher.ctx.memories.get(uid) if watcher is not None else None
            if memory is not None:
                return memory.memo
        return None

    async def _observe_crds(self) -> None:
        """Remember what the CRDs say, and ask for a rescan whenever any of them changes."""
        listed = False
        health = WatchHealth()

        async def relisted(crds: list[tuple[CRDKey, CRDInfo]]) -> None:
            nonlocal listed
            self._crds.relist(crds)
            # A relisting (after HTTP 410) may hide changes; and a CRD may have changed
            # between the initial scan and the first listing.
            if listed or not self._crds.agrees(self._discovered, scope=self._scope):
                self._rescan_wanted.set()
            if not listed:
                self._health[_CRDS_OBSERVER] = health
            listed = True

        async def changed(event: RawWatchEvent) -> None:
            if not self._crds.change(event):
                return
            self._touch()  # a deleted CRD (or version) stops its watchers now
            self._rescan_wanted.set()

        try:
            await observe_resource(
                self._api,
                CRDS,
                None,
                settings=self._settings.watching,
                keep=lambda event: describe_crd(event["object"]),
                on_listing=relisted,
                on_event=changed,
                health=health,
            )
        except* (APIForbiddenError, APINotFoundError) as group:
            self._health.pop(_CRDS_OBSERVER, None)  # not observing: nothing to report
            logger.warning(
                "Cannot watch CRDs: custom resources added or removed from now on are not "
                f"noticed until the operator restarts ({group.exceptions[0]})."
            )

    async def _rescan_when_asked(self) -> None:
        while True:
            await self._rescan_wanted.wait()
            await trio.sleep(RESCAN_DELAY)
            self._rescan_wanted = trio.Event()
            for delay in (*RESCAN_RETRY_DELAYS, None):
                if await self._rescan():
                    break
                if delay is None:
                    logger.warning(
                        "The discovery still does not show the CRDs as they are; "
                        "scanning again on the next CRD change."
                    )
                    break
                await trio.sleep(delay)

    async def _discover(self) -> list[Resource]:
        """The served resources in the scope of the handlers registered now (and of peering)."""
        extra = PEERING_GROUPS if self._peering is not None else ()
        self._scope = self._registry.discovery_scope(extra_groups=extra)
        return await discover_resources(self._api, scope=self._scope, logger=logger)

    async def _rescan(self) -> bool:
        """Scan the discovery and serve what it shows; whether it agrees with the CRDs."""
        try:
            discovered = await self._discover()
        except (APIError, APIConnectionError) as exc:
            logger.error(f"Scanning the cluster's resources failed: {exc!r}")
            return False
        self._apply_resources(discovered)
        return self._crds.agrees(discovered, scope=self._scope)
