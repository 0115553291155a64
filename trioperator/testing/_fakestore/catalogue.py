"""The resources the store serves: what it knows of each, and the built-in ones."""

from __future__ import annotations

import base64
import dataclasses
import hashlib

from trioperator.testing._fakestore.values import Obj, ResourceKey

CORE_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CUSTOM_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")


@dataclasses.dataclass
class ResourceDef:
    """What the store knows about one resource (the union of its served versions)."""

    group: str
    versions: list[str]
    """Served versions; the first one is the storage (and preferred) version."""
    plural: str
    kind: str
    namespaced: bool = True
    singular: str = ""
    list_kind: str = ""
    short_names: list[str] = dataclasses.field(default_factory=list)
    categories: list[str] = dataclasses.field(default_factory=list)
    status_subresource: bool = False
    scale_subresource: bool = False
    """A ``scale`` subresource (``autoscaling/v1`` Scale) over ``spec.replicas``."""
    tracks_generation: bool = False
    custom: bool = False
    """A custom resource: unstructured semantics (kind required, no strategic merge, ...)."""
    returns_deleted_object: bool = False
    """Whether an immediate DELETE answers with the object rather than a ``Status``."""
    field_labels: tuple[str, ...] = ()
    """Field selectors supported beyond ``metadata.name`` (and ``metadata.namespace``)."""
    verbs: tuple[str, ...] = CORE_VERBS
    extra_subresources: tuple[str, ...] = ()
    """Subresources listed in discovery only (e.g. ``namespaces/finalize``)."""

    def __post_init__(self) -> None:
        self.list_kind = self.list_kind or f"{self.kind}List"

    @property
    def key(self) -> ResourceKey:
        return (self.group, self.plural)

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    def api_version(self, version: str | None = None) -> str:
        version = version or self.storage_version
        return f"{self.group}/{version}" if self.group else version

    @property
    def selectable_fields(self) -> tuple[str, ...]:
        base = ("metadata.name", "metadata.namespace") if self.namespaced else ("metadata.name",)
        return base + self.field_labels

    @property
    def storage_version_hash(self) -> str:
        digest = hashlib.sha256(
            f"{self.group}/{self.storage_version}/{self.kind}".encode()
        ).digest()
        return base64.b64encode(digest[:8]).decode()

    def discovery_entries(self) -> list[Obj]:
        entry: Obj = {
            "name": self.plural,
            "singularName": self.singular if self.custom else "",
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entry["storageVersionHash"] = self.storage_version_hash
        entries = [entry]
        subresources = sorted(
            [*self.extra_subresources, *(("status",) if self.status_subresource else ())]
        )
        for sub in subresources:
            verbs = ["update"] if sub == "finalize" else ["get", "patch", "update"]
            entries.append(
                {
                    "name": f"{self.plural}/{sub}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": verbs,
                }
            )
        if self.scale_subresource:
            entries.insert(
                1,
                {
                    "name": f"{self.plural}/scale",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                },
            )
        return entries


def builtin_resources() -> list[ResourceDef]:
    """The built-in resources the fake serves (a small subset of a real cluster's)."""
    return [
        ResourceDef(
            "",
            ["v1"],
            "namespaces",
            "Namespace",
            namespaced=False,
            short_names=["ns"],
            status_subresource=True,
            returns_deleted_object=True,
            field_labels=("status.phase",),
            verbs=tuple(v for v in CORE_VERBS if v != "deletecollection"),
            extra_subresources=("finalize",),
        ),
        ResourceDef("", ["v1"], "configmaps", "ConfigMap", short_names=["cm"]),
        ResourceDef("", ["v1"], "secrets", "Secret", field_labels=("type",)),
        ResourceDef(
            "",
            ["v1"],
            "pods",
            "Pod",
            short_names=["po"],
            categories=["all"],
            status_subresource=True,
            returns_deleted_object=True,
            field_labels=(
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ),
        ),
        ResourceDef(
            "",
            ["v1"],
            "events",
            "Event",
            short_names=["ev"],
            field_labels=(
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ),
        ),
        ResourceDef(
            "admissionregistration.k8s.io",
            ["v1"],
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            namespaced=False,
            categories=["api-extensions"],
        ),
        ResourceDef(
            "admissionregistration.k8s.io",
            ["v1"],
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            namespaced=False,
            categories=["api-extensions"],
        ),
        ResourceDef(
            "apiextensions.k8s.io",
            ["v1"],
            "customresourcedefinitions",
            "CustomResourceDefinition",
            namespaced=False,
            short_names=["crd", "crds"],
            categories=["api-extensions"],
            status_subresource=True,
            tracks_generation=True,
            returns_deleted_object=True,
        ),
        ResourceDef(
            "apps",
            ["v1"],
            "deployments",
            "Deployment",
            short_names=["deploy"],
            categories=["all"],
            status_subresource=True,
            scale_subresource=True,
            tracks_generation=True,
        ),
        ResourceDef("coordination.k8s.io", ["v1"], "leases", "Lease"),
        ResourceDef("events.k8s.io", ["v1"], "events", "Event", short_names=["ev"]),
    ]
