"""What an operator serves: (resource, namespace) pairs, from the discovery, CRDs and namespaces.

Pure decisions for the orchestrator (``trioperator._runtime.program.orchestration``), which observes
the cluster and starts and stops the watchers:

- which namespaces are served, from the namespaces' listings and events (a namespace that is
  deleted or Terminating is not served any more);
- what the CRDs say about the resources, ahead of the discovery, which lags behind (a resource
  of a deleted CRD, or of a version no longer served, is not served at once; the discovery
  "agrees" once it shows what the CRDs say);
- which (resource, namespace) pairs want a watcher.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from trioperator._client.resources import DiscoveryScope, Resource, in_scope
from trioperator._engine.namespaces import NamespacePattern, match_namespace

__all__ = [
    "CRDBook",
    "CRDInfo",
    "CRDKey",
    "WatcherKey",
    "crd_info",
    "crd_key",
    "describe_crd",
    "describe_watcher",
    "desired_watchers",
    "is_namespace_gone",
    "served_namespace",
    "watcher_order",
]

WatcherKey: TypeAlias = tuple[Resource, str | None]
"""What one watcher serves: a resource in a namespace (``None``: cluster-wide)."""

CRDKey: TypeAlias = tuple[str, str]
"""A CRD's group and plural: what it defines, whatever the versions."""


def describe_watcher(key: WatcherKey) -> str:
    resource, namespace = key
    return f"{resource} cluster-wide" if namespace is None else f"{resource} in {namespace!r}"


def watcher_order(key: WatcherKey) -> tuple[str, str]:
    """A sort key: watchers start and stop in a stable order (readable logs, stable tests)."""
    return str(key[0]), key[1] or ""


def desired_watchers(
    resources: Iterable[Resource],
    *,
    namespaces: Iterable[str],
    clusterwide: bool,
    crds: CRDBook,
    gone: Iterable[Resource] = (),
) -> set[WatcherKey]:
    """Every (resource, namespace) pair to watch: namespaced resources in every served
    namespace (or cluster-wide), cluster-scoped ones once; none of the resources that are
    ``gone`` (they answered 404) or that the CRDs deny."""
    excluded = set(gone)
    served = list(namespaces)
    keys: set[WatcherKey] = set()
    for resource in resources:
        if resource in excluded or crds.denies(resource):
            continue
        if clusterwide or not resource.namespaced:
            keys.add((resource, None))
        else:
            keys.update((resource, namespace) for namespace in served)
    return keys


# ---------------------------------------------------------------------------- namespaces


def is_namespace_gone(event: Mapping[str, Any]) -> bool:
    """Whether a namespace's event (or listing) means it is going away (or went away)."""
    obj = event["object"]
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return (
        event["type"] == "DELETED"
        or bool(metadata.get("deletionTimestamp"))
        or status.get("phase") == "Terminating"
    )


def served_namespace(event: Mapping[str, Any], patterns: Sequence[NamespacePattern]) -> str | None:
    """The namespace's name if it exists (not going away) and matches the patterns."""
    name = (event["object"].get("metadata") or {}).get("name")
    if not isinstance(name, str) or is_namespace_gone(event):
        return None
    return name if match_namespace(name, patterns) else None


# ---------------------------------------------------------------------------- CRDs


@dataclasses.dataclass(frozen=True)
class CRDInfo:
    served: frozenset[str]
    """The versions the CRD serves."""
    established: bool
    """The API server accepted the names and serves (or will soon serve) the resource."""


def crd_key(obj: Mapping[str, Any]) -> CRDKey | None:
    """The group and plural a CRD defines; ``None`` if it says neither."""
    spec = obj.get("spec") or {}
    group = spec.get("group")
    plural = (spec.get("names") or {}).get("plural")
    if isinstance(group, str) and isinstance(plural, str) and group and plural:
        return group, plural
    return None


def crd_info(obj: Mapping[str, Any]) -> CRDInfo:
    spec = obj.get("spec") or {}
    served = frozenset(
        version["name"]
        for version in spec.get("versions") or ()
        if isinstance(version, dict) and version.get("served", True) and version.get("name")
    )
    conditions = (obj.get("status") or {}).get("conditions") or ()
    established = any(
        isinstance(condition, dict)
        and condition.get("type") == "Established"
        and condition.get("status") == "True"
        for condition in conditions
    )
    deleting = bool((obj.get("metadata") or {}).get("deletionTimestamp"))
    return CRDInfo(served=served, established=established and not deleting)


def describe_crd(obj: Mapping[str, Any]) -> tuple[CRDKey, CRDInfo] | None:
    """What a CRD defines and how it serves it; ``None`` if it is not usable."""
    key = crd_key(obj)
    return None if key is None else (key, crd_info(obj))


class CRDBook:
    """What the CRDs seen say about the resources they define (their listings and events)."""

    def __init__(self) -> None:
        self._crds: dict[CRDKey, CRDInfo] = {}
        self._deleted: set[CRDKey] = set()

    def relist(self, crds: Iterable[tuple[CRDKey, CRDInfo]]) -> None:
        """A complete listing: it replaces what was known; a CRD in it is not deleted."""
        self._crds = dict(crds)
        self._deleted -= self._crds.keys()

    def change(self, event: Mapping[str, Any]) -> bool:
        """Take a CRD's watch event into account; whether it concerns a usable CRD."""
        key = crd_key(event["object"])
        if key is None:
            return False
        if event["type"] == "DELETED":
            self._crds.pop(key, None)
            self._deleted.add(key)
        else:
            self._crds[key] = crd_info(event["object"])
            self._deleted.discard(key)
        return True

    def denies(self, resource: Resource) -> bool:
        """Whether the CRDs say this resource is not served any more, whatever the discovery
        says (it lags behind)."""
        key = (resource.group, resource.plural)
        if key in self._deleted:
            return True
        crd = self._crds.get(key)
        return crd is not None and resource.version not in crd.served

    def agrees(
        self, discovered: Sequence[Resource], *, scope: DiscoveryScope | None = None
    ) -> bool:
        """Whether the discovery shows what the CRDs say: established ones served, deleted
        ones (and versions no longer served) gone. CRDs out of the discovery's scope (groups
        it did not scan) do not count."""
        present = {(r.group, r.version, r.plural) for r in discovered}
        for (group, plural), crd in self._crds.items():
            if crd.established and any(
                (group, version, plural) not in present
                for version in crd.served
                if in_scope(scope, group, version)
            ):
                return False
        return not any(self.denies(resource) for resource in discovered)
