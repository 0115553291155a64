"""Peering at runtime: keep-alives into the peering objects, and pausing for other operators.

Task tree (in ``Operator._serve``, around the serving nursery, so that our record outlives the
handling: it is removed only once the watchers have finished)::

    run_peering                         the peering nursery; cancelled after the orchestrator
    └── per (peering resource, namespace)  started/stopped by the orchestrator, as in Kopf
        ├── keep-alive                  PATCH our record every lifetime-(5..10) s; on exit,
        │                               remove it (shielded, bounded by REMOVAL_TIMEOUT)
        └── observer                    list + watch the peering resource; our object's records
                                        -> pause/resume; dead records cleaned; re-judged when
                                        the first blocking peer would expire

The operator is paused while any blocker of its
:class:`~trioperator._runtime.support.gates.OperatorPause` is on: one per peering object (a peer
with a higher or the same priority is alive there; or, for mandatory peering, the object does not
exist yet) and one when mandatory peering finds no peering CRD. While paused, every watcher closes
its watch-stream and stops its daemons and timers; after the pause, it lists its objects again (see
``trioperator._runtime.pipeline.watcher``).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeAlias

import trio

from trioperator._client.api import APIClient
from trioperator._client.errors import APIConnectionError, APIError, APINotFoundError
from trioperator._client.resources import Resource
from trioperator._client.watching import (
    RawWatchEvent,
    WatchingError,
)
from trioperator._engine.peering import (
    PeeringDecision,
    cleanup_patch,
    decide,
    keepalive_interval,
    keepalive_patch,
    select_peering_resources,
)
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.support.gates import OperatorPause
from trioperator._runtime.support.observing import observe_resource
from trioperator._util.lognames import framework_logger

__all__ = ["REMOVAL_TIMEOUT", "Peering", "run_peering", "status_subresource"]

logger = framework_logger("kopf._core.engines.peering", "trioperator.peering")

REMOVAL_TIMEOUT: Final = 10.0
"""Seconds to remove our record on exit; after that, it expires on its own."""

OBSERVER_RETRY_DELAY: Final = 10.0
"""Seconds before watching a peering resource again after an error the stream gave up on."""

PeeringKey: TypeAlias = tuple[Resource, str | None]

_CRD_MISSING: Final = "peering CRD is missing"


def _where(namespace: str | None) -> str:
    return f"in {namespace!r}" if namespace is not None else "cluster-wide"


class Peering:
    """The peering tasks of one operator; the orchestrator tells it what the cluster serves."""

    def __init__(
        self,
        *,
        api: APIClient,
        settings: OperatorSettings,
        identity: str,
        pause: OperatorPause,
        now: Callable[[], datetime.datetime],
        nursery: trio.Nursery,
    ) -> None:
        self._api = api
        self._settings = settings
        self.identity = identity
        self._pause = pause
        self._now = now
        self._nursery = nursery
        self._scopes: dict[PeeringKey, trio.CancelScope] = {}
        self._conflicted: set[PeeringKey] = set()

    @property
    def keys(self) -> frozenset[PeeringKey]:
        """The (peering resource, namespace) pairs peered in now."""
        return frozenset(self._scopes)

    def adjust(self, discovered: Iterable[Resource], namespaces: Iterable[str | None]) -> None:
        """Peer in every served namespace (or cluster-wide) via the peering CRDs that exist.

        Synchronous, so that the orchestrator can call it right before it starts watchers: a
        mandatory peering pauses them before their first listing.
        """
        settings = self._settings.peering
        resources = select_peering_resources(discovered, settings)
        # Auto-detection never pauses for a missing CRD; mandatory peering does until it exists.
        self._pause.turn(_CRD_MISSING, _CRD_MISSING, settings.mandatory and not resources)
        served = list(namespaces)
        desired = {
            (resource, namespace if resource.namespaced else None)
            for resource in resources
            for namespace in served
        }
        for key in sorted(self._scopes.keys() - desired, key=_order):
            # The keep-alive removes our record as it exits.
            self._scopes.pop(key).cancel()
            self._pause.turn(key, "", False)
        for key in sorted(desired - self._scopes.keys(), key=_order):
            _, namespace = key
            # Mandatory: paused until the object is seen and nobody outranks us there.
            self._pause.turn(key, f"{settings.name}@{namespace}", settings.mandatory)
            scope = self._scopes[key] = trio.CancelScope()
            self._nursery.start_soon(
                self._serve, key, scope, name=f"peering {settings.name} {_where(namespace)}"
            )

    async def _serve(self, key: PeeringKey, scope: trio.CancelScope) -> None:
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._keepalive, key, name="peering keep-alive")
                    nursery.start_soon(self._observe_persistently, key, name="peering observer")
        finally:
            if self._scopes.get(key) is scope:
                del self._scopes[key]
                self._pause.turn(key, "", False)
            self._conflicted.discard(key)

    # ------------------------------------------------------------------ keep-alive

    async def _touch(self, key: PeeringKey, *, lifetime: int | None = None) -> None:
        resource, namespace = key
        settings = self._settings.peering
        patch = keepalive_patch(
            self.identity,
            priority=settings.priority,
            lifetime=settings.lifetime if lifetime is None else lifetime,
            now=self._now(),
        )
        try:
            await self._api.patch(
                resource,
                namespace=namespace,
                name=settings.name,
                payload=patch,
                subresource=status_subresource(resource),
                logger=logger,
            )
            result = "ok"
        except APINotFoundError:
            result = "not found"
        if not settings.stealth or result != "ok":
            logger.debug(f"Keep-alive in {settings.name!r} {_where(namespace)}: {result}.")

    async def _keepalive(self, key: PeeringKey) -> None:
        try:
            while True:
                try:
                    await self._touch(key)
                except (APIError, APIConnectionError) as exc:
                    # The next keep-alive may succeed; meanwhile, peers may see us expire.
                    logger.error(f"Keep-alive in {self._settings.peering.name!r} failed: {exc}")
                await trio.sleep(keepalive_interval(self._settings.peering.lifetime))
        finally:
            # Leaving: remove our record, so that lower-priority peers resume at once rather
            # than when it expires. Shielded from the cancellation that ends us, but bounded.
            with trio.move_on_after(REMOVAL_TIMEOUT, shield=True):
                try:
                    await self._touch(key, lifetime=0)
                except (APIError, APIConnectionError) as exc:
                    logger.warning(f"Couldn't remove self from the peering. Ignoring: {exc}")

    # ------------------------------------------------------------------ observing

    async def _observe_persistently(self, key: PeeringKey) -> None:
        """Observe; on errors the stream does not retry itself (e.g. HTTP 403), say so, keep
        the pause as it is (mandatory peering stays paused, optional stays running), retry."""
        _, namespace = key
        while True:
            # Jittered: the replicas that lost their streams together do not retry together.
            delay = self._api.retry_delay(OBSERVER_RETRY_DELAY)
            try:
                await self._observe(key)
            except* (APIError, APIConnectionError, WatchingError) as group:
                logger.error(
                    f"Cannot watch the peering {self._settings.peering.name!r} "
                    f"{_where(namespace)}; retrying in {delay:.1f} seconds: "
                    f"{group.exceptions[0]}"
                )
            await trio.sleep(delay)

    async def _observe(self, key: PeeringKey) -> None:
        resource, namespace = key
        name = self._settings.peering.name
        status: Any = None
        exists = False
        listed = False
        wake_at = math.inf

        def ours(event: RawWatchEvent) -> Any | None:
            obj = event["object"]
            if (obj.get("metadata") or {}).get("name") != name:
                return None  # another peering neighbourhood: not ours to judge
            return obj.get("status") or {}

        async def relisted(statuses: list[Any]) -> None:
            nonlocal exists, status, listed
            # A (re)listing is authoritative: not in it means absent.
            exists, status, listed = bool(statuses), statuses[-1] if statuses else None, True
            await judge()

        async def changed(event: RawWatchEvent) -> None:
            nonlocal exists, status
            if ours(event) is None:
                return
            exists = event["type"] != "DELETED"
            status = (event["object"].get("status") or {}) if exists else None
            if listed:
                await judge()

        async def judge() -> None:
            # Judged on every change, and when a blocking peer should have expired.
            nonlocal wake_at
            decision = self._judge(key, exists=exists, status=status)
            wake_at = math.inf
            if decision is not None:
                if decision.dead:
                    await self._clean(key, decision)
                deadline = decision.wake_up_at()
                if deadline is not None:
                    delay = (deadline - self._now()).total_seconds()
                    wake_at = trio.current_time() + max(0.0, delay)

        await observe_resource(
            self._api,
            resource,
            namespace,
            settings=self._settings.watching,
            keep=ours,
            on_listing=relisted,
            on_event=changed,
            wake_at=lambda: wake_at,
            on_wake=judge,
            logger=logger,
        )

    def _judge(self, key: PeeringKey, *, exists: bool, status: Any) -> PeeringDecision | None:
        _, namespace = key
        settings = self._settings.peering
        what = f"{settings.name}@{namespace}"
        was_paused = self._pause.is_on(key)
        if not exists:
            # Mandatory peering waits for the object; optional peering runs without it.
            if settings.mandatory and not was_paused:
                logger.info(
                    f"The peering object {settings.name!r} {_where(namespace)} is gone: "
                    "pausing until it exists again."
                )
            elif settings.mandatory:
                logger.debug(
                    f"The peering object {settings.name!r} {_where(namespace)} does not exist: "
                    "paused until it is created."
                )
            self._conflicted.discard(key)
            self._pause.turn(key, what, settings.mandatory)
            return None
        decision = decide(
            status, identity=self.identity, priority=settings.priority, now=self._now()
        )
        # Logged once per conflict (not on every keep-alive of the peers), as Kopf does.
        conflicted = key in self._conflicted
        if decision.higher:
            if not conflicted:
                logger.info(f"Pausing operations in favour of {list(decision.higher)}.")
            self._conflicted.add(key)
            self._pause.turn(key, what, True)
        elif decision.same:
            logger.warning(
                f"Possibly conflicting operators with the same priority: {list(decision.same)}."
            )
            if not conflicted:
                logger.warning(f"Pausing all operators, including self: {list(decision.peers)}")
            self._conflicted.add(key)
            self._pause.turn(key, what, True)
        else:
            if was_paused:
                logger.info(
                    "Resuming operations after the pause. "
                    "Conflicting operators with the same priority are gone."
                )
            self._conflicted.discard(key)
            self._pause.turn(key, what, False)
        return decision

    async def _clean(self, key: PeeringKey, decision: PeeringDecision) -> None:
        resource, namespace = key
        try:
            await self._api.patch(
                resource,
                namespace=namespace,
                name=self._settings.peering.name,
                payload=cleanup_patch(decision.dead),
                subresource=status_subresource(resource),
                logger=logger,
            )
        except APINotFoundError:
            pass  # the object is gone: so are the records
        except (APIError, APIConnectionError) as exc:
            logger.warning(f"Couldn't remove the dead peers {list(decision.dead)}: {exc}")


def status_subresource(resource: Resource) -> str | None:
    # Kopf's CRDs have no status subresource, so the records go with the object; but if a
    # cluster's CRDs have one, the object's endpoint would silently drop the status.
    return "status" if "status" in resource.subresources else None


def _order(key: PeeringKey) -> tuple[str, str]:
    return str(key[0]), key[1] or ""


async def run_peering(
    *,
    api: APIClient,
    settings: OperatorSettings,
    identity: str,
    pause: OperatorPause,
    now: Callable[[], datetime.datetime],
    task_status: trio.TaskStatus[Peering] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Own the peering tasks until cancelled; ``task_status`` gives the :class:`Peering`
    that the orchestrator adjusts as peering CRDs and namespaces come and go."""
    async with trio.open_nursery() as nursery:
        task_status.started(
            Peering(
                api=api,
                settings=settings,
                identity=identity,
                pause=pause,
                now=now,
                nursery=nursery,
            )
        )
        await trio.sleep_forever()
