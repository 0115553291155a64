"""The decorators that declare handlers, with Kopf's names, arguments and defaults.

Usage::

    import trioperator as kopf

    @kopf.on.create('kopfexamples')
    def create_fn(spec, **_):
        ...

Every decorator takes ``flavor="trio"|"asyncio"`` for the library an async handler is written
for (default: ``settings.execution.async_flavor``, normally detected from the handler's module;
see ``trioperator._engine.flavors``).

Every decorator validates its options when it is called (so mistakes surface at import time),
registers one handler when applied, and returns the function unchanged. The signatures are
spelled out in full for IDEs and type checkers; the shared work lives in the helpers below.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

import msgspec

from trioperator._client.resources import Resource
from trioperator._engine.errors import ErrorsMode
from trioperator._engine.filters import FieldPath, FieldSpec, MetaFilter, ValueFilter, WhenFilterFn
from trioperator._engine.flavors import Flavor, check_flavor
from trioperator._engine.handlers import (
    Activity,
    ActivityHandler,
    BaseHandler,
    ChangingHandler,
    DaemonHandler,
    DelayFn,
    IndexingHandler,
    ReconcilingHandler,
    RelayingHandler,
    TimerHandler,
    WatchingHandler,
    WebhookHandler,
    WebhookOperation,
    WebhookType,
    build_subhandler,
    check_bool,
    check_common_options,
    check_delay,
    check_filters,
    check_operations,
    check_seconds,
    generate_id,
)
from trioperator._engine.ids import HandlerId
from trioperator._engine.models import model_of
from trioperator._engine.reasons import Reason
from trioperator._engine.registry import (
    OperatorRegistry,
    current_subregistry,
    get_default_registry,
)
from trioperator._engine.selectors import Marker, Selector
from trioperator._runtime.handling.typed_calls import typed_handler

__all__ = [
    "cleanup",
    "create",
    "daemon",
    "delete",
    "event",
    "field",
    "index",
    "login",
    "mutate",
    "probe",
    "reconcile",
    "register",
    "resume",
    "startup",
    "subhandler",
    "timer",
    "update",
    "validate",
]

_FnT = TypeVar("_FnT", bound=Callable[..., Any])

ResourceArg = str | Marker | Callable[[Resource], bool] | type[msgspec.Struct] | None
"""The first positional resource argument: a name/group, ``EVERYTHING``, a callable, or a
resource model (a Struct marked with ``trioperator.typed.resource``)."""

NameArg = str | Marker | None


# ------------------------------------------------------------------------------------ helpers


def _selector(
    arg1: ResourceArg, arg2: NameArg, arg3: NameArg, /, **keywords: str | None
) -> Selector:
    """The decorator's resource: a ``Selector`` of the arguments, or of a resource model."""
    model = model_of(arg1)
    if model is None:
        return Selector(arg1, arg2, arg3, **keywords)  # type: ignore[arg-type]
    if arg2 is not None or arg3 is not None or any(v is not None for v in keywords.values()):
        raise TypeError(
            f"The resource model {model.kind} names the resource on its own: "
            "give no other resource arguments."
        )
    return Selector(group=model.group, version=model.version, plural=model.plural)


def _typed(fn: _FnT, field: FieldPath | None) -> _FnT:
    """``fn`` itself, or a wrapper decoding its typed arguments (docs/typed-resources.md)."""
    wrapper = typed_handler(fn, field=field)
    return fn if wrapper is None else wrapper  # type: ignore[return-value]


def _check_registry(registry: OperatorRegistry | None) -> None:
    if registry is not None and not isinstance(registry, OperatorRegistry):
        raise TypeError(f"registry= must be an OperatorRegistry, got {registry!r}.")


def _common(
    *,
    id: str | None,
    param: Any,
    errors: ErrorsMode | None,
    timeout: float | None,
    retries: int | None,
    backoff: float | None,
    flavor: Flavor | None = None,
) -> dict[str, Any]:
    check_common_options(id=id, errors=errors, timeout=timeout, retries=retries, backoff=backoff)
    return {
        "flavor": check_flavor(flavor),
        "param": param,
        "errors": errors,
        "timeout": timeout,
        "retries": retries,
        "backoff": backoff,
    }


# The decorators check their filters in place: stacklevel 2 is the user's module (through the
# partial, check_filters is called right from the decorator).
_filters = functools.partial(check_filters, stacklevel=2)


def _registering(
    registry: OperatorRegistry | None,
    *,
    id: str | None,
    field: FieldPath | None,
    build: Callable[..., BaseHandler],
) -> Callable[[_FnT], _FnT]:
    """The actual decorator: name the handler after the function, build it, register it."""
    _check_registry(registry)

    def decorator(fn: _FnT) -> _FnT:
        if not callable(fn):
            raise TypeError(f"A handler must be callable, got {fn!r}.")
        real_registry = registry if registry is not None else get_default_registry()
        # Field handlers get the field in their id, so one function can serve several fields.
        handler_id: HandlerId = generate_id(fn, id=id, suffix=".".join(field or ()))
        real_registry.append(build(fn=_typed(fn, field), id=handler_id))
        return fn

    return decorator


def _activity(
    activity: Activity,
    *,
    id: str | None,
    param: Any,
    errors: ErrorsMode | None,
    timeout: float | None,
    retries: int | None,
    backoff: float | None,
    registry: OperatorRegistry | None,
    flavor: Flavor | None = None,
) -> Callable[[_FnT], _FnT]:
    common = _common(
        id=id,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        flavor=flavor,
    )
    build = functools.partial(ActivityHandler, activity=activity, **common)
    return _registering(registry, id=id, field=None, build=build)


def _changing(
    selector: Selector,
    *,
    reason: Reason | None,
    common: dict[str, Any],
    filters: dict[str, Any],
    registry: OperatorRegistry | None,
    id: str | None,
    field_needs_change: bool,
    initial: bool | None = None,
    deleted: bool | None = None,
    requires_finalizer: bool | None = None,
    old: ValueFilter = None,
    new: ValueFilter = None,
) -> Callable[[_FnT], _FnT]:
    build = functools.partial(
        ChangingHandler,
        selector=selector,
        reason=reason,
        initial=initial,
        deleted=deleted,
        requires_finalizer=requires_finalizer,
        field_needs_change=field_needs_change,
        old=old,
        new=new,
        **common,
        **filters,
    )
    return _registering(registry, id=id, field=filters["field"], build=build)


def _webhook(
    reason: WebhookType,
    selector: Selector,
    *,
    id: str | None,
    param: Any,
    operation: WebhookOperation | None,
    operations: Collection[WebhookOperation] | None,
    subresource: str | None,
    persistent: bool | None,
    side_effects: bool | None,
    ignore_failures: bool | None,
    filters: dict[str, Any],
    registry: OperatorRegistry | None,
    flavor: Flavor | None = None,
) -> Callable[[_FnT], _FnT]:
    check_common_options(id=id)
    # stacklevel=3: check_operations <- this helper <- the decorator <- the user's module.
    real_operations = check_operations(operation, operations, stacklevel=3)
    if subresource is not None and (not isinstance(subresource, str) or not subresource):
        raise TypeError(f"subresource= must be a non-empty string or None, got {subresource!r}.")
    check_bool("persistent", persistent)
    check_bool("side_effects", side_effects)
    check_bool("ignore_failures", ignore_failures)
    build = functools.partial(
        WebhookHandler,
        selector=selector,
        param=param,
        reason=reason,
        operations=real_operations,
        subresource=subresource,
        persistent=bool(persistent),
        side_effects=bool(side_effects),
        ignore_failures=bool(ignore_failures),
        flavor=check_flavor(flavor),
        **filters,
    )
    return _registering(registry, id=id, field=filters["field"], build=build)


# --------------------------------------------------------------------------------- activities


def startup(
    *,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.startup()``: runs (with retries) before the operator starts serving anything."""
    return _activity(
        Activity.STARTUP,
        id=id,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        registry=registry,
        flavor=flavor,
    )


def cleanup(
    *,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.cleanup()``: runs when the operator exits, after everything else stopped."""
    return _activity(
        Activity.CLEANUP,
        id=id,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        registry=registry,
        flavor=flavor,
    )


def login(
    *,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.login()``: custom (re-)authentication; returns a ``ConnectionInfo``."""
    return _activity(
        Activity.AUTHENTICATION,
        id=id,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        registry=registry,
        flavor=flavor,
    )


def probe(
    *,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.probe()``: a liveness metric, reported under the handler's id."""
    return _activity(
        Activity.PROBE,
        id=id,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        registry=registry,
        flavor=flavor,
    )


# ---------------------------------------------------------------------------------- admission


def validate(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    operation: WebhookOperation | None = None,
    operations: Collection[WebhookOperation] | None = None,
    subresource: str | None = None,
    persistent: bool | None = None,
    side_effects: bool | None = None,
    ignore_failures: bool | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.validate()``: a validating admission webhook."""
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    return _webhook(
        WebhookType.VALIDATING,
        selector,
        id=id,
        param=param,
        operation=operation,
        operations=operations,
        subresource=subresource,
        persistent=persistent,
        side_effects=side_effects,
        ignore_failures=ignore_failures,
        filters=_filters(
            labels=labels, annotations=annotations, when=when, field=field, value=value
        ),
        registry=registry,
        flavor=flavor,
    )


def mutate(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    operation: WebhookOperation | None = None,
    operations: Collection[WebhookOperation] | None = None,
    subresource: str | None = None,
    persistent: bool | None = None,
    side_effects: bool | None = None,
    ignore_failures: bool | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.mutate()``: a mutating admission webhook (edits the ``patch`` kwarg)."""
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    return _webhook(
        WebhookType.MUTATING,
        selector,
        id=id,
        param=param,
        operation=operation,
        operations=operations,
        subresource=subresource,
        persistent=persistent,
        side_effects=side_effects,
        ignore_failures=ignore_failures,
        filters=_filters(
            labels=labels, annotations=annotations, when=when, field=field, value=value
        ),
        registry=registry,
        flavor=flavor,
    )


# ----------------------------------------------------------------------------- state changes


def resume(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    deleted: bool | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.resume()``: once per object and operator process, mixed into its first cycle.

    Skipped for objects being deleted unless ``deleted=True``.
    """
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    check_bool("deleted", deleted)
    return _changing(
        selector,
        reason=None,
        initial=True,
        deleted=deleted,
        field_needs_change=False,
        common=_common(
            id=id,
            param=param,
            errors=errors,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            flavor=flavor,
        ),
        filters=_filters(
            labels=labels, annotations=annotations, when=when, field=field, value=value
        ),
        registry=registry,
        id=id,
    )


def create(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.create()``: the object was created (or first seen without a diff-base)."""
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    return _changing(
        selector,
        reason=Reason.CREATE,
        field_needs_change=False,
        common=_common(
            id=id,
            param=param,
            errors=errors,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            flavor=flavor,
        ),
        filters=_filters(
            labels=labels, annotations=annotations, when=when, field=field, value=value
        ),
        registry=registry,
        id=id,
    )


def update(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    old: ValueFilter | None = None,
    new: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.update()``: an essential change; with ``field=``, only when that field changes."""
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    return _changing(
        selector,
        reason=Reason.UPDATE,
        field_needs_change=True,
        old=old,
        new=new,
        common=_common(
            id=id,
            param=param,
            errors=errors,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            flavor=flavor,
        ),
        filters=_filters(
            labels=labels,
            annotations=annotations,
            when=when,
            field=field,
            value=value,
            old=old,
            new=new,
        ),
        registry=registry,
        id=id,
    )


def delete(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    optional: bool | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.delete()``: the object is marked for deletion.

    A finalizer holds the object until the handler succeeds, unless ``optional=True``.
    """
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    check_bool("optional", optional)
    return _changing(
        selector,
        reason=Reason.DELETE,
        requires_finalizer=not optional,
        field_needs_change=False,
        common=_common(
            id=id,
            param=param,
            errors=errors,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            flavor=flavor,
        ),
        filters=_filters(
            labels=labels, annotations=annotations, when=when, field=field, value=value
        ),
        registry=registry,
        id=id,
    )


def field(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec,
    value: ValueFilter | None = None,
    old: ValueFilter | None = None,
    new: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.field()``: the given field changed (was added, modified, or removed)."""
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    filters = _filters(
        labels=labels,
        annotations=annotations,
        when=when,
        field=field,
        value=value,
        old=old,
        new=new,
    )
    if filters["field"] is None:
        raise TypeError("@kopf.on.field() needs a non-empty field=.")
    return _changing(
        selector,
        reason=None,
        field_needs_change=True,
        old=old,
        new=new,
        common=_common(
            id=id,
            param=param,
            errors=errors,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            flavor=flavor,
        ),
        filters=filters,
        registry=registry,
        id=id,
    )


# -------------------------------------------------------------------- events, indices, spawning


def event(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.on.event()``: every raw watch event; failures are logged and ignored."""
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    check_common_options(id=id)
    filters = _filters(labels=labels, annotations=annotations, when=when, field=field, value=value)
    build = functools.partial(
        WatchingHandler, selector=selector, param=param, flavor=check_flavor(flavor), **filters
    )
    return _registering(registry, id=id, field=filters["field"], build=build)


ResourceSpec = str | tuple[str, ...] | Selector | Resource
"""A resource in ``owns=``/``watches=``: ``"configmaps"``, ``("apps", "deployments")``,
``("apps/v1", "deployments")``, a ``Selector`` or a discovered ``Resource``."""


def _selector_of(spec: object, option: str) -> Selector:
    if isinstance(spec, Selector):
        return spec
    if isinstance(spec, Resource):
        return Selector(group=spec.group, version=spec.version, plural=spec.plural)
    if isinstance(spec, str):
        return Selector(spec)
    if isinstance(spec, tuple) and 1 <= len(spec) <= 3 and all(isinstance(p, str) for p in spec):
        return Selector(*spec)
    raise TypeError(
        f"{option}= takes resources as a name, a tuple of (group[/version], plural), "
        f"a Selector or a Resource, not {spec!r}."
    )


def reconcile(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    timeout: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    owns: Iterable[ResourceSpec] = (),
    watches: Mapping[ResourceSpec, Callable[..., Any]] | None = None,
    resync: float | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@trioperator.on.reconcile()`` (trioperator's own, not Kopf's): level-based handling.

    The handler gets the current state of an object (``body``, ``spec``, ``meta``, ``status``,
    ``patch``, ``logger``, ..., and ``deleting``) whenever the object changes, an object it
    ``owns`` (a child whose controller ownerReference points at it) changes or is deleted, a
    ``watches`` mapper names it, its requeue time comes, or ``resync`` seconds pass. Runs are
    coalesced per object, one at a time. Returning ``Requeue(after=s)`` (or seconds) runs it
    again later; an exception retries it with an exponential backoff. ``when`` (e.g.
    ``generation_changed``) filters the object's own changes only. See docs/reconcile.md.
    """
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    check_common_options(id=id, timeout=timeout)
    check_seconds("resync", resync, positive=True)
    filters = _filters(labels=labels, annotations=annotations, when=when, field=None, value=None)
    if isinstance(owns, (str, Selector, Resource)):
        owns = [owns]
    owned = tuple(_selector_of(spec, "owns") for spec in owns)
    mapped: list[tuple[Selector, Callable[..., Any]]] = []
    if watches is not None:
        if not isinstance(watches, Mapping):
            raise TypeError(f"watches= must map resources to mapper functions, got {watches!r}.")
        for spec, mapper in watches.items():
            if not callable(mapper):
                raise TypeError(f"watches= needs a callable mapper for {spec!r}, got {mapper!r}.")
            mapped.append((_selector_of(spec, "watches"), mapper))
    build = functools.partial(
        ReconcilingHandler,
        selector=selector,
        param=param,
        timeout=timeout,
        flavor=check_flavor(flavor),
        owns=owned,
        watches=tuple(mapped),
        resync=resync,
        **filters,
    )
    _check_registry(registry)

    def decorator(fn: _FnT) -> _FnT:
        if not callable(fn):
            raise TypeError(f"A handler must be callable, got {fn!r}.")
        real_registry = registry if registry is not None else get_default_registry()
        handler_id: HandlerId = generate_id(fn, id=id)
        real_registry.append(build(fn=_typed(fn, None), id=handler_id))
        # One relay per child resource and mapper: the watchers of those resources turn
        # their events into requests to reconcile objects of ``selector``.
        for child in owned:
            real_registry.append(
                RelayingHandler(
                    fn=fn,
                    id=HandlerId(f"{handler_id}/owns/{child!r}"),
                    selector=child,
                    target=selector,
                    by_owner=True,
                )
            )
        for watched, mapper in mapped:
            real_registry.append(
                RelayingHandler(
                    fn=mapper,
                    id=HandlerId(f"{handler_id}/watches/{watched!r}"),
                    selector=watched,
                    target=selector,
                )
            )
        return fn

    return decorator


def index(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.index()``: an in-memory index, passed to handlers as a kwarg named by its id."""
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    common = _common(
        id=id,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        flavor=flavor,
    )
    filters = _filters(labels=labels, annotations=annotations, when=when, field=field, value=value)
    build = functools.partial(IndexingHandler, selector=selector, **common, **filters)
    # No field suffix here (unlike the other resource handlers): the id is the kwarg name under
    # which other handlers receive the index, and Kopf names it after the function or ``id=``.
    return _registering(registry, id=id, field=None, build=build)


def daemon(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    initial_delay: float | DelayFn | None = None,
    cancellation_backoff: float | None = None,
    cancellation_timeout: float | None = None,
    cancellation_polling: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.daemon()``: a long-running task per object, stopped on deletion or exit."""
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    common = _common(
        id=id,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        flavor=flavor,
    )
    filters = _filters(labels=labels, annotations=annotations, when=when, field=field, value=value)
    check_delay("initial_delay", initial_delay)
    check_seconds("cancellation_backoff", cancellation_backoff)
    check_seconds("cancellation_timeout", cancellation_timeout)
    check_seconds("cancellation_polling", cancellation_polling, positive=True)
    build = functools.partial(
        DaemonHandler,
        selector=selector,
        initial_delay=initial_delay,
        cancellation_backoff=cancellation_backoff,
        cancellation_timeout=cancellation_timeout,
        cancellation_polling=cancellation_polling,
        **common,
        **filters,
    )
    return _registering(registry, id=id, field=filters["field"], build=build)


def timer(
    arg1: ResourceArg = None,
    arg2: NameArg = None,
    arg3: NameArg = None,
    /,
    *,
    group: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    shortcut: str | None = None,
    category: str | None = None,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    interval: float | None = None,
    initial_delay: float | DelayFn | None = None,
    sharp: bool | None = None,
    idle: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    flavor: Flavor | None = None,
    registry: OperatorRegistry | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.timer()``: runs every ``interval`` seconds per object (after ``idle`` calm)."""
    selector = _selector(
        arg1, arg2, arg3,
        group=group, version=version, kind=kind, plural=plural,
        singular=singular, shortcut=shortcut, category=category,
    )  # fmt: skip
    common = _common(
        id=id,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        flavor=flavor,
    )
    filters = _filters(labels=labels, annotations=annotations, when=when, field=field, value=value)
    check_seconds("interval", interval, positive=True)
    check_delay("initial_delay", initial_delay)
    check_bool("sharp", sharp)
    check_seconds("idle", idle)
    build = functools.partial(
        TimerHandler,
        selector=selector,
        interval=interval,
        initial_delay=initial_delay,
        sharp=sharp,
        idle=idle,
        **common,
        **filters,
    )
    return _registering(registry, id=id, field=filters["field"], build=build)


# ------------------------------------------------------------------------------- sub-handlers


def subhandler(
    *,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    field: FieldSpec | None = None,
    value: ValueFilter | None = None,
    old: ValueFilter | None = None,
    new: ValueFilter | None = None,
    flavor: Flavor | None = None,
) -> Callable[[_FnT], _FnT]:
    """``@kopf.subhandler()``: declare a sub-handler of the running resource-changing handler.

    Used inside a handler; the sub-handler's id is ``parent-id/child-id``. The parent is called
    again on every cycle until all its sub-handlers are done, so it must declare the same set
    of sub-handlers each time and have no side effects of its own.
    """

    def decorator(fn: _FnT) -> _FnT:
        subregistry = current_subregistry()
        handler = build_subhandler(
            fn,
            parent=subregistry.parent,
            id=id,
            param=param,
            errors=errors,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            labels=labels,
            annotations=annotations,
            when=when,
            field=field,
            value=value,
            old=old,
            new=new,
            flavor=flavor,
            stacklevel=2,
        )
        subregistry.append(handler)
        return fn

    return decorator


def register(
    fn: _FnT,
    *,
    id: str | None = None,
    param: Any | None = None,
    errors: ErrorsMode | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    labels: MetaFilter | None = None,
    annotations: MetaFilter | None = None,
    when: WhenFilterFn | None = None,
    flavor: Flavor | None = None,
) -> _FnT:
    """Register ``fn`` as a sub-handler of the running handler (``@kopf.subhandler`` as a call)."""
    subregistry = current_subregistry()
    handler = build_subhandler(
        fn,
        parent=subregistry.parent,
        id=id,
        param=param,
        errors=errors,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        labels=labels,
        annotations=annotations,
        when=when,
        flavor=flavor,
        stacklevel=2,
    )
    subregistry.append(handler)
    return fn
