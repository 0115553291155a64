"""Least-privilege RBAC rules from the registered handlers (``trioperator rbac``).

The rules follow what the runtime actually requests, and nothing else:

* every watched resource (any handler but admission): ``list`` + ``watch`` (the list+watch
  stream; no ``get`` is ever issued);
* resources of changing handlers, daemons and timers: ``patch`` too (progress, diff-base,
  finalizers, the handlers' own patches) and ``patch`` on ``<plural>/status`` when the resource
  has a status subresource (the status part of a patch goes there, or it would be dropped);
* ``events``: ``create`` where the served objects live (posting is a plain POST), and
  ``patch`` unless ``settings.posting.aggregation_window`` is 0 (a repeated Event is counted
  on the one posted before: ``count`` and ``lastTimestamp`` patched);
* peering (unless standalone): ``list``, ``watch``, ``patch`` on ``kopfpeerings`` in each served
  namespace, or ``clusterkopfpeerings`` when serving the whole cluster;
* observation: ``list`` + ``watch`` on CRDs (unless scanning is disabled) and, when serving
  namespaces, on namespaces (their patterns are matched against the existing ones);
* managed admission webhooks: ``create`` + ``patch`` on the validating and mutating webhook
  configurations (both are always written; the cleanup is a patch too);
* served conversions of typed resources (docs/typed-resources.md), when managed: ``patch`` on
  those CRDs only, by name (their ``spec.conversion`` points at the webhook server);
* sharding (``settings.sharding.enabled``): ``get``, ``list``, ``watch``, ``create``, ``patch``,
  ``delete`` on ``coordination.k8s.io`` leases, in the ring's namespace only (a Role there);
* the webhook servers' shared CA (``WebhookServiceServer``'s Secret, named by the caller: the
  server is configured at run time, out of sight here): ``get`` on that one Secret and
  ``create`` on secrets (which cannot be limited by name), in its namespace only (a Role there).

Rules are pure data here; the CLI turns them into manifests. Namespaced rules are granted by a
Role in each served namespace, or folded into the ClusterRole when serving the whole cluster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Final

from trioperator._client.resources import Resource
from trioperator._engine.conversion import served_conversions
from trioperator._engine.handlers import (
    ChangingHandler,
    IndexingHandler,
    SpawningHandler,
    WatchingHandler,
    WebhookHandler,
)
from trioperator._engine.namespaces import NamespacePattern, is_literal
from trioperator._engine.peering import (
    CLUSTER_PEERING_PLURAL,
    NAMESPACED_PEERING_PLURAL,
)
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.selectors import Selector
from trioperator._engine.settings import OperatorSettings

__all__ = [
    "PEERING_GROUP",
    "Permissions",
    "RBACError",
    "Rule",
    "build_manifests",
    "required_permissions",
]

PEERING_GROUP: Final = "kopf.dev"
"""The API group of the peering CRDs in ``manifests/peering.yaml`` (Kopf's current one)."""

ADMISSION_GROUP: Final = "admissionregistration.k8s.io"
EVENTS_FALLBACK_NAMESPACE: Final = "default"
"""Where events about cluster-scoped objects are posted (see ``_runtime/handling/posting.py``)."""

_VERB_ORDER: Final = ("get", "list", "watch", "create", "patch", "update", "delete")


class RBACError(ValueError):
    """The rules cannot be computed from what is given (e.g. an unknown resource)."""


@dataclasses.dataclass(frozen=True, order=True)
class Rule:
    """One RBAC policy rule: these verbs on these resources of one API group."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()
    """``resourceNames``: only these objects (empty: any)."""

    def as_dict(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"apiGroups": [self.group], "resources": list(self.resources)}
        if self.names:
            rule["resourceNames"] = list(self.names)
        rule["verbs"] = list(self.verbs)
        return rule


@dataclasses.dataclass(frozen=True)
class Permissions:
    """What the operator needs: cluster-level rules, and rules inside each served namespace."""

    cluster: tuple[Rule, ...]
    """For the ClusterRole: cluster-scoped things (and everything when serving the cluster)."""
    namespaced: tuple[Rule, ...]
    """For a Role in each served namespace (empty when serving the whole cluster)."""
    namespaces: tuple[str, ...]
    """The served namespaces (empty: the whole cluster)."""
    default_namespace: tuple[Rule, ...] = ()
    """For a Role in ``default`` when namespaced: events about cluster-scoped objects."""
    leases: tuple[Rule, ...] = ()
    """For a Role in the shard ring's namespace (empty unless sharded)."""
    lease_namespace: str | None = None
    """The ring's namespace (``None``: the service account's, where the pods run)."""
    webhook_ca: tuple[Rule, ...] = ()
    """For a Role in the namespace of the webhook servers' CA Secret (empty: no such Secret)."""
    webhook_ca_namespace: str | None = None
    """The Secret's namespace (``None``: the service account's, where the Service usually is)."""


class _Grants:
    """Verbs per (group, resource), merged into rules at the end."""

    def __init__(self) -> None:
        self._verbs: dict[tuple[str, str], set[str]] = {}

    def add(self, group: str, resource: str, *verbs: str) -> None:
        self._verbs.setdefault((group, resource), set()).update(verbs)

    def __bool__(self) -> bool:
        return bool(self._verbs)

    def rules(self) -> tuple[Rule, ...]:
        # One rule per resource: each says what it is for, and can be audited (or removed) alone.
        return tuple(
            sorted(
                Rule(
                    group=group,
                    resources=(resource,),
                    verbs=tuple(verb for verb in _VERB_ORDER if verb in verbs),
                )
                for (group, resource), verbs in self._verbs.items()
            )
        )


def _resolve(
    selectors: Iterable[Selector], known: Collection[Resource], what: str
) -> set[Resource]:
    resolved: set[Resource] = set()
    for selector in sorted(selectors, key=repr):
        if not selector.is_specific:
            raise RBACError(
                f"The {what} handlers of {selector!r} select resources by a callback, a category "
                "or EVERYTHING: their rules cannot be known in advance. Name the resources."
            )
        matched = selector.select(known)
        if not matched:
            raise RBACError(
                f"Unknown resource for {what} handlers: {selector!r}. Give its CRD with --crd "
                "FILE (built-in Kubernetes resources are known)."
            )
        if selector.is_ambiguous(known):
            names = ", ".join(sorted(str(resource) for resource in matched))
            raise RBACError(
                f"Ambiguous resource {selector!r}: {names}. Name its API group in the handler."
            )
        resolved |= matched
    return resolved


def required_permissions(
    registry: OperatorRegistry,
    settings: OperatorSettings,
    known: Collection[Resource],
    *,
    namespaces: Sequence[NamespacePattern] = (),
    webhook_ca_secret: str | None = None,
    webhook_ca_namespace: str | None = None,
) -> Permissions:
    """The rules the operator needs to serve ``registry`` in ``namespaces`` (none: cluster).

    ``known`` are the resources the selectors may resolve to (built-ins and the given CRDs).
    ``webhook_ca_secret`` is the Secret (in ``webhook_ca_namespace``) where the webhook server
    keeps the CA shared by the replicas, if it does. Raises :class:`RBACError` for selectors
    that cannot be resolved and namespace globs.
    """
    for pattern in namespaces:
        if not is_literal(pattern):
            raise RBACError(
                f"The namespace pattern {pattern!r} is not a namespace name: Roles need names "
                "(list them with -n each, or use -A for a ClusterRole)."
            )
    clusterwide = not namespaces

    watching = _resolve(registry.get_selectors(WatchingHandler), known, "event")
    indexing = _resolve(registry.get_selectors(IndexingHandler), known, "indexing")
    changing = _resolve(registry.get_selectors(ChangingHandler), known, "change")
    spawning = _resolve(registry.get_selectors(SpawningHandler), known, "daemon/timer")
    webhooks = _resolve(registry.get_selectors(WebhookHandler), known, "admission")

    cluster = _Grants()
    local = _Grants()  # in each served namespace; folded into the ClusterRole if clusterwide
    default_ns = _Grants()

    def scope(resource: Resource) -> _Grants:
        return local if resource.namespaced and not clusterwide else cluster

    for resource in watching | indexing | changing | spawning:
        scope(resource).add(resource.group, resource.plural, "list", "watch")
    for resource in changing | spawning:
        scope(resource).add(resource.group, resource.plural, "patch")
        if "status" in resource.subresources:
            scope(resource).add(resource.group, f"{resource.plural}/status", "patch")

    served = watching | indexing | changing | spawning
    event_verbs = ("create", "patch") if settings.posting.aggregation_window > 0 else ("create",)
    if served:
        # Events are posted by handlers and by the framework about the objects it serves.
        if clusterwide:
            cluster.add("", "events", *event_verbs)
        else:
            if any(resource.namespaced for resource in served):
                local.add("", "events", *event_verbs)
            if any(not resource.namespaced for resource in served):
                default_ns.add("", "events", *event_verbs)

    if not settings.peering.standalone:
        if clusterwide:
            cluster.add(PEERING_GROUP, CLUSTER_PEERING_PLURAL, "list", "watch", "patch")
        else:
            local.add(PEERING_GROUP, NAMESPACED_PEERING_PLURAL, "list", "watch", "patch")

    if not settings.scanning.disabled:
        cluster.add("apiextensions.k8s.io", "customresourcedefinitions", "list", "watch")
        if not clusterwide:
            cluster.add("", "namespaces", "list", "watch")

    if webhooks and settings.admission.managed is not None:
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            cluster.add(ADMISSION_GROUP, plural, "create", "patch")

    leases = _Grants()
    if settings.sharding.enabled:
        leases.add("coordination.k8s.io", "leases", "get", "list", "watch", "create", "patch")
        leases.add("coordination.k8s.io", "leases", "delete")

    conversion_rules: tuple[Rule, ...] = ()
    conversions = served_conversions(registry.iter_all_handlers())
    if conversions and settings.admission.managed is not None:
        conversion_rules = (
            Rule(
                group="apiextensions.k8s.io",
                resources=("customresourcedefinitions",),
                verbs=("patch",),
                names=tuple(sorted(conversions)),
            ),
        )

    webhook_ca: tuple[Rule, ...] = ()
    if (webhooks or conversions) and webhook_ca_secret:
        # Read by every replica (only this Secret); created by the first one.
        webhook_ca = (
            Rule(group="", resources=("secrets",), verbs=("get",), names=(webhook_ca_secret,)),
            Rule(group="", resources=("secrets",), verbs=("create",)),
        )

    literal = tuple(sorted({str(pattern) for pattern in namespaces}))
    if EVENTS_FALLBACK_NAMESPACE in literal and default_ns:
        # The Role in "default" grants the events already.
        default_ns = _Grants()
        local.add("", "events", *event_verbs)
    return Permissions(
        cluster=cluster.rules() + conversion_rules,
        namespaced=local.rules(),
        namespaces=literal,
        default_namespace=default_ns.rules(),
        leases=leases.rules(),
        lease_namespace=settings.sharding.namespace,
        webhook_ca=webhook_ca,
        webhook_ca_namespace=webhook_ca_namespace,
    )


def build_manifests(
    permissions: Permissions,
    *,
    name: str,
    service_account: str,
    service_account_namespace: str,
) -> list[dict[str, Any]]:
    """The ClusterRole, Roles and their bindings to the service account, as API objects."""
    subject = {"kind": "ServiceAccount", "name": service_account}
    subject["namespace"] = service_account_namespace
    rbac = "rbac.authorization.k8s.io/v1"
    objects: list[dict[str, Any]] = []

    def role_and_binding(
        kind: str, role_name: str, rules: Sequence[Rule], namespace: str | None
    ) -> None:
        meta: dict[str, Any] = {"name": role_name}
        if namespace is not None:
            meta["namespace"] = namespace
        objects.append(
            {
                "apiVersion": rbac,
                "kind": kind,
                "metadata": dict(meta),
                "rules": [rule.as_dict() for rule in rules],
            }
        )
        objects.append(
            {
                "apiVersion": rbac,
                "kind": f"{kind}Binding",
                "metadata": dict(meta),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": kind,
                    "name": role_name,
                },
                "subjects": [dict(subject)],
            }
        )

    if permissions.cluster:
        role_and_binding("ClusterRole", name, permissions.cluster, None)
    for namespace in permissions.namespaces:
        if permissions.namespaced:
            role_and_binding("Role", name, permissions.namespaced, namespace)
    if permissions.default_namespace:
        role_and_binding(
            "Role", f"{name}-events", permissions.default_namespace, EVENTS_FALLBACK_NAMESPACE
        )
    if permissions.leases:
        namespace = permissions.lease_namespace or service_account_namespace
        role_and_binding("Role", f"{name}-shards", permissions.leases, namespace)
    if permissions.webhook_ca:
        namespace = permissions.webhook_ca_namespace or service_account_namespace
        role_and_binding("Role", f"{name}-webhook-ca", permissions.webhook_ca, namespace)
    return objects
