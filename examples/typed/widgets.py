"""A typed operator: the Widget resource declared as msgspec Structs.

The same classes give the handlers validated, typed specs and give the cluster its CRD::

    trioperator crd examples/typed/widgets.py > examples/typed/crd.yaml
    kubectl apply -f examples/typed/crd.yaml
    trioperator run examples/typed/widgets.py
    kubectl apply -f examples/typed/widget.yaml

``widgets_dict.py`` next to it is the same operator with plain dicts, as in Kopf.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import trioperator as kopf
from trioperator import typed

Replicas = Annotated[int, msgspec.Meta(ge=0, le=10, description="How many copies to run.")]


class WidgetSpec(msgspec.Struct, kw_only=True, rename="camel"):
    """What the widget should be."""

    image: Annotated[str, msgspec.Meta(min_length=1, description="The container image.")]
    replicas: Replicas = 1
    mode: Literal["fast", "safe"] = "safe"
    port: Annotated[int | str, msgspec.Meta(description="A port number or name.")] = 80
    node_labels: dict[str, str] = {}
    settings: Annotated[dict[str, Any], msgspec.Meta(description="Free-form, kept as is.")] = {}


class WidgetStatus(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """What the operator has made of it."""

    replicas: int = 0
    phase: str | None = None


@typed.resource(
    "examples.trioperator.dev",
    "v1",
    short_names=["wdg"],
    categories=["trioperator"],
    printer_columns=[
        typed.PrinterColumn("Image", ".spec.image"),
        typed.PrinterColumn("Replicas", ".spec.replicas", type="integer"),
        typed.PrinterColumn("Phase", ".status.phase"),
    ],
    scale=typed.Scale(),
)
class Widget(msgspec.Struct, kw_only=True):
    """A widget: an image run as a number of replicas."""

    spec: WidgetSpec
    status: WidgetStatus | None = None


@kopf.on.create(Widget)
def create_fn(spec: WidgetSpec, patch: kopf.Patch, logger: Any, **_: Any) -> None:
    logger.info(f"Creating {spec.replicas} replica(s) of {spec.image} in {spec.mode} mode.")
    patch["status"] = WidgetStatus(replicas=spec.replicas, phase="Running")


@kopf.on.update(Widget)
def update_fn(old: WidgetSpec, new: WidgetSpec, patch: kopf.Patch, logger: Any, **_: Any) -> None:
    if old.replicas != new.replicas:
        logger.info(f"Scaling from {old.replicas} to {new.replicas} replica(s).")
    patch["status"] = WidgetStatus(replicas=new.replicas, phase="Running")
