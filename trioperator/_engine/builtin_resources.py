"""The Kubernetes built-in resources, as discovery would describe them, for offline decisions.

``trioperator rbac`` computes RBAC rules without a cluster: the handlers' selectors are resolved
against these (plus the CRDs the user names, see :func:`resources_from_crd`). Only what RBAC
needs is kept: group, plural, kind, short names, scope, and whether a status subresource
exists. Versions are those of current clusters; RBAC rules do not mention versions anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from trioperator._client.resources import ALL_VERBS, Resource

__all__ = ["BUILTIN_RESOURCES", "resources_from_crd"]

# group/version, plural, kind, short names, namespaced, has a status subresource
_TABLE: Final[tuple[tuple[str, str, str, str, bool, bool], ...]] = (
    ("v1", "configmaps", "ConfigMap", "cm", True, False),
    ("v1", "endpoints", "Endpoints", "ep", True, False),
    ("v1", "events", "Event", "ev", True, False),
    ("v1", "limitranges", "LimitRange", "limits", True, False),
    ("v1", "namespaces", "Namespace", "ns", False, True),
    ("v1", "nodes", "Node", "no", False, True),
    ("v1", "persistentvolumeclaims", "PersistentVolumeClaim", "pvc", True, True),
    ("v1", "persistentvolumes", "PersistentVolume", "pv", False, True),
    ("v1", "pods", "Pod", "po", True, True),
    ("v1", "replicationcontrollers", "ReplicationController", "rc", True, True),
    ("v1", "resourcequotas", "ResourceQuota", "quota", True, True),
    ("v1", "secrets", "Secret", "", True, False),
    ("v1", "serviceaccounts", "ServiceAccount", "sa", True, False),
    ("v1", "services", "Service", "svc", True, True),
    ("apps/v1", "daemonsets", "DaemonSet", "ds", True, True),
    ("apps/v1", "deployments", "Deployment", "deploy", True, True),
    ("apps/v1", "replicasets", "ReplicaSet", "rs", True, True),
    ("apps/v1", "statefulsets", "StatefulSet", "sts", True, True),
    ("batch/v1", "cronjobs", "CronJob", "cj", True, True),
    ("batch/v1", "jobs", "Job", "", True, True),
    ("networking.k8s.io/v1", "ingresses", "Ingress", "ing", True, True),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", "netpol", True, False),
    ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", "pdb", True, True),
    ("rbac.authorization.k8s.io/v1", "roles", "Role", "", True, False),
    ("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", "", True, False),
    ("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", "", False, False),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", "", False, False),
    ("coordination.k8s.io/v1", "leases", "Lease", "", True, False),
    ("storage.k8s.io/v1", "storageclasses", "StorageClass", "sc", False, False),
    (
        "apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        "crd,crds",
        False,
        True,
    ),
)


def _builtin() -> frozenset[Resource]:
    resources = set()
    for api_version, plural, kind, shortcuts, namespaced, status in _TABLE:
        group, _, version = api_version.rpartition("/")
        resources.add(
            Resource(
                group=group,
                version=version,
                plural=plural,
                kind=kind,
                singular=kind.lower(),
                shortcuts=frozenset(filter(None, shortcuts.split(","))),
                namespaced=namespaced,
                subresources=frozenset({"status"}) if status else frozenset(),
                verbs=ALL_VERBS,
            )
        )
    return frozenset(resources)


BUILTIN_RESOURCES: Final = _builtin()


def resources_from_crd(crd: Mapping[str, Any]) -> list[Resource]:
    """The resources one CustomResourceDefinition (``apiextensions.k8s.io/v1`` or ``v1beta1``)
    serves.

    The storage version is taken as the preferred one. Raises ``ValueError`` with what is wrong
    for anything that is not a usable CRD.
    """
    if crd.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"not a CustomResourceDefinition: kind={crd.get('kind')!r}")
    name = (crd.get("metadata") or {}).get("name", "?")
    spec = crd.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError(f"the CRD {name!r} has no spec")
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    if not (isinstance(group, str) and isinstance(plural, str) and isinstance(kind, str)):
        raise ValueError(f"the CRD {name!r} lacks spec.group, spec.names.plural or .kind")
    versions: Iterable[Mapping[str, Any]] = spec.get("versions") or []
    if not versions and spec.get("version"):
        # apiextensions.k8s.io/v1beta1 allowed one version at the top level instead.
        versions = [{"name": spec["version"], "served": True, "storage": True}]
    resources = []
    for version in versions:
        if not version.get("served", True):
            continue
        resources.append(
            Resource(
                group=group,
                version=str(version.get("name")),
                plural=plural,
                kind=kind,
                singular=str(names.get("singular") or kind.lower()),
                shortcuts=frozenset(names.get("shortNames") or ()),
                categories=frozenset(names.get("categories") or ()),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                # v1beta1 also had the subresources common to all versions at the top level.
                subresources=frozenset(
                    version.get("subresources") or spec.get("subresources") or ()
                ),
                preferred=bool(version.get("storage", False)),
                verbs=ALL_VERBS,
            )
        )
    if not resources:
        raise ValueError(f"the CRD {name!r} serves no versions")
    return resources
