"""Typed resources: a custom resource declared as msgspec Structs (see docs/typed-resources.md).

A model is a ``msgspec.Struct`` with a ``spec`` field (and usually a ``status`` field), marked
with :func:`resource`, which keeps what the CustomResourceDefinition needs besides the schema:
the group, version, kind, names, scope, printer columns and subresources. The same class then
stands for the resource in the handler decorators (``@kopf.on.create(Widget)``) and is the
source of the generated CRD (``trioperator crd``, ``_engine/crd_schema.py``).

This module only declares and decodes; it imports neither trio nor asyncio (the handlers'
wrappers built from it are searched for those when their async flavor is detected).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, Final, Literal, TypeVar, Union

import msgspec

__all__ = [
    "MODEL_ATTR",
    "PrinterColumn",
    "ResourceModel",
    "Scale",
    "SpecDecodeError",
    "declared_models",
    "decode",
    "encode_if_struct",
    "model_of",
    "resource",
]

MODEL_ATTR: Final = "__trioperator_model__"
"""The class attribute holding a model's :class:`ResourceModel`."""

Scope = Literal["Namespaced", "Cluster"]
ColumnType = Literal["integer", "number", "string", "boolean", "date"]

_DNS_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_VERSION: Final = re.compile(r"v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?")
_KIND: Final = re.compile(r"[A-Z][A-Za-z0-9]*")


@dataclasses.dataclass(frozen=True)
class PrinterColumn:
    """A column of ``kubectl get`` (the CRD's ``additionalPrinterColumns``)."""

    name: str
    json_path: str
    """A JSONPath into the object, e.g. ``.spec.replicas`` or ``.status.phase``."""
    type: ColumnType = "string"
    description: str | None = None
    format: str | None = None
    priority: int = 0
    """0: shown by default; higher: only with ``kubectl get -o wide``."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("A printer column needs a name.")
        if not self.json_path.startswith("."):
            raise ValueError(
                f"The printer column {self.name!r} needs a JSONPath starting with '.', "
                f"e.g. '.spec.replicas', not {self.json_path!r}."
            )


@dataclasses.dataclass(frozen=True)
class Scale:
    """The ``scale`` subresource: where the replica counts live (JSONPaths)."""

    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    label_selector_path: str | None = None


@dataclasses.dataclass(frozen=True)
class ResourceModel:
    """What :func:`resource` remembers about a model class."""

    cls: type[msgspec.Struct]
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    scope: Scope
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    printer_columns: tuple[PrinterColumn, ...]
    status_subresource: bool
    scale: Scale | None
    served: bool = True
    storage: bool | None = None
    """Whether this version is the one stored in etcd; ``None``: if it is the only version."""

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def spec_type(self) -> Any:
        return _field_type(self.cls, "spec")

    @property
    def status_type(self) -> Any:
        return _field_type(self.cls, "status")


_ModelT = TypeVar("_ModelT", bound=type[msgspec.Struct])

_declared: list[type[msgspec.Struct]] = []


def declared_models() -> list[type[msgspec.Struct]]:
    """Every model class marked by :func:`resource` so far, in the order of declaration."""
    return list(_declared)


def resource(
    group: str,
    version: str,
    *,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    scope: Scope = "Namespaced",
    short_names: Iterable[str] = (),
    categories: Iterable[str] = (),
    printer_columns: Iterable[PrinterColumn] = (),
    status_subresource: bool | None = None,
    scale: Scale | None = None,
    served: bool = True,
    storage: bool | None = None,
) -> Callable[[_ModelT], _ModelT]:
    """Mark a ``msgspec.Struct`` (with a ``spec`` field) as a custom resource's model.

    ``kind`` defaults to the class name, ``plural``/``singular`` to the lowercase kind (+"s"),
    ``status_subresource`` to whether the model has a ``status`` field.

    Several versions of one resource are several models with the same group and kind (and
    names), one of them with ``storage=True``; :func:`conversion` functions convert between
    them (``trioperator crd`` puts them all into one CRD).
    """

    def decorator(cls: _ModelT) -> _ModelT:
        if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
            raise TypeError(f"@resource() marks msgspec.Struct classes, not {cls!r}.")
        fields = {field.name for field in msgspec.structs.fields(cls)}
        if "spec" not in fields:
            raise TypeError(f"The resource model {cls.__name__} needs a 'spec' field.")
        real_kind = kind if kind is not None else cls.__name__
        real_singular = singular if singular is not None else real_kind.lower()
        real_plural = plural if plural is not None else f"{real_singular}s"
        if (
            not group
            or "." not in group
            or not all(_DNS_LABEL.fullmatch(part) for part in group.split("."))
        ):
            raise ValueError(
                f"The group of a custom resource is a DNS name with a dot, e.g. 'example.com', "
                f"not {group!r}."
            )
        if not _VERSION.fullmatch(version):
            raise ValueError(f"Not a Kubernetes API version: {version!r} (e.g. v1, v1beta2).")
        if not _KIND.fullmatch(real_kind):
            raise ValueError(f"A kind is CamelCase, e.g. 'Widget', not {real_kind!r}.")
        for what, name in [("plural", real_plural), ("singular", real_singular)]:
            if not _DNS_LABEL.fullmatch(name):
                raise ValueError(f"The {what} name must be a lowercase DNS label, not {name!r}.")
        if scope not in ("Namespaced", "Cluster"):
            raise ValueError(f"scope= is 'Namespaced' or 'Cluster', not {scope!r}.")
        has_status = "status" in fields
        if status_subresource and not has_status:
            raise TypeError(f"status_subresource=True needs a 'status' field in {cls.__name__}.")
        model = ResourceModel(
            cls=cls,
            group=group,
            version=version,
            kind=real_kind,
            plural=real_plural,
            singular=real_singular,
            scope=scope,
            short_names=_strings("short_names", short_names),
            categories=_strings("categories", categories),
            printer_columns=tuple(printer_columns),
            status_subresource=has_status if status_subresource is None else status_subresource,
            scale=scale,
            served=served,
            storage=storage,
        )
        setattr(cls, MODEL_ATTR, model)
        _declared.append(cls)
        return cls

    return decorator


def _strings(option: str, values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        raise TypeError(f"{option}= takes a list of names, not the string {values!r}.")
    result = tuple(values)
    for value in result:
        if not isinstance(value, str) or not _DNS_LABEL.fullmatch(value):
            raise ValueError(f"{option}= holds lowercase names, not {value!r}.")
    return result


def model_of(obj: object) -> ResourceModel | None:
    """The resource model declared on a class, or ``None`` for anything else."""
    if isinstance(obj, type):
        model = obj.__dict__.get(MODEL_ATTR)
        if isinstance(model, ResourceModel):
            return model
    return None


def _field_type(cls: type[msgspec.Struct], name: str) -> Any:
    hints = typing.get_type_hints(cls, include_extras=False)
    return hints.get(name)


# ---------------------------------------------------------------------------------- conversion

ConversionFn = Callable[[Any], Any]

_conversions: dict[tuple[str, str, str], ConversionFn] = {}
"""(CRD name, from version, to version) -> the function converting a model instance."""

_ConversionT = TypeVar("_ConversionT", bound=ConversionFn)


def conversion(
    source: type[msgspec.Struct], target: type[msgspec.Struct]
) -> Callable[[_ConversionT], _ConversionT]:
    """Mark ``fn(obj: Source) -> Target`` as the conversion between two versions of a resource.

    The function gets a decoded instance of ``source`` (``spec``, ``status``) and returns one of
    ``target``; the object's metadata is carried over by the framework. Conversions chain: with
    v1 -> v2 and v2 -> v3, a v1 object is read as v3 through v2.
    """
    source_model, target_model = model_of(source), model_of(target)
    if source_model is None or target_model is None:
        raise TypeError("@conversion() converts between resource models (typed.resource).")
    if source_model.crd_name != target_model.crd_name or source_model.kind != target_model.kind:
        raise TypeError(
            f"@conversion() converts between versions of one resource, not from "
            f"{source_model.crd_name} to {target_model.crd_name}."
        )
    if source_model.version == target_model.version:
        raise TypeError(f"{source.__name__} and {target.__name__} are the same version.")

    def decorator(fn: _ConversionT) -> _ConversionT:
        if not callable(fn):
            raise TypeError(f"A conversion must be callable, got {fn!r}.")
        key = (source_model.crd_name, source_model.version, target_model.version)
        _conversions[key] = fn
        return fn

    return decorator


def converted_crds() -> frozenset[str]:
    """The CRDs (by name) with at least one conversion function."""
    return frozenset(name for name, _, _ in _conversions)


def conversion_path(crd_name: str, source: str, target: str) -> list[tuple[str, str, ConversionFn]]:
    """The shortest chain of conversions from one version to another: ``[(from, to, fn)]``;
    empty for the same version. Raises ``LookupError`` if there is none."""
    if source == target:
        return []
    edges: dict[str, list[tuple[str, ConversionFn]]] = {}
    for (name, src, dst), fn in _conversions.items():
        if name == crd_name:
            edges.setdefault(src, []).append((dst, fn))
    previous: dict[str, tuple[str, ConversionFn]] = {}
    frontier = [source]
    while frontier and target not in previous:
        following = []
        for version in frontier:
            for nxt, fn in edges.get(version, []):
                if nxt != source and nxt not in previous:
                    previous[nxt] = (version, fn)
                    following.append(nxt)
        frontier = following
    if target not in previous:
        raise LookupError(f"No conversion of {crd_name} from {source} to {target}.")
    path: list[tuple[str, str, ConversionFn]] = []
    version = target
    while version != source:
        src, fn = previous[version]
        path.append((src, version, fn))
        version = src
    return path[::-1]


# ------------------------------------------------------------------------------------ decoding


class SpecDecodeError(ValueError):
    """A value of an object does not decode into the handler's declared type."""

    def __init__(self, what: str, target: str, reason: str) -> None:
        super().__init__(f"{what} does not match {target}: {reason}")
        self.what = what
        self.target = target
        self.reason = reason


def decode(value: Any, target: Any, *, what: str) -> Any:
    """``value`` (a dict from the API) as an instance of ``target`` (strictly typed).

    ``what`` names the value in the error (``spec``, ``old spec``): msgspec says where in it the
    problem is (``at `$.replicas```), rewritten to the object's own path (``spec.replicas``).
    """
    try:
        return msgspec.convert(value, target, strict=True)
    except msgspec.ValidationError as exc:
        raise SpecDecodeError(what, _type_name(target), _reword(str(exc), what)) from None


_AT_PATH: Final = re.compile(r" - at `\$(?P<path>[^`]*)`$")


def _reword(message: str, what: str) -> str:
    """msgspec's ``Expected `int`, got `str` - at `$.replicas``` as ``... at spec.replicas``."""
    root = what.split()[-1]  # "old spec" -> "spec"

    def at(match: re.Match[str]) -> str:
        return f" (at {root}{match['path']})"

    reworded, found = _AT_PATH.subn(at, message)
    return reworded if found else f"{message} (at {root})"


def _type_name(target: Any) -> str:
    return getattr(target, "__name__", None) or repr(target)


def encode_if_struct(value: Any) -> Any:
    """A Struct (a status, a patch's part, a result) as plain dicts; anything else as it is."""
    if isinstance(value, msgspec.Struct):
        return msgspec.to_builtins(value)
    return value


def struct_type(annotation: Any) -> tuple[type[msgspec.Struct], bool] | None:
    """The Struct class an annotation asks for and whether ``None`` is allowed, or ``None``
    when it asks for no Struct (dicts, ``kopf.Spec``, no annotation: left alone)."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) != 1:
            return None
        annotation = args[0]
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return annotation, optional
    return None
