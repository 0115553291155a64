"""Typed resources: msgspec models for spec and status, and CRDs generated from them.

::

    import msgspec
    import trioperator as kopf
    from trioperator import typed

    class WidgetSpec(msgspec.Struct, kw_only=True, rename="camel"):
        image: str
        replicas: Annotated[int, msgspec.Meta(ge=0, le=10)] = 1

    class WidgetStatus(msgspec.Struct, kw_only=True, rename="camel"):
        ready_replicas: int = 0

    @typed.resource("example.com", "v1", short_names=["wdg"])
    class Widget(msgspec.Struct, kw_only=True):
        spec: WidgetSpec
        status: WidgetStatus | None = None

    @kopf.on.create(Widget)
    def create_fn(spec: WidgetSpec, **_: object) -> WidgetStatus:
        ...

``trioperator crd FILE.py`` prints the model's CustomResourceDefinition. See
docs/typed-resources.md.
"""

from __future__ import annotations

from trioperator._engine.conversion import ConversionError, convert_object, convert_review
from trioperator._engine.crd_schema import (
    SchemaError,
    crd_manifest,
    crd_manifests,
    structural_schema,
)
from trioperator._engine.models import (
    PrinterColumn,
    ResourceModel,
    Scale,
    SpecDecodeError,
    conversion,
    declared_models,
    model_of,
    resource,
)
from trioperator._runtime.handling.typed_calls import INVALID_REASON

__all__ = [
    "INVALID_REASON",
    "ConversionError",
    "PrinterColumn",
    "ResourceModel",
    "Scale",
    "SchemaError",
    "SpecDecodeError",
    "conversion",
    "convert_object",
    "convert_review",
    "crd_manifest",
    "crd_manifests",
    "declared_models",
    "model_of",
    "resource",
    "structural_schema",
]
