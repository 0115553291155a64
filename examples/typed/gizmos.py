"""Two versions of one typed resource, converted by the operator's conversion webhook.

Gizmo v1 says its size in words (``size: "3 gadgets"``); v2 in fields (``count: 3``,
``unit: gadgets``). v1 is stored; the conversion functions below convert between them, and
the operator serves them on its webhook server (the CRD's ``spec.conversion`` is pointed at it
when the operator starts)::

    trioperator crd examples/typed/gizmos.py | kubectl apply -f -
    trioperator run examples/typed/gizmos.py
    kubectl get gizmos.v2.examples.trioperator.dev -o yaml

The handler serves the stored version, v1, whatever version the Gizmos are written in: its
watch needs no conversion, so it works before the CRD's conversion is pointed at the webhook
(which happens only once the operator runs).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import trioperator as kopf
from trioperator import typed

GROUP = "examples.trioperator.dev"


class GizmoSpecV1(msgspec.Struct, kw_only=True):
    size: Annotated[str, msgspec.Meta(pattern=r"^[0-9]+ [a-z]+$", description="'3 gadgets'")]


class GizmoSpecV2(msgspec.Struct, kw_only=True):
    count: Annotated[int, msgspec.Meta(ge=0)]
    unit: Annotated[str, msgspec.Meta(pattern=r"^[a-z]+$")] = "gadgets"


@typed.resource(GROUP, "v1", kind="Gizmo", storage=True)
class GizmoV1(msgspec.Struct, kw_only=True):
    """A gizmo (v1: its size in words)."""

    spec: GizmoSpecV1


@typed.resource(GROUP, "v2", kind="Gizmo")
class GizmoV2(msgspec.Struct, kw_only=True):
    """A gizmo (v2: its size in fields)."""

    spec: GizmoSpecV2


@typed.conversion(GizmoV1, GizmoV2)
def v1_to_v2(gizmo: GizmoV1) -> GizmoV2:
    count, unit = gizmo.spec.size.split(" ", 1)
    return GizmoV2(spec=GizmoSpecV2(count=int(count), unit=unit))


@typed.conversion(GizmoV2, GizmoV1)
def v2_to_v1(gizmo: GizmoV2) -> GizmoV1:
    return GizmoV1(spec=GizmoSpecV1(size=f"{gizmo.spec.count} {gizmo.spec.unit}"))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # The API server calls the conversion webhook at 127.0.0.1 (a local control plane); in a
    # cluster, kopf.WebhookServiceServer (docs/admission.md) serves it behind a Service.
    settings.admission.server = kopf.WebhookServer(addr="127.0.0.1")
    settings.admission.managed = "gizmos.examples.trioperator.dev"


@kopf.on.create(GizmoV1)
def create_fn(spec: GizmoSpecV1, name: str, logger: Any, **_: Any) -> None:
    logger.info(f"Gizmo {name}: {spec.size}.")
