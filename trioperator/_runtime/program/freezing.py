"""``freeze`` and ``resume``: pausing and resuming operators by hand, through their peering.

A freeze is a peer record like an operator's keep-alive, written once by the command with a high
priority and a lifetime: every operator of a lower priority that peers in that peering object
(Kopf's or ours, the format is the same) pauses until the record expires or ``resume`` removes
it. There is no operator process behind the record, so nothing renews it.

The identity is ``user@host`` (or ``--id``, or ``POD_ID``), the same for every call from one
place, so that ``resume`` removes what ``freeze`` wrote there.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Sequence

from trioperator._client.api import APIClient
from trioperator._client.credentials import utcnow
from trioperator._client.errors import APINotFoundError
from trioperator._client.resources import DiscoveryScope, Resource
from trioperator._engine.namespaces import NamespacePattern, is_literal, match_namespace
from trioperator._engine.peering import (
    CLUSTER_PEERING_PLURAL,
    NAMESPACED_PEERING_PLURAL,
    PEERING_GROUPS,
    keepalive_patch,
    select_peering_resources,
)
from trioperator._engine.settings import PeeringSettings
from trioperator._runtime.coordination.peering import status_subresource
from trioperator._runtime.program.orchestration import NAMESPACES
from trioperator._runtime.support.discovering import discover_resources
from trioperator._util.lognames import framework_logger

__all__ = ["PeeringCommandError", "Touched", "touch_peerings"]

logger = framework_logger("kopf._core.engines.peering", "trioperator.peering")

_PEERING_SCOPE: DiscoveryScope = frozenset((group, None) for group in PEERING_GROUPS)


class PeeringCommandError(Exception):
    """A freeze/resume that could not reach any peering object (nothing was changed)."""


@dataclasses.dataclass(frozen=True)
class Touched:
    """One peering object the command tried to write to."""

    resource: Resource
    namespace: str | None
    found: bool

    @property
    def where(self) -> str:
        return f"in {self.namespace!r}" if self.namespace is not None else "cluster-wide"


async def touch_peerings(
    api: APIClient,
    *,
    name: str,
    identity: str,
    priority: int,
    lifetime: int,
    clusterwide: bool,
    namespaces: Sequence[NamespacePattern] = (),
    now: Callable[[], datetime.datetime] = utcnow,
) -> list[Touched]:
    """Write (``lifetime > 0``) or remove (``lifetime <= 0``) our record in the peering objects.

    Cluster-wide, that is the ``ClusterKopfPeering`` named ``name``; otherwise the
    ``KopfPeering`` of that name in every namespace matching ``namespaces`` (globs are matched
    against the namespaces that exist now). Both API groups are written where both are served,
    as Kopf does. Objects that do not exist are reported as not found; if none is found at all,
    or the peering CRD is missing, :class:`PeeringCommandError` says so.
    """
    settings = PeeringSettings(name=name, priority=priority, clusterwide=clusterwide)
    resources = select_peering_resources(
        await discover_resources(api, scope=_PEERING_SCOPE, logger=logger), settings
    )
    if not resources:
        plural = CLUSTER_PEERING_PLURAL if clusterwide else NAMESPACED_PEERING_PLURAL
        raise PeeringCommandError(
            f"The cluster serves no {plural} (the peering CRDs are not installed?): "
            "nothing to freeze or resume."
        )
    targets: list[str | None] = [None] if clusterwide else await _namespaces(api, namespaces)
    if not targets:
        raise PeeringCommandError(f"No namespace matches {list(namespaces)}.")

    patch = keepalive_patch(identity, priority=priority, lifetime=lifetime, now=now())
    touched: list[Touched] = []
    for namespace in targets:
        for resource in resources:
            try:
                await api.patch(
                    resource,
                    namespace=namespace,
                    name=name,
                    payload=patch,
                    subresource=status_subresource(resource),
                    logger=logger,
                )
                found = True
            except APINotFoundError:
                found = False
            touched.append(Touched(resource=resource, namespace=namespace, found=found))
    if not any(item.found for item in touched):
        where = "cluster-wide" if clusterwide else f"in {', '.join(map(str, targets))}"
        raise PeeringCommandError(f"The peering object {name!r} does not exist {where}.")
    return touched


async def _namespaces(api: APIClient, patterns: Sequence[NamespacePattern]) -> list[str | None]:
    if all(is_literal(pattern) for pattern in patterns):
        # Plain names: no need to list the namespaces (nor the permission to).
        return list(dict.fromkeys(str(pattern).strip() for pattern in patterns))
    items, _ = await api.list_objs(NAMESPACES, logger=logger)
    names = [str(item["metadata"]["name"]) for item in items]
    return [name for name in names if match_namespace(name, patterns)]
